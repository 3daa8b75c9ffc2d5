package sbxdb

import (
	"errors"
	"fmt"
	"strings"
)

// Errors about one blob, each the Err of a *BlobError naming the key.
var (
	// ErrBlobNotFound: no blob is stored under the key.
	ErrBlobNotFound = errors.New("blob not found")
	// ErrBlobCorrupt: the stored bytes do not match the key or the size
	// the index records, or their frame is damaged. Never returned with
	// wrong bytes.
	ErrBlobCorrupt = errors.New("blob corrupt")
	// ErrInvalidBlobKey: the key is not sandbox-files/sha256/<hex> or
	// sandbox-artifacts/sha256/<hex> (CheckBlobKey).
	ErrInvalidBlobKey = errors.New("invalid blob key")
	// ErrBlobKeyMismatch: bytes put under a key whose sha256 is not the
	// key's.
	ErrBlobKeyMismatch = errors.New("bytes do not match the blob key")
)

// BlobError is an error about one blob.
type BlobError struct {
	Key    string
	Err    error  // one of the sentinels above, or an I/O error
	Detail string // what exactly is wrong, may be empty
}

func (e *BlobError) Error() string {
	s := "cas: " + e.Key + ": " + e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel.
func (e *BlobError) Unwrap() error { return e.Err }

var (
	// ErrLocked reports that another process holds the store.
	ErrLocked = errors.New("sbxdb: store is in use")
	// ErrFormat reports a store this build cannot read (a newer format,
	// or not an sbxdb store).
	ErrFormat = errors.New("sbxdb: unsupported store format")
	// ErrClosed reports a call on a closed DB.
	ErrClosed = errors.New("sbxdb: store is closed")
	// ErrReadOnly reports a write on a store opened read-only.
	ErrReadOnly = errors.New("sbxdb: store is opened read-only")
	// ErrNoStore reports a read-only Open of a directory holding no store.
	ErrNoStore = errors.New("sbxdb: no store")
	// ErrPoisoned reports a write refused because an earlier fsync of the
	// store failed: of the database at a commit, or of a pack, a large
	// blob file or a directory of the blob store. What reached the disk is
	// then unknown (the kernel may have dropped the pages it could not
	// write), so every later write of the open store fails with it, naming
	// the cause; reads go on. The engine's Recover makes the store
	// writable again in place once the cause is gone (RecoverLoop keeps
	// trying; sbxdb serve runs it), as Close and Open would.
	ErrPoisoned = errors.New("sbxdb: store must be reopened: an earlier sync failed")
)

// ErrAmbiguousRef matches the error of a checkpoint reference that is a
// prefix of more than one checkpoint id (an *AmbiguousRefError).
var ErrAmbiguousRef = errors.New("sbxdb: ambiguous checkpoint reference")

// AmbiguousRefError is a checkpoint reference that is a prefix of more than
// one checkpoint id. It matches ErrAmbiguousRef.
type AmbiguousRefError struct {
	Ref string
	// Candidates are the first ids the reference is a prefix of, in
	// UTF-8 byte order, at most 5 of them.
	Candidates []string
	// Count is how many ids the reference is a prefix of (≥ 2).
	Count int
}

func (e *AmbiguousRefError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %q is a prefix of %d checkpoint ids: ", ErrAmbiguousRef, e.Ref, e.Count)
	for i, c := range e.Candidates {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", c)
	}
	if more := e.Count - len(e.Candidates); more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	b.WriteString("; give more of the id")
	return b.String()
}

// Unwrap returns ErrAmbiguousRef.
func (e *AmbiguousRefError) Unwrap() error { return ErrAmbiguousRef }

// Errors of a metadata database and of a bucket (Options.Metadata and
// Options.Blobs of the engine), as every call returns them.
var (
	// ErrMetadataUnavailable: the database could not be reached or the
	// connection was lost; nothing was written, unless the error is also
	// ErrCommitUnknown. The next call may succeed once the database is
	// back: the store needs no reopening.
	ErrMetadataUnavailable = errors.New("sbxdb: metadata database unavailable")
	// ErrCommitUnknown: the connection was lost while the write committed,
	// so it may be stored. Read the state back (the head, the checkpoint
	// by id) before retrying.
	ErrCommitUnknown = errors.New("sbxdb: commit outcome unknown")
	// ErrBlobsUnavailable: the bucket could not be reached, or its server
	// failed, after the object store's retries. No index entry names an
	// object the failure kept from the bucket: a capture that fails with
	// it commits nothing, and a sweep's delete whose index entry was
	// removed leaves its object behind, for a later gc. The next call may
	// succeed once the bucket is back: the store needs no reopening.
	ErrBlobsUnavailable = errors.New("sbxdb: object store unavailable")
)
