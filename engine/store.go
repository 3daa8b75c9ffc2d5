package engine

import (
	"context"
	"encoding/json"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
)

// CheckpointStore is the required part of the SandboxCheckpointStore
// contract (SPEC §2). Every method first validates its identifiers
// (SANDBOX_SNAPSHOT_INVALID_ID); reads return values that share no memory
// with the store; a write that fails changes nothing.
type CheckpointStore interface {
	// Get returns the checkpoint, or nil and no error when id is unknown.
	Get(ctx context.Context, id string) (*chain.Checkpoint, error)
	// List returns every checkpoint of the thread, on the head chain or not,
	// sorted by createdAt and then id bytes; [] for an unknown thread.
	List(ctx context.Context, threadID string) ([]*chain.Checkpoint, error)
	// Head returns the thread's head id, or "" when it has none.
	Head(ctx context.Context, threadID string) (string, error)
	// Append adds the checkpoint and makes it the head in one compare-and-swap
	// against in.ExpectedHeadID, and adds one reference to each distinct blob
	// key. It returns the new head id. Checks run in the order of SPEC §2.5.
	Append(ctx context.Context, in chain.AppendInput) (string, error)
	// DeleteHead removes the head and moves the head to its parent (or
	// clears it when the parent does not exist), dropping its references.
	DeleteHead(ctx context.Context, threadID, checkpointID string, w lease.Writer) error
	// AcquireWriter takes the thread's writer lease without waiting.
	AcquireWriter(ctx context.Context, threadID string) (*lease.Lease, error)
	// BlobReferences returns every blob key with a count above 0, sorted.
	BlobReferences(ctx context.Context) ([]chain.BlobRef, error)
}

// Pruner is the optional retention capability (SPEC §5.1, §10 Q1–Q4).
type Pruner interface {
	// DeleteCheckpoints keeps the newest keep checkpoints of the head chain
	// (the head always) and deletes every other checkpoint of the thread,
	// returning the deleted ids in List order.
	DeleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer) ([]string, error)
}

// Forker is the optional fork capability (SPEC §3).
type Forker interface {
	// Fork copies a checkpoint of one thread as the root of an empty
	// destination thread, with the destination transcript, in one
	// transaction. It touches no blob bytes.
	Fork(ctx context.Context, in chain.ForkInput) (*chain.Checkpoint, error)
}

// Transcripts is the per-thread message store the fork writes (SPEC §10 Q8).
type Transcripts interface {
	// LoadThread returns the thread's transcript, [] when none was saved.
	LoadThread(ctx context.Context, threadID string) ([]json.RawMessage, error)
	// SaveThread replaces the thread's transcript.
	SaveThread(ctx context.Context, threadID string, msgs []json.RawMessage) error
}

// Store is everything an sbxdb store offers: the contract, its optional
// capabilities, transcripts and the instance store. *DB and the in-memory
// reference store (engine/memstore) implement it.
type Store interface {
	CheckpointStore
	Pruner
	Forker
	Transcripts
	Instances() InstanceStore
}

// InstanceRecord maps a compound sandbox key to the provider sandbox to
// resume (SPEC §4). Empty optional fields are absent.
type InstanceRecord struct {
	Key               string `json:"key"`
	Provider          string `json:"provider"`
	ProviderSandboxID string `json:"providerSandboxId"`
	LatestSnapshotID  string `json:"latestSnapshotId,omitempty"`
	ThreadID          string `json:"threadId"`
	LatestRunID       string `json:"latestRunId,omitempty"`
	UpdatedAt         int64  `json:"updatedAt"` // epoch ms
}

// InstanceStore is the SandboxInstanceStore contract. It validates nothing;
// any key, the empty one included, is accepted.
type InstanceStore interface {
	// Get returns the record, or nil and no error when the key is unknown.
	Get(ctx context.Context, key string) (*InstanceRecord, error)
	// Upsert inserts or fully replaces the record of rec.Key.
	Upsert(ctx context.Context, rec InstanceRecord) error
	// Delete removes the record; a missing key is not an error.
	Delete(ctx context.Context, key string) error
}
