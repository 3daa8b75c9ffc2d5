package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/sbxdb/sbxdb/chain"
)

// A record of a clean close (internal/boltcheck/cleanclose.go) lets a writable Open skip the
// walk of every page, but the record cannot see every change to the file:
// a write through a shared mapping of it (on tmpfs, for one) moves neither
// its modification nor its change time, and a failing disk moves nothing.
// bbolt reuses the pages a commit frees, so a commit on a tree whose pages
// are damaged (a page referenced twice, a page listed free but in use)
// overwrites live data and spreads the damage.
//
// So a writable Open that trusted a record starts the walk in the
// background instead (pageWalk), and no write transaction begins before it
// ends: db.tx waits for it (awaitWalk). A walk that finds damage marks the
// handle damaged, and the write fails with ErrCorrupt naming the page.
// Reads do not wait; they run on pages no walk has checked yet, as before
// (a damaged one they meet is an error, not a panic: db.tx).
//
// Invariant: every commit of a writable handle builds on a tree walked in
// full, either before bbolt opened the file (verifyPages) or by this
// handle's background walk, after bbolt opened it and before the first
// write transaction began. What is not covered: a change to the file after
// that walk read the page (by another process writing the file while this
// one holds it; by the disk), which nothing but the next walk sees.

// errWalkStopped ends a background walk that Close stopped before it
// finished; a write waiting for it fails with it (Close refuses writes by
// then anyway).
var errWalkStopped = errors.New("sbxdb: store closed before its pages were verified")

// pageWalk is a background walk of every page (verifyLive) started by a
// writable Open that trusted a record of a clean close.
type pageWalk struct {
	stop context.CancelFunc
	done chan struct{} // closed once err is set
	err  error         // nil: the walk found the tree intact
}

// startWalk starts db's background walk.
func (db *DB) startWalk() {
	ctx, stop := context.WithCancel(context.Background())
	w := &pageWalk{stop: stop, done: make(chan struct{})}
	db.walk = w
	go func() {
		defer close(w.done)
		defer func() {
			// boltcheck reads with bounds checks and does not panic; a
			// panic here would kill the process all the same.
			if r := recover(); r != nil {
				w.err = fmt.Errorf("%w: %s: %v", chain.ErrCorrupt, db.path, r)
				db.markDamaged(w.err)
			}
		}()
		w.err = db.meta.verifyLive(func(int64) error {
			if ctx.Err() != nil {
				return errWalkStopped
			}
			return nil
		})
	}()
}

// awaitWalk waits for db's background walk, if any, and returns its error:
// damage it found (the handle is then marked damaged too), errWalkStopped,
// or an error reading the file. No write may begin before it returns nil.
func (db *DB) awaitWalk() error {
	if db.walk == nil {
		return nil
	}
	<-db.walk.done
	return db.walk.err
}

// stopWalk stops db's background walk, if any, and waits for it to end:
// it holds a read transaction, which bbolt's Close waits for.
func (db *DB) stopWalk() {
	if db.walk != nil {
		db.walk.stop()
		<-db.walk.done
	}
}
