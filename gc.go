package sbxdb

import (
	"time"
)

// RepackStats says what Repack did.
type RepackStats struct {
	Packs  int   `json:"packs"`  // packs (and large files) rewritten or, with nothing live, removed
	Blobs  int   `json:"blobs"`  // live blobs copied
	Before int64 `json:"before"` // bytes of the packs rewritten
	After  int64 `json:"after"`  // bytes of the packs written in their place
	// Recompressed counts the packs and large files among Packs that were
	// rewritten for their level alone, and RecompressedBytes their bytes
	// (in Before).
	Recompressed      int   `json:"recompressed"`
	RecompressedBytes int64 `json:"recompressedBytes"`
	// Damaged lists the packs left as they were because a blob in them
	// could not be read back intact; sbxdb check --verify-blobs names it.
	Damaged []string `json:"damaged,omitempty"`
}

// Usage is what the blob directory holds, from the index.
type BlobUsage struct {
	Packs      int   `json:"packs"`
	PackBytes  int64 `json:"packBytes"` // pack files' sizes
	DeadBytes  int64 `json:"deadBytes"` // of which no entry names any more
	Blobs      int   `json:"blobs"`     // entries in the index
	LargeBytes int64 `json:"largeBytes"`
	RawBytes   int64 `json:"rawBytes"` // uncompressed bytes of every blob
	// Damaged counts index entries and pack records that do not decode;
	// they are left out of the sums (Check names them).
	Damaged int `json:"damaged,omitempty"`
}

// SweepOptions configures DB.Sweep; see gc.SweepInput.
type SweepOptions struct {
	// OlderThan: a blob goes only if it was last uploaded (or met by a
	// capture) more than OlderThan ago. Must be > 0 unless Immediate.
	OlderThan time.Duration
	// Immediate allows OlderThan == 0. Pins keep it safe for captures in
	// this process; nothing else writes to the store.
	Immediate bool
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
}

// GCOptions configures DB.GC.
type GCOptions struct {
	// Retain runs retention: on each thread, keep the newest Keep
	// checkpoints of its head chain, the head included, and delete the rest
	// (gc.KeepNewest; Keep 0 acts as 1, SPEC §10 Q1).
	Retain bool
	Keep   int
	// Threads limits retention to these threads; empty means all.
	Threads []string
	// OlderThan, Immediate: the sweep's window (SweepOptions).
	OlderThan time.Duration
	Immediate bool
	// RepackThreshold is the dead share at which a pack is rewritten; 0
	// means cas.DefaultRepackThreshold.
	RepackThreshold float64
	// Recompress also rewrites at cas.RecompressLevel the packs written
	// at a lower level more than OlderThan ago (cas.RepackOptions).
	Recompress bool
}

// GCPlan is what a GC with Options would do, decided without changing
// anything (a dry run): DB.PlanGC makes one, prints and tests take it as a
// value, and the engine's ExecuteGC carries it out. Its JSON has the
// fields of GCResult's and Freed.
//
// Executing a plan is safe however stale it is: each deletion is decided
// again under the locks that decide it in a GC, so a blob referenced since
// the plan is kept and a thread whose writer lease was taken since is
// skipped (and named busy); nothing the plan does not name is deleted by
// the retention or the sweep.
type GCPlan struct {
	// Options are those the plan was made with. Not in the JSON.
	Options GCOptions `json:"-"`
	// Retention: the checkpoint ids retention would delete, per thread,
	// and the threads it would skip because a live writer holds them.
	Retention RetentionResult `json:"retention"`
	// Sweep: the blob keys the sweep would delete once retention has run
	// (its counts drop the references of the checkpoints retention
	// deletes) and their stored bytes.
	Sweep SweepResult `json:"sweep"`
	// Repack: the packs and large files that repacking would rewrite
	// after that sweep (Packs, Before) and, of those, the ones it would
	// recompress (Recompressed, RecompressedBytes). Zero with the blobs
	// in object storage, where packs are not rewritten.
	Repack RepackStats `json:"repack"`
	// Freed is the bytes on disk the GC would give back, recompression
	// not counted: the large blob files the sweep deletes and the dead
	// bytes (the sweep's included) of the packs repacking rewrites. With
	// the blobs in object storage, the bytes the sweep deletes.
	Freed int64 `json:"freed"`
	// Orphans is always 0: orphan files are counted only when removed.
	Orphans int `json:"orphans"`
	// Before is the blob store usage when the plan was made; After is
	// the same, since planning changes nothing.
	Before BlobUsage `json:"before"`
	After  BlobUsage `json:"after"`
}

// GCResult is what DB.GC did.
type GCResult struct {
	Retention RetentionResult `json:"retention"`
	Sweep     SweepResult     `json:"sweep"`
	Repack    RepackStats     `json:"repack"`
	// Orphans counts blob files a crash left behind, removed once older
	// than OlderThan; moved into quarantine instead while the database may
	// be older than its blob files (after a meta-page fallback, until
	// check --repair), where check reports them. With blobs in a bucket it
	// also counts the packs an earlier repack retired, deleted once
	// retired longer than OlderThan (and an hour).
	Orphans int `json:"orphans"`
	// Blob store usage before and after.
	Before BlobUsage `json:"before"`
	After  BlobUsage `json:"after"`
}

// RetentionResult is what KeepNewestAll did.
type RetentionResult struct {
	// Deleted maps thread → deleted ids, only for threads where something was
	// deleted. It is never nil.
	Deleted map[string][]string `json:"deleted"`
	// Busy lists, in the order visited, the threads skipped because a live
	// writer holds their lease.
	Busy []string `json:"busy"`
}

// SweepResult is what Sweep did.
type SweepResult struct {
	Examined   int      `json:"examined"`   // distinct keys listed under the two prefixes
	Referenced int      `json:"referenced"` // of those, how many had a reference
	Deleted    []string `json:"deleted"`    // keys deleted (or, with DryRun, that would be), UTF-8 byte order
	Bytes      int64    `json:"bytes"`      // Info.Stored summed over Deleted
}
