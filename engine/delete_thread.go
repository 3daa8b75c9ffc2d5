package engine

import (
	"context"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/lease"
)

// DeleteThread removes everything of the thread, in one write transaction:
// its checkpoints (those List returns), its head, its saved transcript, its
// writer lease and its artifact records, so that the thread is empty in
// every sense: Threads no longer lists it, and it may be a fork's
// destination again. Each deleted checkpoint's blob references and chunks
// are dropped as DeleteCheckpoints drops them, and each artifact record's
// hold as ArtifactRecords().Delete drops it; the blobs themselves are left
// to the garbage collector's sweep.
//
// A live writer lease is WRITER_CONFLICT, and nothing changes, unless force;
// with force it is broken as Unlock breaks it. Either way the thread's fence
// counter is kept and advanced past a removed lease, so a writer that held
// it gets WRITER_LOST from then on and the next AcquireWriter of the same
// thread id gets a higher fence than any before. An invalid threadId is
// INVALID_ID; a thread with nothing stored is not an error: the result
// says nothing was deleted.
func (db *DB) DeleteThread(ctx context.Context, threadID string, force bool) (sbxdb.DeleteThreadResult, error) {
	if err := chain.CheckID("threadId", threadID); err != nil {
		return sbxdb.DeleteThreadResult{}, err
	}
	var res sbxdb.DeleteThreadResult
	err := db.write(ctx, func(tx kv.Tx) error {
		res = sbxdb.DeleteThreadResult{Checkpoints: []string{}} // the body may run twice (a shared transaction retried alone)
		s, err := meta.LoadLease(tx, threadID)
		if err != nil {
			return err
		}
		if !force && s.Live(db.opts.nowMs()) {
			return lease.ConflictError(threadID, s)
		}
		if res.Checkpoints, err = threadCheckpoints(tx, threadID, nil); err != nil {
			return err
		}
		records, err := meta.ArtifactRecordsOfThread(tx, threadID)
		if err != nil {
			return err
		}
		if err := meta.DeleteCheckpoints(tx, res.Checkpoints); err != nil {
			return err
		}
		if err := meta.SetHead(tx, threadID, ""); err != nil {
			return err
		}
		if res.Transcript, err = meta.DeleteTranscript(tx, threadID); err != nil {
			return err
		}
		for _, r := range records {
			if _, err := meta.DeleteArtifactRecord(tx, r.ArtifactID); err != nil {
				return err
			}
			res.ArtifactRecords++
		}
		removed, err := meta.BreakLease(tx, threadID)
		if err != nil {
			return err
		}
		res.Lease = removed.Held
		return db.point("deleteThread.publish")
	})
	if err != nil {
		return sbxdb.DeleteThreadResult{}, err
	}
	return res, nil
}
