package engine

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

// Get returns the checkpoint id, or nil and no error when it is unknown.
func (db *DB) Get(ctx context.Context, id string) (*chain.Checkpoint, error) {
	if err := firstErr(ctx.Err(), chain.CheckID("checkpoint id", id)); err != nil {
		return nil, err
	}
	var cp *chain.Checkpoint
	err := db.viewCtx(ctx, func(tx kv.Tx) (err error) {
		cp, err = meta.GetCheckpoint(tx, id)
		return err
	})
	return cp, err
}

// List returns every checkpoint of the thread in createdAt, id-bytes order.
func (db *DB) List(ctx context.Context, threadID string) ([]*chain.Checkpoint, error) {
	if err := firstErr(ctx.Err(), chain.CheckID("threadId", threadID)); err != nil {
		return nil, err
	}
	var out []*chain.Checkpoint
	err := db.viewCtx(ctx, func(tx kv.Tx) (err error) {
		out, err = meta.ListThread(tx, threadID)
		return err
	})
	return out, err
}

// ListIter yields the thread's checkpoints in List order one at a time,
// holding one in memory where List holds them all. The ids are read first,
// in one transaction; each checkpoint is then read in a transaction of its
// own, so the loop may call the store, writes included (a read transaction
// held across a write that grows the file would deadlock bbolt). A
// checkpoint deleted before the loop reaches it is skipped. An error ends
// the sequence, yielded with a nil checkpoint.
func (db *DB) ListIter(ctx context.Context, threadID string) iter.Seq2[*chain.Checkpoint, error] {
	return func(yield func(*chain.Checkpoint, error) bool) {
		if err := firstErr(ctx.Err(), chain.CheckID("threadId", threadID)); err != nil {
			yield(nil, err)
			return
		}
		var ids []string
		err := db.viewCtx(ctx, func(tx kv.Tx) error {
			return meta.ForEachInThread(tx, threadID, func(id string) error {
				ids = append(ids, id)
				return nil
			})
		})
		if err != nil {
			yield(nil, err)
			return
		}
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				yield(nil, err)
				return
			}
			var cp *chain.Checkpoint
			err := db.viewCtx(ctx, func(tx kv.Tx) (err error) {
				cp, err = meta.GetCheckpoint(tx, id)
				return err
			})
			if err != nil {
				yield(nil, err)
				return
			}
			if cp == nil || cp.ThreadID != threadID {
				continue // deleted since (and its id perhaps reused)
			}
			if !yield(cp, nil) {
				return
			}
		}
	}
}

// Head returns the thread's head checkpoint id, or "" when it has none.
func (db *DB) Head(ctx context.Context, threadID string) (string, error) {
	if err := firstErr(ctx.Err(), chain.CheckID("threadId", threadID)); err != nil {
		return "", err
	}
	var head string
	err := db.viewCtx(ctx, func(tx kv.Tx) (err error) {
		head, err = meta.Head(tx, threadID)
		return err
	})
	return head, err
}

// BlobReferences returns every blob key with a count above 0, sorted by
// UTF-8 bytes.
func (db *DB) BlobReferences(ctx context.Context) ([]chain.BlobRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var refs []chain.BlobRef
	err := db.viewCtx(ctx, func(tx kv.Tx) (err error) {
		refs, err = meta.References(tx)
		return err
	})
	return refs, err
}

// Threads returns every thread that has a head, a checkpoint or a saved
// transcript, in UTF-8 byte order.
func (db *DB) Threads(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []string
	err := db.viewCtx(ctx, func(tx kv.Tx) (err error) {
		out, err = meta.Threads(tx)
		return err
	})
	return out, err
}

