package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/boltcheck"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// Recovery of a poisoned store in place. A poisoned handle (ErrPoisoned)
// refuses every write until Recover makes it what Close and Open would,
// once the disk takes a write and a sync again (probe): the database file
// closed and opened again, every page walked first
// (verifyPages: a poisoned handle records no clean close, so nothing
// vouches for the file), the poison cleared. The *DB stays the same value,
// so a server keeps its pointer; the store lock is held throughout, so no
// other process opens the store meanwhile.
//
// Invariants:
//   - nothing acknowledged is lost: a write was acknowledged only after
//     its commit's fdatasync succeeded, and the reopened file is read from
//     its newest valid meta page, which is that commit's or a later one;
//   - no write is acknowledged that was not durable: writes are refused
//     from the failed sync until the poison is cleared, which happens only
//     once the file is open again and verified; a write queued meanwhile
//     fails with ErrPoisoned (committer.update asks before each
//     transaction), so none commits on the handle that failed;
//   - a recovery that fails leaves the store poisoned (with the first
//     cause) and may be tried again: when the failure comes after the old
//     file was closed, the handle is detached (db.detached), and every
//     transaction, read or write, fails with ErrPoisoned until a later
//     Recover opens the file;
//   - a sync that fails while Recover runs (a blob batch begun before the
//     poison) keeps the store poisoned: Recover clears only the poison it
//     saw (poisonSeq);
//   - bbolt's file is swapped only while no transaction is inside it
//     (txGate): Recover stops new ones, waits for those running, and gives
//     up after drainWait, leaving everything as it was, if one does not
//     end (a long read; a read that nests another).
//
// The blob store keeps nothing a failed sync leaves wrong: a batch whose
// sync failed removes the files it wrote (cas removeUnindexed) and never
// writes their index, and its open pack handles read only indexed packs.
// Recover therefore leaves it as it is; it does not remove orphan packs as
// Open does, since a batch begun before the poison may still be writing
// one (gc's RemoveOrphans and the next Open remove what a failed removal
// left).

// drainWait bounds how long Recover waits for the transactions in
// progress to end.
const drainWait = 5 * time.Second

// probeBytes is the size of the file Recover writes and syncs beside the
// database before it reopens anything: a disk still full, or still
// failing, fails the probe, and the store stays poisoned rather than fail
// the next write's commit again.
const probeBytes = 1 << 20

// probeName is the probe's file in the store directory, removed after.
const probeName = "sbx.probe"

// probe writes probeBytes to a file in the store directory, syncs it and
// the directory, and removes it: whether the disk takes a write now.
func (db *DB) probe() (err error) {
	fsys := db.opts.FS
	name := filepath.Join(db.dir, probeName)
	f, err := fsys.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("probing the disk: %w", err)
	}
	defer func() {
		f.Close()
		if rerr := fsys.Remove(name); err == nil && rerr != nil {
			err = fmt.Errorf("probing the disk: %w", rerr)
		}
	}()
	buf := make([]byte, 64<<10)
	for n := 0; n < probeBytes; n += len(buf) {
		if _, err := f.Write(buf); err != nil {
			return fmt.Errorf("probing the disk: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("probing the disk: %w", err)
	}
	if err := fsys.SyncDir(db.dir); err != nil {
		return fmt.Errorf("probing the disk: %w", err)
	}
	return nil
}

// txGate counts the bbolt transactions in progress, and lets Recover stop
// new ones while it swaps the file.
type txGate struct {
	mu       sync.Mutex
	active   int
	draining chan struct{} // non-nil while Recover holds the gate: closed when it lets go
	idle     chan struct{} // closed when active drops to 0 while draining
}

// enter waits while the gate is drained, then counts one transaction.
func (g *txGate) enter() {
	g.mu.Lock()
	for g.draining != nil {
		ch := g.draining
		g.mu.Unlock()
		<-ch
		g.mu.Lock()
	}
	g.active++
	g.mu.Unlock()
}

// exit ends a transaction counted by enter.
func (g *txGate) exit() {
	g.mu.Lock()
	g.active--
	if g.active == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
}

// drain stops new transactions and waits until none is in progress, or
// until ctx ends or wait passes; it then lets go (undrain) and fails.
func (g *txGate) drain(ctx context.Context, wait time.Duration) error {
	g.mu.Lock()
	g.draining = make(chan struct{})
	if g.active == 0 {
		g.mu.Unlock()
		return nil
	}
	idle := make(chan struct{})
	g.idle = idle
	g.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errors.New("transactions still in progress")
	}
	g.mu.Lock()
	if g.active == 0 { // it went idle as the wait ended
		g.idle = nil
		g.mu.Unlock()
		return nil
	}
	g.idle = nil
	g.mu.Unlock()
	g.undrain()
	return err
}

// undrain lets the transactions drain stopped go on.
func (g *txGate) undrain() {
	g.mu.Lock()
	close(g.draining)
	g.draining = nil
	g.mu.Unlock()
}

// Poisoned returns the error every write fails with while the store is
// poisoned (it matches ErrPoisoned and the failure that caused it), or nil.
func (db *DB) Poisoned() error {
	if p := db.poisoned.Load(); p != nil {
		return p
	}
	return nil
}

// PoisonNotify returns a channel closed once the store is poisoned: at
// once if it is now. A recovery makes the next call return a new one.
func (db *DB) PoisonNotify() <-chan struct{} {
	db.poisonMu.Lock()
	defer db.poisonMu.Unlock()
	if db.poisonCh == nil {
		db.poisonCh = make(chan struct{})
		if db.poisoned.Load() != nil {
			close(db.poisonCh)
		}
	}
	return db.poisonCh
}

