package engine

import (
	"context"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// ThreadSummary returns the number of the thread's checkpoints and their
// newest createdAt, in one read transaction over the thread's index keys
// alone: its cost grows with the number of checkpoints, not with their
// manifests. threadID is checked as List checks it; a damaged index key is
// ErrCorrupt. A damaged checkpoint record is not seen (List and Check see
// it). An unknown thread is the zero summary.
func (db *DB) ThreadSummary(ctx context.Context, threadID string) (sbxdb.ThreadSummary, error) {
	if err := firstErr(ctx.Err(), chain.CheckID("threadId", threadID)); err != nil {
		return sbxdb.ThreadSummary{}, err
	}
	var s sbxdb.ThreadSummary
	err := db.viewCtx(ctx, func(tx kv.Tx) error {
		n, latest, ok, err := meta.ThreadSummary(tx, threadID)
		if err != nil {
			return err
		}
		s = sbxdb.ThreadSummary{Checkpoints: n}
		if ok {
			s.LatestCreatedAt = &latest
		}
		return nil
	})
	if err != nil {
		return sbxdb.ThreadSummary{}, err
	}
	return s, nil
}
