// Package meta is the metadata side of a store, on internal/kv (the bbolt
// file sbx.db, or a PostgreSQL database through internal/kv/pgkv): bucket
// layout, record codec, and the operations the engine runs inside its
// transactions.
//
// The engine owns the database and its transactions; every function here
// that takes a kv.Tx runs inside the caller's. meta stores the model of
// package chain (checkpoints, heads, transcripts, blob reference counts),
// the writer state of package lease, and the records that name blobs beside
// checkpoints (plain objects, artifact records); it knows nothing of blob
// bytes, which the blob store (package cas) keeps beside it. The layout is drawn once,
// in schema.go, above the bucket names.
package meta

// The layout of the metadata, format version 4 (engine.FormatVersion says
// what older formats held and how they are migrated), drawn for sbx.db; a
// PostgreSQL database holds the same buckets. Each bucket is a top-level
// kv bucket; beneath it, its keys → their values. <x> is the bytes of
// string x; be64 is 8 bytes big-endian; identifiers never contain NUL, so
// <threadId> 0x00 is an exact prefix of one thread's index keys.
//
// Every value is sealed (Seal): a record-version byte, the payload, and an
// xxhash64 of bucket, key and payload, checked on every read.
//
//	sbx.db
//	├── meta                          the store's own state
//	│   ├── format → uvarint          the layout's version (engine.FormatVersion)
//	│   ├── recovered → text          when and why the file last opened on its
//	│   │                             older bbolt meta page; check warns of it
//	│   │                             until a repair clears it
//	│   └── blobs → text              metadata in a shared database only: where
//	│                                 the blobs it indexes are (s3://BUCKET/
//	│                                 PREFIX, or "dir:" and the blob
//	│                                 directory's id); a server whose blobs
//	│                                 are elsewhere is refused
//	│                                 (engine/shared.go)
//	├── checkpoints
//	│   └── <checkpoint id> → record  header, artifacts and the ids of its
//	│                                 chunks, or a small manifest inline
//	│                                 (record.go)
//	├── chunks
//	│   └── be64(chunk id) → bytes    part of a manifest or one message, shared
//	│                                 by the checkpoints that use it (chunks.go)
//	├── chunk_refs
//	│   └── be64(chunk id) → uvarint  folded count of the checkpoints using the
//	│                                 chunk (> 0); the pending checkpoints add
//	│                                 theirs
//	├── thread_index
//	│   └── <threadId> 0x00 be64(createdAt xor 1<<63) <checkpoint id> → empty
//	│                                 one key per checkpoint: a thread's
//	│                                 checkpoints are one range scan in List
//	│                                 order (createdAt, then id bytes)
//	├── heads
//	│   └── <threadId> → <checkpoint id>
//	│                                 the thread's head
//	├── refs                          sequence: its number of keys, a capacity
//	│   │                             hint (0 in stores written before it was kept)
//	│   └── <blob key> → uvarint      folded reference count (> 0):
//	│                                 count(k) = refs[k] + the pending
//	│                                 checkpoints using k (refs.go)
//	├── refs_pending                  sequence: the pending set's weight, 1 per
//	│   │                             checkpoint plus 1 per 256 manifest entries
//	│   │                             (PendingWeight)
//	│   └── be64(createdAt xor 1<<63) <checkpoint id> → <threadId>
//	│                                 each checkpoint whose references are not
//	│                                 folded into refs yet (refs_pending.go);
//	│                                 formats 1 and 2 keyed it by id, with an
//	│                                 empty value
//	├── transcripts
//	│   └── <threadId> → message list
//	│                                 present, even empty, it blocks a fork
//	│                                 (transcripts.go)
//	├── writers
//	│   └── <threadId> → writer state
//	│                                 last fence, then the lease if any (owner
//	│                                 token, fence, expiry) and its holder when
//	│                                 recorded (leases.go)
//	├── instances
//	│   └── sha256(<key>) → instance record
//	│                                 holding the full key, so that the empty
//	│                                 key and keys past bbolt's 32 KiB limit are
//	│                                 stored too (engine/instances.go)
//	├── objects
//	│   └── <object key> → object record
//	│                                 a plain object (a key outside the blob
//	│                                 namespaces): the key of the blob holding
//	│                                 its bytes, size, content type, custom
//	│                                 metadata, upload time (objects.go)
//	├── artifact_records
//	│   └── <artifactId> → artifact record
//	│                                 the metadata a host keeps beside a
//	│                                 generated file (artifact_records.go)
//	├── artifact_runs
//	│   └── <runId> 0x00 be64(createdAt xor 1<<63) <artifactId> → empty
//	├── artifact_threads
//	│   └── <threadId> 0x00 be64(createdAt xor 1<<63) <artifactId> → empty
//	│                                 one key per record in each: a run's or a
//	│                                 thread's records are one range scan in
//	│                                 list order (createdAt, then id bytes)
//	├── blob_holds
//	│   └── <blob key> → uvarint      how many objects and artifact records
//	│                                 name the blob (> 0): a sweep keeps it.
//	│                                 Kept apart from refs, which counts
//	│                                 checkpoints only (the contract's
//	│                                 listBlobReferences); updated in the
//	│                                 transaction that writes the record
//	│                                 (holds.go)
//	└── cas_meta, cas_index, cas_packs
//	                                  the blob store's index, in the same file;
//	                                  drawn and declared in cas/format.go
var (
	BucketMeta   = []byte("meta")
	KeyFormat    = []byte("format")
	KeyRecovered = []byte("recovered")
	KeyBlobs     = []byte("blobs")

	BucketCheckpoints = []byte("checkpoints")
	BucketChunks      = []byte("chunks")
	BucketChunkRefs   = []byte("chunk_refs")
	BucketThreadIndex = []byte("thread_index")
	BucketHeads       = []byte("heads")
	BucketRefs        = []byte("refs")
	BucketPendingRefs = []byte("refs_pending")
	BucketTranscripts = []byte("transcripts")

	BucketWriters   = []byte("writers")
	BucketInstances = []byte("instances")

	BucketObjects         = []byte("objects")
	BucketArtifactRecords = []byte("artifact_records")
	BucketArtifactRuns    = []byte("artifact_runs")
	BucketArtifactThreads = []byte("artifact_threads")
	BucketBlobHolds       = []byte("blob_holds")
)

// Buckets lists the buckets above that the engine creates at Open; the
// blob store creates its own.
var Buckets = [][]byte{BucketMeta, BucketWriters, BucketInstances,
	BucketCheckpoints, BucketChunks, BucketChunkRefs, BucketThreadIndex,
	BucketHeads, BucketRefs, BucketPendingRefs, BucketTranscripts,
	BucketObjects, BucketArtifactRecords, BucketArtifactRuns, BucketArtifactThreads, BucketBlobHolds}
