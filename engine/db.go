// Package engine is the public facade of sbxdb: Open a store directory and
// get a *DB that implements the SandboxCheckpointStore contract, its fork and
// retention capabilities, thread transcripts and the instance store, and
// keeps blobs, plain objects and artifact records beside them. Each
// write is one metadata transaction composing the chain and lease
// packages, in the bbolt file sbx.db or, with Options.Metadata, in a
// PostgreSQL database shared with other servers (shared.go); concurrent
// writes share transactions through group commit (commit.go).
package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/flock"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/boltcheck"
	"github.com/sbxdb/sbxdb/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// File names inside a store directory.
const (
	// DBFile is the bbolt file holding all metadata.
	DBFile = "sbx.db"
	// BlobDir is the blob store's directory (cas/format.go).
	BlobDir = "blobs"
	// SocketName is the unix socket a server of the store listens on
	// unless told otherwise; the store's directory holds it while served.
	SocketName = "sbxdb.sock"
)

// poisonError is ErrPoisoned with the failure that caused it. It matches
// both (errors.Is), so a caller sees the errno of the failed sync even when
// another write of the same call is the one refused.
type poisonError struct{ cause error }

func (e *poisonError) Error() string   { return sbxdb.ErrPoisoned.Error() + ": " + e.cause.Error() }
func (e *poisonError) Unwrap() []error { return []error{sbxdb.ErrPoisoned, e.cause} }

// DB is an open store. It is safe for concurrent use by many goroutines;
// one process at a time may open a store for writing.
type DB struct {
	dir  string
	path string // the database file
	opts Options
	// meta is where the metadata lives, chosen once by Open (backend.go):
	// the bbolt file sbx.db (bolt.go), or a database shared with other
	// servers (shared.go). bolt is the file's handle, nil for a database;
	// shared the database's, nil for the file.
	meta   backend
	bolt   *bolt.DB
	shared sharedMeta
	c      *committer
	blobs  *cas.Store
	// lock is the held store lock (internal/flock/storelock.go), released by Close after
	// the database file is closed.
	lock *flock.StoreLock

	// gcMu lets one sweep run at a time: a sweep's missing-blob check
	// relies on no other sweep deleting meanwhile.
	gcMu sync.Mutex

	// metaNote, when set, says the file opened on its older meta page
	// (verifyPages). A writable Open also stores it (meta/recovered);
	// Check reports it.
	metaNote string

	// poisoned is set by the first failed sync or database commit of this
	// handle; from then on every write fails with it (ErrPoisoned), until
	// Recover clears it. poisonSeq counts the failures reported (under
	// poisonMu), the first and any later; poisonCh, when made, is closed
	// once poisoned is set (PoisonNotify). recoveries counts the poisons
	// Recover cleared.
	poisoned   atomic.Pointer[poisonError]
	poisonMu   sync.Mutex
	poisonSeq  uint64
	poisonCh   chan struct{}
	recoveries atomic.Int64

	// txg counts the bbolt transactions in progress: Recover swaps bolt
	// only while none is (recover.go). detached, set and read only while
	// Recover holds txg drained or inside a transaction txg counts, is why
	// bolt is closed after a recovery that failed half way; nil when bolt
	// is open.
	txg      txGate
	detached error
	// lifeMu orders Recover and Close; closed says Close was called, and
	// closedCh, made by Open, is closed then (RecoverLoop ends).
	lifeMu   sync.Mutex
	closed   bool
	closedCh chan struct{}

	// damaged is set, once, by the first damaged page a transaction ran
	// into (db.tx); from then on every write fails with it (ErrCorrupt),
	// rather than build a tree on a broken one.
	damaged atomic.Pointer[error]

	// verified says this Open walked every page (verifyPages) rather than
	// trust a record of a clean close. opened is the database file's stat
	// at a writable Open: Close records a clean close only of that file.
	verified bool
	opened   boltcheck.FileStat
	// walk is the background walk of every page a writable Open starts
	// when it trusted a record instead (cleanclose_walk.go); nil if none.
	walk *pageWalk
	// crashed makes Close leave the file as a process that died after
	// its last commit would (no last commit, no record): tests only.
	crashed bool

	// points holds test hooks by name (see storetest.Subject.OnPoint);
	// empty in production.
	pointsMu sync.RWMutex
	points   map[string]func() error
}

var _ sbxdb.Store = (*DB)(nil)

// Open opens the store in dir, creating the directory and an empty store if
// needed. opts may be nil for the defaults. When another process holds the
// store, Open fails with ErrLocked after opts.LockTimeout.
func Open(dir string, opts *Options) (db *DB, err error) {
	return open(dir, opts, false)
}

