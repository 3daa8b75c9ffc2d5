package sbxdb

import (
	"context"
	"encoding/json"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
)

// ArtifactRecord is the metadata a host keeps beside a generated file
// (docs/API.md, Artifact records).
type ArtifactRecord struct {
	ArtifactID string `json:"artifactId"`
	RunID      string `json:"runId"`
	ThreadID   string `json:"threadId"`
	// BlobKey, when set, is a content-addressed blob key; the record holds
	// the blob for the garbage collector while it exists.
	BlobKey   string `json:"blobKey,omitempty"`
	Name      string `json:"name"`
	MimeType  string `json:"mimeType"`
	Size      int64  `json:"size"`
	SourceURL string `json:"sourceUrl,omitempty"`
	CreatedAt int64  `json:"createdAt"` // epoch ms
}

// ArtifactRecords is the store of artifact records. Every method first
// validates its identifiers (SANDBOX_SNAPSHOT_INVALID_ID); a write that
// fails changes nothing.
type ArtifactRecords interface {
	// Save inserts or overwrites the record of rec.ArtifactID. Checks, in
	// order: artifactId, runId, threadId (INVALID_ID); then blobKey (empty
	// or a content-addressed key), name and mimeType (non-empty text),
	// sourceUrl (text), size (0 to 2^53−1) and createdAt (±(2^53−1)), each
	// SANDBOX_SNAPSHOT_INVALID_ENTRY. The blob need not be stored.
	Save(ctx context.Context, rec ArtifactRecord) error
	// Get returns the record, or nil and no error when the id is unknown.
	Get(ctx context.Context, artifactID string) (*ArtifactRecord, error)
	// ListForRun and ListForThread return the records of a run or a
	// thread by createdAt, then artifactId bytes; [] when there are none.
	ListForRun(ctx context.Context, runID string) ([]ArtifactRecord, error)
	ListForThread(ctx context.Context, threadID string) ([]ArtifactRecord, error)
	// Delete removes the record; a missing id is not an error.
	Delete(ctx context.Context, artifactID string) error
	// DeleteForRun removes every record of the run and says how many.
	DeleteForRun(ctx context.Context, runID string) (int, error)
}

// DeleteThreadResult says what DeleteThread removed. A thread that had
// nothing is the zero result with an empty Checkpoints.
type DeleteThreadResult struct {
	// Checkpoints are the deleted checkpoints' ids, in List order.
	Checkpoints []string `json:"checkpoints"`
	// Transcript reports whether a saved transcript was removed.
	Transcript bool `json:"transcript"`
	// Lease reports whether a writer lease, live or expired, was removed.
	Lease bool `json:"lease"`
	// ArtifactRecords counts the thread's artifact records removed.
	ArtifactRecords int `json:"artifactRecords"`
}

// StoreStats describes what a store holds and what it costs on disk
// (sbxdb stats).
type StoreStats struct {
	Threads     int `json:"threads"`
	Checkpoints int `json:"checkpoints"`
	Chunks      int `json:"chunks"`
	// LogicalMetadataBytes is what the checkpoints' records would take
	// stored whole, each with its full manifest and conversation (as
	// format 1 stored them); PhysicalMetadataBytes is what their records
	// and shared chunks take. SharingRatio is logical / physical.
	LogicalMetadataBytes  int64   `json:"logicalMetadataBytes"`
	PhysicalMetadataBytes int64   `json:"physicalMetadataBytes"`
	SharingRatio          float64 `json:"sharingRatio"`
	// Blobs counts stored blobs; BlobLogicalBytes is their uncompressed
	// size, each counted once however many checkpoints use it;
	// BlobPhysicalBytes is what the pack and large files take.
	Blobs             int   `json:"blobs"`
	BlobLogicalBytes  int64 `json:"blobLogicalBytes"`
	BlobPhysicalBytes int64 `json:"blobPhysicalBytes"`
	// Packs counts the pack files; BlobDeadBytes is what of them no index
	// entry names any more, which a repack gives back.
	Packs         int   `json:"packs"`
	BlobDeadBytes int64 `json:"blobDeadBytes"`
	// DBFileBytes is the size of the bbolt file; FreePages of its pages
	// hold nothing (reused by later writes; sbxdb compact gives them back).
	DBFileBytes int64 `json:"dbFileBytes"`
	PageSize    int   `json:"pageSize"`
	FreePages   int   `json:"freePages"`
	// Metadata is the database holding the metadata (its URL without a
	// password) instead of the bbolt file, whose three fields are then 0.
	Metadata string `json:"metadata,omitempty"`
}

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
// reference store (memstore) implement it.
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

// ThreadSummary is what List says of a thread's size and age, read from
// the thread index without decoding a checkpoint.
type ThreadSummary struct {
	// Checkpoints is the number of the thread's checkpoints: len(List).
	Checkpoints int `json:"checkpoints"`
	// LatestCreatedAt is the newest createdAt among them (that of List's
	// last), in epoch milliseconds; nil when the thread has none.
	LatestCreatedAt *int64 `json:"latestCreatedAt"`
}
