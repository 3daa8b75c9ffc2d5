package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/flock"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/boltcheck"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// boltBackend is the metadata in the bbolt file sbx.db: transactions
// guarded against damaged pages and counted for Recover (txg), a failed
// commit poisons the handle, Close records a clean close, and the pages
// can be walked live (check) and compacted.
type boltBackend struct{ db *DB }

func (b boltBackend) tx(_ context.Context, writable bool, fn func(tx kv.Tx) error) error {
	db := b.db
	db.txg.enter()
	defer db.txg.exit()
	if db.detached != nil {
		// A recovery closed the file and could not open it again.
		if p := db.poisoned.Load(); p != nil {
			return fmt.Errorf("%w: %w", p, db.detached)
		}
		return db.detached
	}
	if writable {
		if err := db.writeRefused(); err != nil {
			return err // damaged or poisoned: nothing more is built on this tree
		}
	}
	return db.txLocked(writable, fn)
}

// beforeCommit gives the FS the last word before bbolt's commit
// (vfs.FS.BeforeCommit); its failure, like the commit's, poisons.
func (b boltBackend) beforeCommit() error { return b.db.opts.FS.BeforeCommit(b.db.path) }

func (b boltBackend) commitFailurePoisons() bool { return true }

// close ends the background walk and closes the file, recording a clean
// close when the handle wrote, met no damage and no failed sync, and its
// last commit wrote the freelist (closeFreelist).
func (b boltBackend) close() error {
	db := b.db
	db.stopWalk()
	if db.detached != nil {
		return nil // a recovery failed after closing the file
	}
	var txid uint64
	clean := db.c != nil && !db.crashed && db.writeRefused() == nil && db.closeFreelist() == nil &&
		db.view(func(tx kv.Tx) error { txid = uint64(kv.BoltTx(tx).ID()); return nil }) == nil
	err := db.bolt.Close()
	if clean && err == nil && db.writeRefused() == nil {
		boltcheck.WriteCleanClose(db.dir, db.path, db.opened, txid, db.opts.NoSync)
	}
	return err
}

// fileStats fills in the database file's size, page size and free pages.
func (b boltBackend) fileStats(s *sbxdb.StoreStats) error {
	db := b.db
	st, err := os.Stat(filepath.Join(db.dir, DBFile))
	if err != nil {
		return err
	}
	s.DBFileBytes = st.Size()
	return db.view(func(tx kv.Tx) error {
		bs := db.bolt.Stats()
		s.PageSize, s.FreePages = db.bolt.Info().PageSize, bs.FreePageN+bs.PendingPageN
		return nil
	})
}

// txLocked is db.tx on the database file, once txg counts the transaction
// (or Recover holds it drained) and the write gate has been asked.
func (db *DB) txLocked(writable bool, fn func(tx kv.Tx) error) (err error) {
	defer db.recoverDamage(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if !writable {
		return db.bolt.View(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) })
	}
	if err := db.awaitWalk(); err != nil {
		return err // no tree is built on pages not walked (cleanclose_walk.go)
	}
	// Not bbolt's Update: on a panic, its rollback rebuilds the freelist
	// by walking every page in a goroutine of bbolt's own (NoFreelistSync),
	// where a damaged page would kill the process. Rollback undoes this
	// transaction's allocations alone; no write follows a panic anyway.
	tx, err := db.bolt.Begin(true)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after a Commit, which ends tx either way: a no-op
	if err := fn(kv.Bolt(tx)); err != nil {
		return err
	}
	return tx.Commit()
}

// closeFreelist commits once more, writing bbolt's freelist to a page of
// its own that the meta page names, so that the next writable Open reads
// it instead of walking every page; nothing else changes. It is a no-op
// when the newest meta page names one already (no commit since an Open
// that read it).
func (db *DB) closeFreelist() error {
	var synced bool
	if err := db.view(func(tx kv.Tx) error {
		f, err := os.Open(db.path)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		m, ok, err := boltcheck.MetaOf(f, fi.Size(), uint64(kv.BoltTx(tx).ID()))
		synced = err == nil && ok && m.Freelist != boltcheck.NoFreelist
		return nil
	}); err != nil || synced {
		return err
	}
	db.bolt.NoFreelistSync = false
	defer func() { db.bolt.NoFreelistSync = true }()
	return db.tx(true, func(kv.Tx) error { return nil })
}

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
func (b boltBackend) verifyLive(pace func(bytes int64) error) error {
	db := b.db
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
		return fmt.Errorf("%w: %s is held by %s", sbxdb.ErrLocked, dir, flock.Holder(dir))
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

// lock is a no-op: no other process opens the file while this one holds
// its lock file, and the caller's mutex orders this process's own.
func (boltBackend) lock(context.Context, string) (func(), error) { return func() {}, nil }