// Recoveries returns how many times Recover cleared a poison since Open.
func (db *DB) Recoveries() int64 { return db.recoveries.Load() }

// Recover makes a poisoned store writable again, in place: see the
// invariants at the top of recover.go. It returns nil at once when the
// store is not poisoned, and the reason when it stays poisoned (the
// error then matches ErrPoisoned); it may be called again. A damaged
// store (ErrCorrupt) is not recovered. Reads wait while the file is
// closed and opened again (a walk of every page).
func (db *DB) Recover(ctx context.Context) error {
	db.lifeMu.Lock()
	defer db.lifeMu.Unlock()
	if db.closed {
		return sbxdb.ErrClosed
	}
	p := db.poisoned.Load()
	if p == nil || !db.meta.commitFailurePoisons() {
		return nil
	}
	if d := db.damaged.Load(); d != nil {
		return *d
	}
	fail := func(err error) error { return fmt.Errorf("%w: recovering: %w", p, err) }
	if err := db.probe(); err != nil {
		return fail(err)
	}
	if err := db.txg.drain(ctx, drainWait); err != nil {
		return fail(err)
	}
	defer db.txg.undrain()
	db.poisonMu.Lock()
	seq := db.poisonSeq
	db.poisonMu.Unlock()
	if db.detached == nil {
		// A poisoned handle commits nothing more, so this writes no
		// freelist and records no clean close.
		if err := db.bolt.Close(); err != nil {
			db.detached = err
			return fail(err)
		}
		db.detached = errors.New("the database file is closed")
	}
	note, verified, err := verifyPages(db.dir, db.path, db.opts.LockTimeout, false)
	if err == nil {
		err = db.point("recover-reopen")
	}
	if err != nil {
		err = classifyOpenError(db.dir, db.path, err)
		db.detached = err
		return fail(err)
	}
	bdb, err := bolt.Open(db.path, 0o644, &bolt.Options{
		Timeout:        db.opts.LockTimeout,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		NoSync:         db.opts.NoSync,
	})
	if err != nil {
		err = classifyOpenError(db.dir, db.path, err)
		db.detached = err
		return fail(err)
	}
	db.bolt, db.detached, db.verified = bdb, nil, verified
	if st, err := os.Stat(db.path); err == nil {
		db.opened, _ = boltcheck.StatOf(st)
	}
	if note != "" {
		// As Open: the next commit overwrites the damaged meta page, so
		// keep the note. A failure of this commit poisons again (the
		// first cause is kept) and a later Recover starts over.
		db.metaNote = note
		stamp := []byte(db.opts.Now().UTC().Format(time.RFC3339) + ": " + note)
		err := db.txLocked(true, func(tx kv.Tx) error {
			if err := tx.Bucket(meta.BucketMeta).Put(meta.KeyRecovered, meta.Seal(meta.BucketMeta, meta.KeyRecovered, stamp)); err != nil {
				return err
			}
			return db.opts.FS.BeforeCommit(db.path)
		})
		if err != nil {
			db.poison(err)
			return fail(err)
		}
	}
	db.poisonMu.Lock()
	defer db.poisonMu.Unlock()
	if db.poisonSeq != seq {
		return fail(errors.New("another sync failed meanwhile"))
	}
	db.poisoned.Store(nil)
	db.poisonCh = nil
	db.recoveries.Add(1)
	return nil
}

// RecoverOptions set the backoff of RecoverLoop; zero fields take the
// defaults.
type RecoverOptions struct {
	// MinDelay is the wait before the first attempt after a poison
	// (default 100 ms); each failed attempt doubles it, up to MaxDelay
	// (default 30 s). Every wait is jittered: from half of it to all of it.
	MinDelay, MaxDelay time.Duration
	// Attempted, when set, is told the outcome of every attempt: nil for
	// a recovery.
	Attempted func(err error)
}

// RecoverLoop recovers the store each time it is poisoned, until ctx ends
// or the store is closed:
// it waits for a poison (PoisonNotify), then calls Recover with an
// exponential, jittered backoff until it succeeds. It returns at once for
// a store that is never poisoned (read-only, or on shared metadata). It is
// what a server runs; an embedded user may run it in a goroutine of its own, or call
// Recover itself.
func (db *DB) RecoverLoop(ctx context.Context, opts RecoverOptions) {
	if !db.meta.commitFailurePoisons() || db.c == nil {
		return // never poisoned: shared metadata, or read-only
	}
	if opts.MinDelay <= 0 {
		opts.MinDelay = 100 * time.Millisecond
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = 30 * time.Second
	}
	opts.MaxDelay = max(opts.MaxDelay, opts.MinDelay)
	for {
		select {
		case <-ctx.Done():
			return
		case <-db.closedCh:
			return
		case <-db.PoisonNotify():
		}
		for delay := opts.MinDelay; ; delay = min(2*delay, opts.MaxDelay) {
			t := time.NewTimer(delay/2 + rand.N(delay/2+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-db.closedCh:
				t.Stop()
				return
			case <-t.C:
			}
			err := db.Recover(ctx)
			if opts.Attempted != nil {
				opts.Attempted(err)
			}
			if err == nil || errors.Is(err, sbxdb.ErrClosed) {
				break
			}
		}
	}
}
