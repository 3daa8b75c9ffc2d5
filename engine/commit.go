package engine

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// Group commit. bbolt allows one writer and every commit costs two
// fdatasyncs, so one transaction per write caps throughput at the disk's
// sync rate. The committer is one goroutine that takes every write queued
// while the previous commit ran and applies them all in one transaction: no
// timer (bbolt's Batch waits MaxBatchDelay, which measured slower than
// serial commits at 8 writers), so a lone writer pays nothing extra.
//
// Invariant that makes sharing safe: a write returns a contract error
// (chain.Code(err) != "") only from its checks, before it writes anything.
// Such an error is that caller's result and the batch goes on. Any other
// error (a storage failure, a damaged record, a test fault) may come after
// writes, so it aborts the whole transaction; each write of the batch is
// then retried alone, so one write's failure is never another's.

// maxBatch bounds the writes of one transaction, and so its latency.
const maxBatch = 256

type writeReq struct {
	ctx  context.Context
	fn   func(tx kv.Tx) error
	done chan error
	// state is reqQueued until the committer starts the write
	// (reqStarted) or its caller stops waiting first (reqWithdrawn):
	// whichever comes first decides, so a withdrawn write never runs and
	// a started one's caller learns its outcome.
	state atomic.Int32
}

// writeReq states.
const (
	reqQueued = iota
	reqStarted
	reqWithdrawn
)

// start says whether req may run: it has started (a transaction run
// again, a batch's write run alone), or starts now; false once its caller
// withdrew it.
func (req *writeReq) start() bool {
	return req.state.CompareAndSwap(reqQueued, reqStarted) || req.state.Load() == reqStarted
}

type committer struct {
	db      *DB
	queue   chan *writeReq
	batches atomic.Int64 // shared transactions committed, for tests and stats
	// sizes[i] counts the shared transactions committed with at most
	// BatchBounds[i] writes (and more than BatchBounds[i-1]).
	sizes  [len(BatchBounds)]atomic.Int64
	writes atomic.Int64 // the writes those transactions carried
	txs    atomic.Int64 // write transactions run, committed or not
	held   atomic.Int64 // nanoseconds spent inside them (bbolt's write lock)

	mu     sync.RWMutex // held for reading while enqueueing; close takes it
	closed bool
	exited chan struct{}
}

func newCommitter(db *DB) *committer {
	c := &committer{db: db, queue: make(chan *writeReq, maxBatch), exited: make(chan struct{})}
	go c.loop()
	return c
}

// write runs fn in a write transaction shared with other writers and returns
// fn's result once the transaction is durable.
func (db *DB) write(ctx context.Context, fn func(tx kv.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if db.c == nil {
		return sbxdb.ErrReadOnly
	}
	if err := db.writeRefused(); err != nil {
		return err
	}
	return db.c.submit(ctx, fn)
}

func (c *committer) submit(ctx context.Context, fn func(tx kv.Tx) error) error {
	req := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return sbxdb.ErrClosed
	}
	c.queue <- req
	c.mu.RUnlock()
	// ctx's end withdraws a write the committer has not started, which
	// then never runs: the caller stops waiting, with nothing written.
	// Once started, the write may commit, and the caller must learn
	// whether it did: the wait goes on (a batch's transaction is other
	// callers' too, and is not cancelled; a write alone runs under ctx,
	// and its transaction ends with it on shared metadata).
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		if req.state.CompareAndSwap(reqQueued, reqWithdrawn) {
			return ctx.Err()
		}
		return <-req.done
	}
}

func (c *committer) loop() {
	defer close(c.exited)
	for first := range c.queue {
		batch := []*writeReq{first}
	drain:
		for len(batch) < maxBatch {
			select {
			case req, ok := <-c.queue:
				if !ok {
					break drain
				}
				batch = append(batch, req)
			default:
				break drain
			}
		}
		c.run(batch)
	}
}

// run applies a batch in one transaction, or each write alone when the
// shared transaction fails.
func (c *committer) run(batch []*writeReq) {
	results := make([]error, len(batch))
	// A batch's transaction serves several callers: no one's ctx ends it.
	// A lone write's runs under its caller's.
	ctx := context.Background()
	if len(batch) == 1 {
		ctx = batch[0].ctx
	}
	err := c.commit(ctx, func(tx kv.Tx) error {
		for i, req := range batch {
			if err := req.ctx.Err(); err != nil || !req.start() {
				results[i] = cmp.Or(err, context.Canceled) // not started: nothing written
				continue
			}
			err := req.fn(tx)
			if err != nil && chain.Code(err) == "" {
				return err
			}
			results[i] = err
		}
		return nil
	})
	if err == nil {
		c.batches.Add(1)
		i, _ := slices.BinarySearch(BatchBounds[:], len(batch))
		c.sizes[i].Add(1)
		c.writes.Add(int64(len(batch)))
		for i, req := range batch {
			req.done <- results[i]
		}
		return
	}
	if len(batch) == 1 || errors.Is(err, ErrCommitUnknown) {
		// A commit whose outcome is unknown may have stored every write
		// of the batch: retried alone, each would be refused by its own
		// effects (an append by its stored id). Each gets the error that
		// says so. (A failed bbolt commit poisons the store instead.)
		for _, req := range batch {
			req.done <- err
		}
		return
	}
	for _, req := range batch {
		if err := req.ctx.Err(); err != nil || !req.start() {
			req.done <- cmp.Or(err, context.Canceled) // not started: nothing written
			continue
		}
		req.done <- c.commit(req.ctx, req.fn)
	}
}

