package engine

import (
	"context"
	"encoding/json"

	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// Fork makes a copy of a source checkpoint the root of an empty destination
// thread and sets the destination transcript to the checkpoint's
// conversation, in one transaction (SPEC §3, §10 Q8). Label and source run id
// are not copied; no blob bytes are touched, only reference counts.
func (db *DB) Fork(ctx context.Context, in chain.ForkInput) (*chain.Checkpoint, error) {
	if err := chain.CheckIDs(
		"sourceThreadId", in.SourceThreadID,
		"sourceCheckpointId", in.SourceCheckpointID,
		"destinationThreadId", in.DestinationThreadID,
		"destinationCheckpointId", in.DestinationCheckpointID,
		"writer threadId", in.Writer.ThreadID,
	); err != nil {
		return nil, err
	}
	if err := chain.CheckCreatedAt("fork createdAt", in.CreatedAt); err != nil {
		return nil, err
	}
	if err := db.point("fork.preflight"); err != nil {
		return nil, err
	}
	var fork *chain.Checkpoint
	err := db.write(ctx, func(tx kv.Tx) error {
		if in.SourceThreadID == in.DestinationThreadID {
			return chain.Errorf(chain.ErrForkSourceThreadMismatch, "cannot fork thread %q into itself", in.SourceThreadID)
		}
		src, err := meta.GetCheckpoint(tx, in.SourceCheckpointID)
		if err != nil {
			return err
		}
		if src == nil {
			return chain.Errorf(chain.ErrForkSourceNotFound, "source checkpoint %q does not exist", in.SourceCheckpointID)
		}
		if src.ThreadID != in.SourceThreadID {
			return chain.Errorf(chain.ErrForkSourceThreadMismatch, "source checkpoint %q belongs to thread %q, not %q", src.ID, src.ThreadID, in.SourceThreadID)
		}
		if err := meta.CheckLease(tx, in.DestinationThreadID, in.Writer, db.opts.nowMs()); err != nil {
			return err
		}
		if err := destinationEmpty(tx, in.DestinationThreadID, in.DestinationCheckpointID); err != nil {
			return err
		}
		fork = &chain.Checkpoint{
			ID: in.DestinationCheckpointID, ThreadID: in.DestinationThreadID,
			CreatedAt: in.CreatedAt, Reason: chain.ReasonForkRoot,
			Files: src.Files, Conversation: src.Conversation, Artifacts: src.Artifacts,
		}
		if err := chain.ValidateContent(fork); err != nil {
			return err
		}
		// An integrity guard (the durable reference does the same): a
		// source key without references means the counts are damaged.
		prepared := meta.Prepare(fork)
		counter := meta.NewRefCounter(tx)
		for _, k := range prepared.BlobKeys() {
			ok, err := counter.Referenced(k)
			if err != nil {
				return err
			}
			if !ok {
				return chain.Errorf(chain.ErrInvalidEntry, "source blob %q of checkpoint %q has no stored reference", k, src.ID)
			}
		}
		if err := meta.SaveTranscript(tx, in.DestinationThreadID, fork.Conversation); err != nil {
			return err
		}
		if err := meta.PutPrepared(tx, prepared); err != nil {
			return err
		}
		if err := db.point("fork.publish"); err != nil {
			return err
		}
		return meta.SetHead(tx, in.DestinationThreadID, fork.ID)
	})
	if err != nil {
		return nil, err
	}
	return fork, nil
}

// destinationEmpty returns FORK_DESTINATION_NOT_EMPTY if the thread has a
// saved transcript (even an empty one), a checkpoint, a head or an artifact
// record (SPEC §3.2), or if the checkpoint id is used in any thread.
func destinationEmpty(tx kv.Tx, threadID, checkpointID string) error {
	notEmpty := func(why string) error {
		return chain.Errorf(chain.ErrForkDestinationNotEmpty, "fork destination thread %q %s", threadID, why)
	}
	if _, present, err := meta.LoadTranscript(tx, threadID); err != nil {
		return err
	} else if present {
		return notEmpty("has a saved transcript")
	}
	if meta.ThreadHasCheckpoints(tx, threadID) {
		return notEmpty("has checkpoints")
	}
	if head, err := meta.Head(tx, threadID); err != nil {
		return err
	} else if head != "" {
		return notEmpty("has a head")
	}
	if meta.ThreadHasArtifactRecords(tx, threadID) {
		return notEmpty("has artifact records")
	}
	if meta.CheckpointExists(tx, checkpointID) {
		return notEmpty("cannot take checkpoint id " + nullable(checkpointID) + ": it is used")
	}
	return nil
}

// LoadThread returns the thread's saved transcript, or [] when none was
// saved.
func (db *DB) LoadThread(ctx context.Context, threadID string) ([]json.RawMessage, error) {
	if err := firstErr(ctx.Err(), chain.CheckID("threadId", threadID)); err != nil {
		return nil, err
	}
	var msgs []json.RawMessage
	err := db.viewCtx(ctx, func(tx kv.Tx) (err error) {
		msgs, _, err = meta.LoadTranscript(tx, threadID)
		return err
	})
	return msgs, err
}

// SaveThread replaces the thread's transcript. Each message must be JSON;
// it is stored byte for byte.
func (db *DB) SaveThread(ctx context.Context, threadID string, msgs []json.RawMessage) error {
	if err := firstErr(chain.CheckID("threadId", threadID), chain.ValidateMessages(msgs)); err != nil {
		return err
	}
	p := meta.EncodeMessages(msgs) // a copy: later changes to msgs are not seen
	return db.write(ctx, func(tx kv.Tx) error { return meta.SaveTranscriptPayload(tx, threadID, p) })
}
