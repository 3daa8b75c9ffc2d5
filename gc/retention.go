package gc

import (
	"context"
	"errors"
	"fmt"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
)

// Retainer is the checkpoint store side of retention.
type Retainer interface {
	// AcquireWriter takes the thread's writer lease without waiting; a live
	// lease held by another writer is a WRITER_CONFLICT error.
	AcquireWriter(ctx context.Context, threadID string) (*lease.Lease, error)
	// DeleteCheckpoints keeps the first keep checkpoints of the head chain
	// (the head counts) and deletes the rest of the thread (SPEC §5.1).
	DeleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer) ([]string, error)
}

// KeepNewest acquires the thread's writer lease, keeps the newest keep
// checkpoints of its head chain (the head counts; keep 0 acts as 1), deletes
// the rest, and releases the lease. It returns the deleted ids. An error of
// the delete wins over an error of the release (as the customer's keepNewest,
// which releases in finally); when only the release fails, the deleted ids are
// returned with its error, since they are gone.
//
// An invalid thread id (INVALID_ID) or a negative keep (INVALID_ENTRY) is an
// error before any lease is taken, in that order (SPEC §5.1): taking one would
// only block a capture for nothing.
func KeepNewest(ctx context.Context, s Retainer, threadID string, keep int) (deleted []string, err error) {
	// SPEC §5.1's order: identifiers, then keep.
	if err := chain.CheckID("threadId", threadID); err != nil {
		return nil, err
	}
	if err := checkKeep(keep); err != nil {
		return nil, err
	}
	l, err := s.AcquireWriter(ctx, threadID)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("gc: AcquireWriter(%q) returned no lease and no error", threadID)
	}
	defer func() {
		// WithoutCancel: a caller cancelling mid-delete must still give the
		// lease back, or the thread stays blocked until the lease expires.
		if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil && err == nil {
			err = fmt.Errorf("gc: release writer of thread %q: %w", threadID, rerr)
		}
	}()
	return s.DeleteCheckpoints(ctx, threadID, keep, l.Writer)
}

// ThreadLister lists the threads of a store.
type ThreadLister interface {
	Threads(ctx context.Context) ([]string, error)
}

// KeepNewestAll applies KeepNewest to every thread (or to threads, if
// non-empty). A thread whose lease is held by a live writer is skipped and
// reported in Busy (a capture is running there; the next run will get it);
// any other error stops and is returned with the result so far.
func KeepNewestAll(ctx context.Context, s interface {
	Retainer
	ThreadLister
}, keep int, threads ...string) (sbxdb.RetentionResult, error) {
	res := sbxdb.RetentionResult{Deleted: map[string][]string{}}
	if err := checkKeep(keep); err != nil {
		return res, err
	}
	if len(threads) == 0 {
		var err error
		if threads, err = s.Threads(ctx); err != nil {
			return res, fmt.Errorf("gc: list threads: %w", err)
		}
	}
	for _, t := range threads {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		deleted, err := KeepNewest(ctx, s, t, keep)
		if len(deleted) > 0 {
			res.Deleted[t] = deleted
		}
		switch {
		case err == nil:
		case busy(err):
			res.Busy = append(res.Busy, t)
		default:
			return res, fmt.Errorf("gc: thread %q: %w", t, err)
		}
	}
	return res, nil
}

// busy reports whether err says another live writer holds the lease.
func busy(err error) bool {
	return chain.Code(err) == chain.CodeWriterConflict || errors.Is(err, chain.ErrWriterConflict)
}

// checkKeep rejects a keep the store would reject (SPEC §5.1 1b, §10 Q2), so
// that no lease is taken and no thread listed for nothing.
func checkKeep(keep int) error {
	if keep < 0 || int64(keep) > chain.MaxSafeInteger {
		return chain.Errorf(chain.ErrInvalidEntry, "keep %d must be an integer from 0 to 2^53−1", keep)
	}
	return nil
}
