package engine

import (
	"context"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// backend is where a store's metadata lives, chosen once by Open: the
// bbolt file sbx.db (boltBackend, bolt.go) or a PostgreSQL database shared
// with other servers (sharedBackend). The engine's code above it is the
// same for both: the same operations of internal/meta in the same order.
// What differs is here.
type backend interface {
	// tx runs fn in a read or write transaction, once DB.tx has recovered
	// a panic as damage. A write is refused first when the handle is
	// damaged or poisoned. ctx ends the database's work on shared
	// metadata (the file's transactions are local and short: it is not
	// read there).
	tx(ctx context.Context, writable bool, fn func(tx kv.Tx) error) error
	// beforeCommit runs after a write transaction's body succeeded and
	// before its commit; its error fails the commit.
	beforeCommit() error
	// commitFailurePoisons says whether a commit that fails once its body
	// succeeded leaves the outcome unknown to later transactions, which
	// must then not run (ErrPoisoned, recover.go): true for the file.
	commitFailurePoisons() bool
	// close releases the metadata (the store lock is DB.Close's).
	close() error
	// fileStats fills in what Stats says of the metadata's storage.
	fileStats(s *sbxdb.StoreStats) error
	// verifyLive walks the metadata's pages, as check does; pace is called
	// after each page read.
	verifyLive(pace func(bytes int64) error) error
	// lock takes the named lock every process sharing the metadata
	// honours (the file's processes are one: its lock file keeps the
	// others out, so there it is a no-op), until unlock.
	lock(ctx context.Context, name string) (unlock func(), err error)
}

// sharedBackend is the metadata in a database shared with other servers
// (shared.go): no pages of ours to walk, no file to record a clean close
// of, and a failed commit poisons nothing, since no transaction builds on
// another's pages in memory.
type sharedBackend struct{ db *DB }

func (b sharedBackend) tx(ctx context.Context, writable bool, fn func(tx kv.Tx) error) (err error) {
	db := b.db
	// internal/meta panics on a missing bucket: damage, as on the file;
	// the next transaction reads the database afresh, so the handle is
	// not marked damaged.
	defer recoverCorrupt(&err, db.path)
	if !writable {
		return db.shared.View(ctx, fn)
	}
	if err := db.writeRefused(); err != nil {
		return err
	}
	return db.shared.Update(ctx, fn)
}

func (sharedBackend) beforeCommit() error        { return nil }
func (sharedBackend) commitFailurePoisons() bool { return false }
func (b sharedBackend) close() error             { b.db.shared.Close(); return nil }

func (b sharedBackend) fileStats(s *sbxdb.StoreStats) error {
	s.Metadata = b.db.path // no file: the database server keeps the metadata
	return nil
}

func (sharedBackend) verifyLive(func(int64) error) error {
	return nil // no pages of ours: the database server keeps its own
}

func (b sharedBackend) lock(ctx context.Context, name string) (func(), error) {
	return b.db.shared.Lock(ctx, name)
}
