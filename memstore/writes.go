package memstore

import (
	"context"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
)

// Each write below has the same shape: validate the input, take mu, read the
// clock once, run the stateful checks in the contract's order, run the
// point's test hook, and only then mutate. Nothing after the hook can fail,
// so a write either fails with nothing changed or applies completely.

// Append stores the checkpoint, makes it the thread's head and adds one
// reference to each of its distinct blob keys; it returns the new head id.
// Checks run in the seed's order (SPEC §2.5, §10 Q6):
//
//  1. identifiers                              INVALID_ID
//  2. createdAt, reason, files, artifacts and   INVALID_ENTRY
//     conversation
//  3. writer is the thread's live lease         WRITER_LOST
//  4. checkpoint id unused in every thread      DUPLICATE_ID
//  5. head == ExpectedHeadID ("" is null)       STALE_HEAD
//  6. ParentID == ExpectedHeadID                PARENT_MISMATCH
func (s *Store) Append(ctx context.Context, in chain.AppendInput) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	// Copy before validating, so a caller mutating its checkpoint (even
	// concurrently) cannot change what was checked or stored.
	in.Checkpoint = in.Checkpoint.Clone()
	if err := chain.ValidateAppend(in); err != nil { // steps 1–2
		return "", err
	}
	cp := in.Checkpoint
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkWriter(cp.ThreadID, in.Writer, s.nowMs()); err != nil { // 3
		return "", err
	}
	if _, dup := s.checkpoints[cp.ID]; dup { // 4
		return "", chain.Errorf(chain.ErrDuplicateID, "checkpoint %q already exists", cp.ID)
	}
	if head := s.heads[cp.ThreadID]; head != in.ExpectedHeadID { // 5
		return "", chain.Errorf(chain.ErrStaleHead, "head of thread %q is %s, expected %s",
			cp.ThreadID, nullable(head), nullable(in.ExpectedHeadID))
	}
	if cp.ParentID != in.ExpectedHeadID { // 6
		return "", chain.Errorf(chain.ErrParentMismatch, "parent %s of checkpoint %q is not the expected head %s",
			nullable(cp.ParentID), cp.ID, nullable(in.ExpectedHeadID))
	}
	if err := s.runPoint("append.publish"); err != nil {
		return "", err
	}
	s.putCheckpoint(cp)
	s.heads[cp.ThreadID] = cp.ID
	return cp.ID, nil
}

// DeleteHead removes the thread's head checkpoint and drops one reference to
// each of its distinct blob keys (SPEC §2.6). Checks, in order:
//
//  1. threadID, checkpointID, w.ThreadID        INVALID_ID
//  2. w is the thread's live lease              WRITER_LOST
//  3. checkpointID is the head (no head: not)   NOT_HEAD
//  4. the head checkpoint is stored             NOT_HEAD
//
// The head moves to the parent only if the parent is a stored checkpoint of
// the same thread; otherwise (a root, or a parent pruned by
// DeleteCheckpoints, SPEC §10 Q4) the head is cleared. The same-thread
// condition keeps the invariant that a head names a checkpoint of its own
// thread even when a pruned parent's id was reused in another thread.
func (s *Store) DeleteHead(ctx context.Context, threadID, checkpointID string, w lease.Writer) error {
	if err := enter(ctx, "threadId", threadID, "checkpoint id", checkpointID, "writer threadId", w.ThreadID); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkWriter(threadID, w, s.nowMs()); err != nil {
		return err
	}
	head, ok := s.heads[threadID]
	if !ok || head != checkpointID {
		return chain.Errorf(chain.ErrNotHead, "checkpoint %q is not the head of thread %q (head %s)",
			checkpointID, threadID, nullable(head))
	}
	cp := s.checkpoints[checkpointID]
	if cp == nil {
		return chain.Errorf(chain.ErrNotHead, "head checkpoint %q of thread %q does not exist", checkpointID, threadID)
	}
	if err := s.runPoint("deleteHead.publish"); err != nil {
		return err
	}
	s.dropCheckpoint(checkpointID)
	if p := s.checkpoints[cp.ParentID]; cp.ParentID != "" && p != nil && p.ThreadID == threadID {
		s.heads[threadID] = cp.ParentID
	} else {
		delete(s.heads, threadID)
	}
	return nil
}