// Append adds in.Checkpoint as the new head of its thread if the head is
// still in.ExpectedHeadID, and returns the new head id. Checks, in order:
// identifiers, content, writer, duplicate id, head, parent (SPEC §2.5).
func (db *DB) Append(ctx context.Context, in chain.AppendInput) (string, error) {
	fn, err := db.appendTx(&in)
	if err != nil {
		return "", err
	}
	if err := db.write(ctx, fn); err != nil {
		return "", err
	}
	return in.Checkpoint.ID, nil
}

// appendTx validates in and returns the transaction body that appends it:
// the contract's checks, then the writes.
func (db *DB) appendTx(in *chain.AppendInput) (func(tx kv.Tx) error, error) {
	// An oversized record is refused before it is copied: the copy alone
	// would cost its whole size. The ids' errors still come first.
	if in.Checkpoint != nil && chain.RecordSize(in.Checkpoint) > chain.MaxRecordBytes {
		if err := chain.ValidateAppend(*in); err != nil {
			return nil, err
		}
	}
	// Copy before validating: nothing the caller does later can change
	// what was checked or what is stored.
	in.Checkpoint = in.Checkpoint.Clone()
	if err := chain.ValidateAppend(*in); err != nil {
		return nil, err
	}
	cp, expected, writer := in.Checkpoint, in.ExpectedHeadID, in.Writer
	prepared := meta.Prepare(cp) // outside the shared transaction: see meta.Prepared
	return func(tx kv.Tx) error {
		if err := meta.CheckLease(tx, cp.ThreadID, writer, db.opts.nowMs()); err != nil {
			return err
		}
		if meta.CheckpointExists(tx, cp.ID) {
			return chain.Errorf(chain.ErrDuplicateID, "checkpoint %q already exists", cp.ID)
		}
		head, err := meta.Head(tx, cp.ThreadID)
		if err != nil {
			return err
		}
		if head != expected {
			return chain.Errorf(chain.ErrStaleHead, "thread %q head is %s, expected %s", cp.ThreadID, nullable(head), nullable(expected))
		}
		if cp.ParentID != expected {
			return chain.Errorf(chain.ErrParentMismatch, "checkpoint %q parent %s is not the expected head %s", cp.ID, nullable(cp.ParentID), nullable(expected))
		}
		if err := meta.PutPrepared(tx, prepared); err != nil {
			return err
		}
		if err := db.point("append.publish"); err != nil {
			return err
		}
		return meta.SetHead(tx, cp.ThreadID, cp.ID)
	}, nil
}

// DeleteHead removes the thread's head checkpoint and drops its blob
// references. The head moves to the parent if that checkpoint still exists
// in the same thread (retention may have deleted it, and another thread may
// have reused its id), else the thread becomes empty.
func (db *DB) DeleteHead(ctx context.Context, threadID, checkpointID string, w lease.Writer) error {
	if err := chain.CheckIDs("threadId", threadID, "checkpoint id", checkpointID, "writer threadId", w.ThreadID); err != nil {
		return err
	}
	return db.write(ctx, func(tx kv.Tx) error {
		if err := meta.CheckLease(tx, threadID, w, db.opts.nowMs()); err != nil {
			return err
		}
		head, err := meta.Head(tx, threadID)
		if err != nil {
			return err
		}
		if head != checkpointID {
			return chain.Errorf(chain.ErrNotHead, "checkpoint %q is not the head of thread %q (head %s)", checkpointID, threadID, nullable(head))
		}
		_, parent, ok, err := meta.CheckpointHeader(tx, checkpointID)
		if err != nil {
			return err
		}
		if !ok {
			return chain.Errorf(chain.ErrNotHead, "head checkpoint %q of thread %q does not exist", checkpointID, threadID)
		}
		if err := meta.DeleteCheckpoints(tx, []string{checkpointID}); err != nil {
			return err
		}
		if err := db.point("deleteHead.publish"); err != nil {
			return err
		}
		// The parent may be gone (retention) and its id even reused by
		// another thread: a head only ever names its own thread's
		// checkpoint, or the thread becomes empty.
		next := ""
		if parent != "" {
			thread, _, ok, err := meta.CheckpointHeader(tx, parent)
			if err != nil {
				return err
			}
			if ok && thread == threadID {
				next = parent
			}
		}
		return meta.SetHead(tx, threadID, next)
	})
}