// open is Open; verify makes it walk every page even when a record of a
// clean close vouches for the file.
func open(dir string, opts *Options, verify bool) (db *DB, err error) {
	o, err := CheckOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.Metadata != "" {
		return openShared(dir, o)
	}
	if e := SharedMetadataOf(dir); e != nil {
		return nil, e // its sbx.db is not missing: there is none
	}
	path := filepath.Join(dir, DBFile)
	if o.ReadOnly {
		// bbolt would try to initialise an empty file, and fail. An
		// empty file beside a blob store is a lost database, not none.
		st, err := os.Stat(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			// Not "no store": the file may be there, unreadable.
			return nil, fmt.Errorf("sbxdb: %w", err)
		}
		if err != nil || st.Size() == 0 {
			if err := checkEmptyFile(path); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w at %s", sbxdb.ErrNoStore, dir)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The store lock comes before any read of sbx.db: once it is held, no
	// Compact is between opening its new file and renaming it into place.
	lock, err := flock.LockStore(dir, o.ReadOnly, o.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	// bbolt reads the file's pages without bounds checks of its own; a
	// damaged file can make it panic. No panic may reach the caller.
	defer recoverCorrupt(&err, path)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	// Read-only too: bbolt then loads no freelist, but it reads damaged
	// pages unchecked all the same, and a leaf element pointing outside
	// its page reads as a missing key, not as damage.
	metaNote, verified, err := verifyPages(dir, path, o.LockTimeout, !verify)
	if err != nil {
		return nil, classifyOpenError(dir, path, err)
	}
	if !o.ReadOnly {
		// Before bbolt opens the file, which may commit.
		if err := boltcheck.RemoveCleanClose(dir); err != nil {
			return nil, err
		}
		os.Remove(filepath.Join(dir, probeName)) // left by a Recover that died
	}
	// Commits write no freelist (NoFreelistSync): writing it costs every
	// commit a page per 500 free pages. A writable Open then rebuilds it by
	// walking every page, unless the meta page names a freelist page:
	// Close writes one, in a last commit (closeFreelist), and the first
	// commit after it frees that page again. The record of a clean close
	// vouches only for a file with one, so a trusted Open reads that page
	// and walks nothing.
	bdb, err := bolt.Open(path, 0o644, &bolt.Options{
		Timeout:        o.LockTimeout,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		NoSync:         o.NoSync,
		ReadOnly:       o.ReadOnly,
	})
	if err != nil {
		return nil, classifyOpenError(dir, path, err)
	}
	db = &DB{dir: dir, path: path, opts: o, bolt: bdb, lock: lock, metaNote: metaNote, verified: verified, closedCh: make(chan struct{})}
	db.meta = boltBackend{db}
	if !o.ReadOnly {
		st, serr := os.Stat(path)
		if serr == nil {
			db.opened, _ = boltcheck.StatOf(st)
		}
		if !verified {
			db.startWalk() // before any write: each waits for it
		}
	}
	// A store of this format, with nothing to note, opens without a
	// commit: a writable Open writes only to create, migrate or note.
	err = db.view(func(tx kv.Tx) error { return initLayout(tx, nil) })
	if !o.ReadOnly && (err != nil || metaNote != "") {
		err = db.tx(true, func(tx kv.Tx) error {
			if err := initLayout(tx, func() error { return o.FS.BeforeCommit(path) }); err != nil {
				return err
			}
			// This commit overwrites the damaged meta page: keep the note
			// where a later check, in any process, finds it.
			if metaNote == "" {
				return nil
			}
			note := []byte(o.Now().UTC().Format(time.RFC3339) + ": " + metaNote)
			return tx.Bucket(meta.BucketMeta).Put(meta.KeyRecovered, meta.Seal(meta.BucketMeta, meta.KeyRecovered, note))
		})
	}
	if err != nil {
		db.stopWalk()
		bdb.Close()
		return nil, classifyOpenError(dir, path, err)
	}
	if !o.ReadOnly {
		db.c = newCommitter(db)
	}
	db.blobs, err = cas.Open(filepath.Join(dir, BlobDir), blobIndex{db}, cas.Options{Now: o.Now, ReadOnly: o.ReadOnly, NoSync: o.NoSync, FS: o.FS, IndexMayBeOlder: db.indexMayBeOlder()})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("opening the blob store: %w", err)
	}
	return db, nil
}

// Blobs returns the store's blob store, which holds file and artifact bytes
// beside the database and keeps its index in it.
func (db *DB) Blobs() *cas.Store { return db.blobs }

// blobIndex runs the blob index's transactions: reads like every read of
// the engine (a damaged page is an error, not a panic), writes through group
// commit, sharing transactions and fsyncs with concurrent appends.
type blobIndex struct{ db *DB }

func (b blobIndex) View(fn func(kv.Tx) error) error { return b.db.view(fn) }
func (b blobIndex) Update(fn func(kv.Tx) error) error {
	if b.db.c == nil {
		return sbxdb.ErrReadOnly
	}
	return b.db.write(context.Background(), fn)
}

// Refused and SyncFailed make blobIndex the blob store's cas.Gate: a
// failed sync of a blob file poisons the whole store, and a poisoned store
// writes no blob file.
func (b blobIndex) Refused() error       { return b.db.writeRefused() }
func (b blobIndex) SyncFailed(err error) { b.db.poison(err) }

// poison makes every later write of db fail with ErrPoisoned naming cause,
// until Recover clears it; only the first cause is kept.
func (db *DB) poison(cause error) {
	db.poisonMu.Lock()
	defer db.poisonMu.Unlock()
	db.poisonSeq++
	if db.poisoned.CompareAndSwap(nil, &poisonError{cause: cause}) && db.poisonCh != nil {
		close(db.poisonCh)
	}
}

// writeRefused returns the error writes fail with once db is damaged or
// poisoned, or nil.
func (db *DB) writeRefused() error {
	if d := db.damaged.Load(); d != nil {
		return *d
	}
	if p := db.poisoned.Load(); p != nil {
		return p
	}
	return nil
}

// Dir returns the store directory.
func (db *DB) Dir() string { return db.dir }

// Close waits for writes in flight, fails queued ones with ErrClosed and
// closes the file. A writable handle that met no damage and no failed sync
// then records the clean close (internal/boltcheck/cleanclose.go), so that the next Open need
// not walk every page. Calling it twice is harmless.
func (db *DB) Close() error {
	db.lifeMu.Lock()
	defer db.lifeMu.Unlock()
	if !db.closed && db.closedCh != nil {
		close(db.closedCh)
	}
	db.closed = true
	if db.c != nil {
		db.c.close()
	}
	if db.blobs != nil {
		db.blobs.Close()
	}
	err := db.meta.close()
	db.lock.Release()
	return err
}

// view runs fn in a read transaction (db.tx).
func (db *DB) view(fn func(tx kv.Tx) error) error { return db.tx(false, fn) }

// viewCtx is view for a call with a context: on shared metadata, ctx's
// end ends the database's work, and the read fails with ctx's error.
func (db *DB) viewCtx(ctx context.Context, fn func(tx kv.Tx) error) error {
	return db.meta.tx(ctx, false, fn)
}

// tx runs fn in a bbolt transaction, read or write. It is the one place the
// engine enters bbolt's tree: bbolt trusts the pages it reads, and a page
// damaged after the last verified Open (internal/boltcheck/cleanclose.go) can make it panic,
// or fault on a page past the end of the mapping. Both arrive here as a
// panic (debug.SetPanicOnFault), after bbolt rolled a write transaction
// back and released its write lock. The panic becomes an ErrCorrupt naming
// the file, and marks the handle damaged: every later write fails with
// that error (a tree that panicked once is not built on), and Close
// records no clean close, so the next Open walks every page and refuses
// the file.
func (db *DB) tx(writable bool, fn func(tx kv.Tx) error) (err error) {
	return db.meta.tx(context.Background(), writable, fn)
}

// recoverDamage is db.tx's recovery: see there.
func (db *DB) recoverDamage(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: %v", chain.ErrCorrupt, db.path, r)
		db.markDamaged(*err)
	}
}

// markDamaged makes every later write of db fail with err, a damaged page
// of the database; only the first is kept.
func (db *DB) markDamaged(err error) {
	db.damaged.CompareAndSwap(nil, &err)
}

// recoverCorrupt converts a panic into an ErrCorrupt error. Callers that
// read mapped pages also set debug.SetPanicOnFault, so a fault on a page
// past the end of a truncated file arrives here as a panic too.
func recoverCorrupt(err *error, where string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: %v", chain.ErrCorrupt, where, r)
	}
}

// point runs the test hook registered under name, if any.
func (db *DB) point(name string) error {
	db.pointsMu.RLock()
	fn := db.points[name]
	db.pointsMu.RUnlock()
	if fn == nil {
		return nil
	}
	return fn()
}
