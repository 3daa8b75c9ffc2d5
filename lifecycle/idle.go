package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
)

// Janitor is what DeleteIdleThreads needs of a store: engine.DB and
// client.Client both have it.
type Janitor interface {
	Threads(ctx context.Context) ([]string, error)
	ThreadSummary(ctx context.Context, threadID string) (sbxdb.ThreadSummary, error)
	DeleteThread(ctx context.Context, threadID string, force bool) (sbxdb.DeleteThreadResult, error)
}

// IdleResult is what DeleteIdleThreads did.
type IdleResult struct {
	// Deleted are the threads deleted, in the order visited.
	Deleted []sbxdb.DeleteThreadResult
	// Busy are the idle threads left alone because a writer holds their
	// lease: a run is going on there after all.
	Busy []string
}

// DeleteIdleThreads deletes every thread whose newest checkpoint is older
// than maxAge at now (createdAt, epoch ms): its checkpoints, head,
// transcript, writer lease and artifact records, as sbxdb delete-thread
// does; the blobs they used go with the next gc. A thread with no
// checkpoint (a saved transcript alone, a lease) is not idle by this
// measure and is kept. A thread whose writer lease is live is skipped and
// listed in Busy, never forced. Any other error stops the walk and is
// returned with what was done so far. Reading the summaries never reads a
// checkpoint.
func DeleteIdleThreads(ctx context.Context, s Janitor, maxAge time.Duration, now time.Time) (IdleResult, error) {
	var res IdleResult
	if maxAge <= 0 {
		return res, errors.New("lifecycle: maxAge must be positive")
	}
	threads, err := s.Threads(ctx)
	if err != nil {
		return res, err
	}
	cutoff := now.Add(-maxAge).UnixMilli()
	for _, t := range threads {
		sum, err := s.ThreadSummary(ctx, t)
		if err != nil {
			return res, err
		}
		if sum.LatestCreatedAt == nil || *sum.LatestCreatedAt >= cutoff {
			continue
		}
		d, err := s.DeleteThread(ctx, t, false)
		switch {
		case errors.Is(err, chain.ErrWriterConflict):
			res.Busy = append(res.Busy, t)
		case err != nil:
			return res, err
		default:
			res.Deleted = append(res.Deleted, d)
		}
	}
	return res, nil
}