// DeleteCheckpoints keeps the newest keep checkpoints of the thread's head
// chain, counting the head (which is always kept, so keep 0 acts as 1), and
// deletes every other checkpoint of the thread, on the chain or not. It
// returns the deleted ids in List order. The head does not move; the oldest
// kept checkpoint may be left naming a deleted parent.
func (db *DB) DeleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer) ([]string, error) {
	return db.deleteCheckpoints(ctx, threadID, keep, w, nil)
}

// deleteCheckpoints is DeleteCheckpoints deleting, when only is not nil,
// only the checkpoints it names among those retention deletes now.
func (db *DB) deleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer, only map[string]struct{}) ([]string, error) {
	if err := chain.CheckIDs("threadId", threadID, "writer threadId", w.ThreadID); err != nil {
		return nil, err
	}
	if keep < 0 || keep > chain.MaxSafeInteger {
		return nil, chain.Errorf(chain.ErrInvalidEntry, "keep %d must be an integer from 0 to 2^53−1", keep)
	}
	var deleted []string
	err := db.write(ctx, func(tx kv.Tx) error {
		deleted = []string{}
		if err := meta.CheckLease(tx, threadID, w, db.opts.nowMs()); err != nil {
			return err
		}
		kept, err := keptSet(tx, threadID, max(keep, 1))
		if err != nil {
			return err
		}
		if deleted, err = threadCheckpoints(tx, threadID, kept); err != nil {
			return err
		}
		if only != nil {
			deleted = slices.DeleteFunc(deleted, func(id string) bool { _, ok := only[id]; return !ok })
		}
		if err := meta.DeleteCheckpoints(tx, deleted); err != nil {
			return err
		}
		return db.point("deleteCheckpoints.publish")
	})
	if err != nil {
		return nil, err
	}
	return deleted, nil
}

// threadCheckpoints returns the ids of the thread's checkpoints in List
// order, but for those in skip, each checked to be a stored checkpoint of
// the thread: the index names a missing one, or one of another thread,
// only in a damaged store, where deleting it would be wrong (ErrCorrupt).
// The result is never nil.
func threadCheckpoints(tx kv.Tx, threadID string, skip map[string]struct{}) ([]string, error) {
	ids := []string{}
	err := meta.ForEachInThread(tx, threadID, func(id string) error {
		if _, ok := skip[id]; ok {
			return nil
		}
		thread, _, ok, err := meta.CheckpointHeader(tx, id)
		if err == nil && (!ok || thread != threadID) {
			err = fmt.Errorf("%w: thread index of %q names checkpoint %q of thread %q (stored: %v)", chain.ErrCorrupt, threadID, id, thread, ok)
		}
		ids = append(ids, id)
		return err
	})
	return ids, err
}

// keptSet walks at most keep checkpoints from the head through parents,
// stopping at a root, a missing parent, a checkpoint of another thread or a
// repeat.
func keptSet(tx kv.Tx, threadID string, keep int) (map[string]struct{}, error) {
	kept := map[string]struct{}{}
	id, err := meta.Head(tx, threadID)
	for err == nil && id != "" && len(kept) < keep {
		if _, seen := kept[id]; seen {
			break
		}
		thread, parent, ok, herr := meta.CheckpointHeader(tx, id)
		if err = herr; !ok || thread != threadID {
			break
		}
		kept[id] = struct{}{}
		id = parent
	}
	return kept, err
}

// AcquireWriter takes the thread's writer lease. It never waits: a live
// lease is WRITER_CONFLICT; an expired one is taken over with a higher fence.
// The lease records this process as its holder.
func (db *DB) AcquireWriter(ctx context.Context, threadID string) (*lease.Lease, error) {
	return db.acquireWriter(ctx, threadID, proc.Self(), lease.AcquireOptions{})
}