// foldError is a fold that failed: the transaction's own writes did not.
type foldError struct{ err error }

func (e *foldError) Error() string { return "folding pending references: " + e.err.Error() }
func (e *foldError) Unwrap() error { return e.err }

// commit runs fn and then foldIfDue in one transaction. If the fold fails
// (a damaged pending set), fn's writes commit without it: folding is
// housekeeping, and failing every write with it would also fail the
// writable Open that check --repair needs; the readers
// of counts and check report the damage.
func (c *committer) commit(ctx context.Context, fn func(tx kv.Tx) error) error {
	if c.db.shared != nil {
		return c.sharedCommit(ctx, fn) // the fold in a transaction of its own
	}
	err := c.update(ctx, func(tx kv.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if err := c.foldIfDue(tx); err != nil {
			return &foldError{err}
		}
		return nil
	})
	if _, ok := errors.AsType[*foldError](err); ok {
		return c.update(ctx, fn)
	}
	return err
}

// foldPerThread is how many pending checkpoints per thread make a fold
// due before the pending set weighs Options.RefFoldAfter. A thread's
// consecutive checkpoints share most keys, so a fold of 64 of them writes
// each key once for 64 appends; waiting longer saves little, and the
// pending set outgrows a page: a lone writer at 1,024 pending paid two
// extra page writes per commit instead of one (about 5% of its appends).
const foldPerThread = 64

// foldIfDue folds pending blob references at the end of a commit, so that
// one fold serves every append of the batch, once the pending checkpoints
// weigh Options.RefFoldAfter or number foldPerThread per thread they
// belong to (64 writers fold 64 appends each at 4,096; a lone writer folds
// every 64).
func (c *committer) foldIfDue(tx kv.Tx) error {
	w := meta.PendingWeight(tx)
	if w < uint64(min(c.db.opts.RefFoldAfter, foldPerThread)) {
		return nil // each pending checkpoint weighs 1 or more
	}
	if w < uint64(c.db.opts.RefFoldAfter) {
		if due, err := meta.PendingPerThread(tx, foldPerThread); !due || err != nil {
			return err
		}
	}
	return meta.FoldRefs(tx)
}

// update is bolt's Update, guarded by db.tx (a panic from a damaged page
// is an ErrCorrupt, and refuses later writes). The FS has the last word
// before the commit (vfs.FS.BeforeCommit).
//
// A commit that fails once fn has succeeded poisons the store (ErrPoisoned):
// bbolt's Commit writes pages and fdatasyncs, and after a failed write or
// sync the outcome is unknown (the pages may reach the file anyway, or the
// kernel may have dropped them while the mapping still shows them), so no
// later transaction may build on it. vfs.FS.BeforeCommit failing stands for
// such a failure, and counts as one. A poisoned store runs no transaction.
// ctx ends the transaction on shared metadata (backend.tx).
func (c *committer) update(ctx context.Context, fn func(tx kv.Tx) error) (err error) {
	if err := c.db.writeRefused(); err != nil {
		return err
	}
	start := time.Now()
	defer func() {
		c.txs.Add(1)
		c.held.Add(int64(time.Since(start)))
	}()
	committing := false // fn succeeded: an error from here on is the commit's
	err = c.db.meta.tx(ctx, true, func(tx kv.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		committing = true
		return c.db.meta.beforeCommit()
	})
	// A shared database's failed commit poisons nothing (shared.go).
	if err != nil && committing && c.db.meta.commitFailurePoisons() {
		c.db.poison(err)
	}
	return err
}

// BatchBounds are the upper bounds of WriteStats.Batches' buckets: the
// number of writes a shared transaction carried, up to maxBatch.
var BatchBounds = [...]int{1, 2, 4, 8, 16, 32, 64, 128, maxBatch}

// WriteStats counts the write transactions of a DB since Open.
type WriteStats struct {
	// Transactions run (committed or rolled back), each holding bbolt's
	// single write lock.
	Transactions int64
	// Held is the total time they held it, commit and fsync included: the
	// time every other writer of the store had to wait.
	Held time.Duration
	// Batches[i] counts the transactions the group commit shared among
	// at most BatchBounds[i] writes (and more than BatchBounds[i-1]),
	// committed; a batch whose shared transaction failed and whose writes
	// then ran alone is not counted.
	Batches [len(BatchBounds)]int64
	// BatchedWrites is the number of writes those transactions carried.
	BatchedWrites int64
}

// WriteStats returns the write transactions run since Open; the zero value
// for a read-only store.
func (db *DB) WriteStats() WriteStats {
	if db.c == nil {
		return WriteStats{}
	}
	ws := WriteStats{Transactions: db.c.txs.Load(), Held: time.Duration(db.c.held.Load()), BatchedWrites: db.c.writes.Load()}
	for i := range ws.Batches {
		ws.Batches[i] = db.c.sizes[i].Load()
	}
	return ws
}

// close fails every later write with ErrClosed, lets queued writes finish
// and waits for the loop to exit.
func (c *committer) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.queue)
	c.mu.Unlock()
	<-c.exited
}
