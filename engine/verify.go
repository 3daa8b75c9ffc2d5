package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/boltcheck"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// verifyPages checks the page structure of an existing database file before
// bbolt opens it (boltcheck.Verify; its package comment says why and what is
// checked), and refuses a damaged one with ErrCorrupt. When mayTrust is set
// and dir's record of a clean close vouches for the file (internal/boltcheck/cleanclose.go),
// it checks only what bbolt reads at Open (boltcheck.Quick, part of that
// vouching), and verified is false.
//
// The check holds a shared lock (a read-only bbolt handle, which loads no
// freelist), so a writer in another process makes it fail with bbolt's
// timeout rather than read a file in mid-change.
//
// It returns boltcheck's note when one of the two meta pages does not check
// out: the store then opens at the older transaction, and the next commit
// overwrites the evidence, so Check reports the note.
func verifyPages(dir, path string, lockTimeout time.Duration, mayTrust bool) (note string, verified bool, err error) {
	if st, err := os.Stat(path); errors.Is(err, os.ErrNotExist) || err == nil && st.Size() == 0 {
		return "", true, checkEmptyFile(path) // a new store, unless blobs say otherwise
	}
	lock, err := bolt.Open(path, 0o644, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return "", false, err
	}
	defer lock.Close()
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	if mayTrust && boltcheck.TrustCleanClose(dir, f) {
		return "", false, nil
	}
	st, err := f.Stat()
	if err != nil {
		return "", false, err
	}
	note, err = boltcheck.Verify(f, st.Size())
	if err != nil {
		return "", false, fmt.Errorf("%w: %s: %v", chain.ErrCorrupt, path, err)
	}
	return note, true, nil
}

// verifyLive walks every page of the tree the open database is at, as
// verifyPages does before an Open, and marks the handle damaged if the
// walk fails. A read transaction keeps that tree's pages from reuse while
// the walk reads them from the file, so writers go on meanwhile (but a
// commit that grows the file waits to remap it until the walk ends: bbolt
// remaps under a lock every read transaction holds). pace, when set, is
// called after each page read with the bytes read; an error from it stops
// the walk and is returned as it is.
func (db *DB) verifyLive(pace func(bytes int64) error) error {
	if db.bolt == nil {
		return nil // no pages of ours: the database server keeps its own
	}
	f, err := os.Open(db.path)
	if err != nil {
		return err
	}
	defer f.Close()
	// The transaction's meta page stays in the file until the second
	// commit after it: read it there, and begin again if it is gone.
	for again := true; again; {
		again = false
		err = db.view(func(tx kv.Tx) error {
			st, err := f.Stat()
			if err != nil {
				return err
			}
			m, ok, err := boltcheck.MetaOf(f, st.Size(), uint64(kv.BoltTx(tx).ID()))
			if err != nil || !ok {
				again = err == nil
				return err
			}
			return boltcheck.VerifyAtPaced(f, st.Size(), m, pace)
		})
	}
	if errors.Is(err, boltcheck.ErrCorrupt) {
		err = fmt.Errorf("%w: %s: %v", chain.ErrCorrupt, db.path, err)
		db.markDamaged(err)
	}
	return err
}

// checkEmptyFile refuses an absent or empty database file beside a blob
// store. bbolt initialises an empty file as a new database, and a crash
// while it does can leave one (it writes and syncs the file before anything
// else), but Open makes the blob directory only after that: an empty file
// beside one is a store that lost its database (truncated, zeroed, copied
// without it). Opening it as new would forget every checkpoint, and the
// blob store's Open would then remove every pack as a crash leftover, since
// no pack is registered in the new index.
func checkEmptyFile(path string) error {
	blobs := filepath.Join(filepath.Dir(path), BlobDir)
	if _, err := os.Stat(blobs); err == nil {
		return fmt.Errorf("%w: %s is missing or empty, but %s holds a blob store: the database was lost, not new", chain.ErrCorrupt, path, blobs)
	}
	return nil
}

// classifyOpenError maps bbolt's Open errors to sbxdb's.
func classifyOpenError(dir, path string, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("%w: %s is held by %s", sbxdb.ErrLocked, dir, holder(dir))
	case errors.Is(err, chain.ErrCorrupt), errors.Is(err, sbxdb.ErrFormat):
		return err
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return fmt.Errorf("%w: %s: %v", chain.ErrCorrupt, path, err)
	}
	if strings.Contains(err.Error(), path) {
		return fmt.Errorf("sbxdb: %w", err) // it names the file already (*fs.PathError)
	}
	return fmt.Errorf("sbxdb: open %s: %w", path, err)
}