// AcquireWriterWith is AcquireWriter with options. With TakeOverDead, a live
// lease whose holder was a process on this host that no longer runs (a
// writer killed before it released) is taken over with the next fence, as
// an expired one is, and the returned Lease's TookOver describes it; every
// other live lease is still WRITER_CONFLICT. The decision is made in the
// transaction that takes the lease, so concurrent acquirers cannot both win.
//
// opts.Holder, when set, is recorded as the lease's holder in place of this
// process (a server acquiring for a client).
func (db *DB) AcquireWriterWith(ctx context.Context, threadID string, opts lease.AcquireOptions) (*lease.Lease, error) {
	holder := proc.Self()
	if opts.Holder != nil {
		holder = *opts.Holder
	}
	return db.acquireWriter(ctx, threadID, holder, opts)
}

// acquireWriter takes the thread's writer lease recorded as held by holder.
func (db *DB) acquireWriter(ctx context.Context, threadID string, holder proc.Identity, opts lease.AcquireOptions) (*lease.Lease, error) {
	if err := chain.CheckID("threadId", threadID); err != nil {
		return nil, err
	}
	duration, renewAfter := db.opts.LeaseDuration, db.opts.RenewAfter
	if opts.Duration > 0 {
		duration = opts.Duration
		renewAfter = min(renewAfter, duration/3)
	}
	var g meta.Grant
	err := db.write(ctx, func(tx kv.Tx) (err error) {
		g, err = meta.AcquireLease(tx, threadID, holder, db.opts.nowMs(), duration.Milliseconds(), opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	l := lease.New(g.Writer, time.UnixMilli(g.ExpiresAt), renewAfter, db)
	l.TookOver = g.TookOver
	return l, nil
}

// Unlock breaks the thread's writer lease, live or expired, whoever holds
// it, on this host or another: the lease is removed and the fence counter
// advanced, so its holder's next write or renewal is WRITER_LOST and the
// next AcquireWriter gets a higher fence. It is for a holder that is known
// to be gone but cannot be proved gone from here (another host). It returns
// the removed lease without its owner token, or a State with Held false
// when the thread held none (nothing is then changed).
func (db *DB) Unlock(ctx context.Context, threadID string) (lease.State, error) {
	if err := chain.CheckID("threadId", threadID); err != nil {
		return lease.State{}, err
	}
	var removed lease.State
	err := db.write(ctx, func(tx kv.Tx) (err error) {
		removed, err = meta.BreakLease(tx, threadID)
		return err
	})
	if err != nil {
		return lease.State{}, err
	}
	return removed, nil
}

// DB is the lease.Backend of the leases it hands out.
var _ lease.Backend = (*DB)(nil)

// RenewWriter extends w's live lease to now + the lease duration and
// returns the new expiry (SPEC §2.8). An expired, released or replaced
// lease, or a writer no lease matches, cannot be renewed: WRITER_LOST.
// lease.Lease.Renew calls it; a server calls it for a client's writer.
func (db *DB) RenewWriter(ctx context.Context, w lease.Writer) (time.Time, error) {
	var exp int64
	err := db.write(ctx, func(tx kv.Tx) (err error) {
		exp, err = meta.RenewLease(tx, w, db.opts.nowMs(), db.opts.LeaseDuration.Milliseconds())
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(exp), nil
}

// ReleaseWriter removes the thread's lease if it is still w's, expired or
// not; otherwise it does nothing (SPEC §2.9). The fence counter stays.
func (db *DB) ReleaseWriter(ctx context.Context, w lease.Writer) error {
	return db.write(ctx, func(tx kv.Tx) error { return meta.ReleaseLease(tx, w) })
}

// nullable renders an optional id for messages: "" is null.
func nullable(id string) string {
	if id == "" {
		return "null"
	}
	return "\"" + id + "\""
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