// DeleteCheckpoints keeps the newest keep checkpoints of the thread's head
// chain, the head included and always kept, and deletes every other
// checkpoint of the thread, off-chain ones too. It returns the deleted ids in
// List order, [] when nothing was deleted (SPEC §5.1, §10 Q1–Q4). Checks, in
// order:
//
//  1. threadID, w.ThreadID                      INVALID_ID
//  2. 0 <= keep <= 2^53−1                       INVALID_ENTRY
//  3. w is the thread's live lease              WRITER_LOST
//
// Kept checkpoints are not modified, so the oldest kept one may name a
// deleted parent. The head does not move.
func (s *Store) DeleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer) ([]string, error) {
	if err := enter(ctx, "threadId", threadID, "writer threadId", w.ThreadID); err != nil {
		return nil, err
	}
	if keep < 0 || int64(keep) > chain.MaxSafeInteger {
		return nil, chain.Errorf(chain.ErrInvalidEntry, "keep %d must be an integer from 0 to 2^53−1", keep)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkWriter(threadID, w, s.nowMs()); err != nil {
		return nil, err
	}
	kept := s.headChain(threadID, max(keep, 1))
	deleted := []string{}
	for _, cp := range s.threadCheckpoints(threadID) {
		if _, k := kept[cp.ID]; !k {
			deleted = append(deleted, cp.ID)
		}
	}
	if err := s.runPoint("deleteCheckpoints.publish"); err != nil {
		return nil, err
	}
	for _, id := range deleted {
		s.dropCheckpoint(id)
	}
	return deleted, nil
}

// headChain returns the first n checkpoints of the thread's head chain: the
// head, its parent, and so on. The walk stops at a root, at a parent that is
// not stored or belongs to another thread, and at a repeat (a cycle, possible
// once ids are reused). The caller holds mu.
func (s *Store) headChain(threadID string, n int) map[string]struct{} {
	chainSet := map[string]struct{}{}
	for id := s.heads[threadID]; id != "" && len(chainSet) < n; {
		cp := s.checkpoints[id]
		if cp == nil || cp.ThreadID != threadID {
			break
		}
		if _, seen := chainSet[id]; seen {
			break
		}
		chainSet[id] = struct{}{}
		id = cp.ParentID
	}
	return chainSet
}

// Fork copies checkpoint in.SourceCheckpointID of thread in.SourceThreadID
// as the root of the empty thread in.DestinationThreadID, sets that thread's
// transcript to the checkpoint's conversation and its head to the new
// checkpoint, and adds one reference to each distinct blob key. It touches
// no blob bytes. Checks, in order (SPEC §3.1, §10 Q8):
//
//  1. the four ids and Writer.ThreadID          INVALID_ID
//  2. CreatedAt within ±(2^53−1)                INVALID_ENTRY
//  3. source thread != destination thread       FORK_SOURCE_THREAD_MISMATCH
//  4. source checkpoint stored                  FORK_SOURCE_NOT_FOUND
//  5. it belongs to the source thread           FORK_SOURCE_THREAD_MISMATCH
//  6. Writer is for the destination thread      WRITER_LOST
//  7. it is the destination's live lease        WRITER_LOST
//  8. destination empty: no saved transcript    FORK_DESTINATION_NOT_EMPTY
//     (even []), no checkpoint of the thread, no
//     head, destination checkpoint id unused
//  9. the new checkpoint validates              INVALID_ENTRY
//  10. every source blob key has a count > 0    INVALID_ENTRY
//
// The new checkpoint is a root with reason fork-root and the source's files,
// conversation and artifacts; label and sourceRunId are not copied. The
// destination lease is not released.
func (s *Store) Fork(ctx context.Context, in chain.ForkInput) (*chain.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// in is a copy already: every field is read once, here.
	if err := chain.CheckIDs("sourceThreadId", in.SourceThreadID, "sourceCheckpointId", in.SourceCheckpointID,
		"destinationThreadId", in.DestinationThreadID, "destinationCheckpointId", in.DestinationCheckpointID,
		"writer threadId", in.Writer.ThreadID); err != nil { // 1
		return nil, err
	}
	if err := chain.CheckCreatedAt("fork createdAt", in.CreatedAt); err != nil { // 2
		return nil, err
	}
	// The preflight hook runs outside the lock, where a concurrent caller
	// could slip in; everything below re-reads state under the lock.
	if err := s.runPoint("fork.preflight"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.SourceThreadID == in.DestinationThreadID { // 3
		return nil, chain.Errorf(chain.ErrForkSourceThreadMismatch,
			"fork destination thread %q is the source thread", in.DestinationThreadID)
	}
	src := s.checkpoints[in.SourceCheckpointID]
	if src == nil { // 4
		return nil, chain.Errorf(chain.ErrForkSourceNotFound, "fork source checkpoint %q does not exist", in.SourceCheckpointID)
	}
	if src.ThreadID != in.SourceThreadID { // 5
		return nil, chain.Errorf(chain.ErrForkSourceThreadMismatch,
			"fork source checkpoint %q belongs to thread %q, not %q", src.ID, src.ThreadID, in.SourceThreadID)
	}
	if err := s.checkWriter(in.DestinationThreadID, in.Writer, s.nowMs()); err != nil { // 6–7
		return nil, err
	}
	if why := s.destinationState(in.DestinationThreadID, in.DestinationCheckpointID); why != "" { // 8
		return nil, chain.Errorf(chain.ErrForkDestinationNotEmpty, "fork destination thread %q is not empty: %s",
			in.DestinationThreadID, why)
	}
	staged := src.Clone()
	cp := &chain.Checkpoint{
		ID:           in.DestinationCheckpointID,
		ThreadID:     in.DestinationThreadID,
		CreatedAt:    in.CreatedAt,
		Reason:       chain.ReasonForkRoot,
		Files:        staged.Files,
		Conversation: staged.Conversation,
		Artifacts:    staged.Artifacts,
	}
	if err := chain.ValidateContent(cp); err != nil { // 9
		return nil, err
	}
	for _, k := range cp.BlobKeys() { // 10: the source's keys, which cp shares
		if s.refs[k] <= 0 {
			return nil, chain.Errorf(chain.ErrInvalidEntry,
				"fork source checkpoint %q names blob %q, which has no stored reference", src.ID, k)
		}
	}
	if err := s.runPoint("fork.publish"); err != nil {
		return nil, err
	}
	s.putCheckpoint(cp)
	s.heads[cp.ThreadID] = cp.ID
	s.transcripts[cp.ThreadID] = chain.CloneMessages(cp.Conversation)
	return cp.Clone(), nil
}

// destinationState says why a fork destination is not empty, or "" when it
// is (SPEC §10 Q8). The caller holds mu.
func (s *Store) destinationState(threadID, checkpointID string) string {
	if _, ok := s.transcripts[threadID]; ok {
		return "it has a saved transcript"
	}
	if len(s.byThread[threadID]) > 0 {
		return "it has checkpoints"
	}
	if _, ok := s.heads[threadID]; ok {
		return "it has a head"
	}
	if cp := s.checkpoints[checkpointID]; cp != nil {
		return "checkpoint id " + checkpointID + " is used in thread " + cp.ThreadID
	}
	return ""
}

// nullable renders an id for a message, "" as null.
func nullable(id string) string {
	if id == "" {
		return "null"
	}
	return `"` + id + `"`
}
