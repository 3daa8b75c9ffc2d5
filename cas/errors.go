package cas

import (
	"errors"

	"github.com/sbxdb/sbxdb"
)

// Sentinels, matched with errors.Is. Every error about one blob is an *Error
// naming the key.
var (

	// ErrReadOnly: a write on a store opened read-only.
	ErrReadOnly = errors.New("blob store is read-only")
	// ErrSyncFailed: an fsync of a pack, a large blob file or a directory
	// failed. What reached the disk is unknown, so the store refuses every
	// later write until it is opened again (Gate).
	ErrSyncFailed = errors.New("fsync failed")
)

func corrupt(key, detail string) error {
	return &sbxdb.BlobError{Key: key, Err: sbxdb.ErrBlobCorrupt, Detail: detail}
}
