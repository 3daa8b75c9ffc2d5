package cas

import "errors"

// Sentinels, matched with errors.Is. Every error about one blob is an *Error
// naming the key.
var (
	// ErrNotFound: no blob is stored under the key.
	ErrNotFound = errors.New("blob not found")
	// ErrCorrupt: the stored bytes do not match the key or the size the index
	// records, or their frame is damaged. Never returned with wrong bytes.
	ErrCorrupt = errors.New("blob corrupt")
	// ErrInvalidKey: the key is not sandbox-files/sha256/<hex> or
	// sandbox-artifacts/sha256/<hex>.
	ErrInvalidKey = errors.New("invalid blob key")
	// ErrKeyMismatch: Put was given bytes whose sha256 is not the key's.
	ErrKeyMismatch = errors.New("bytes do not match the blob key")
	// ErrReadOnly: a write on a store opened read-only.
	ErrReadOnly = errors.New("blob store is read-only")
	// ErrSyncFailed: an fsync of a pack, a large blob file or a directory
	// failed. What reached the disk is unknown, so the store refuses every
	// later write until it is opened again (Gate).
	ErrSyncFailed = errors.New("fsync failed")
)

// Error is an error about one blob.
type Error struct {
	Key    string
	Err    error  // one of the sentinels above, or an I/O error
	Detail string // what exactly is wrong, may be empty
}

func (e *Error) Error() string {
	s := "cas: " + e.Key + ": " + e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

func corrupt(key, detail string) error { return &Error{Key: key, Err: ErrCorrupt, Detail: detail} }
