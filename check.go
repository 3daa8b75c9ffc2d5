package sbxdb

import "fmt"

// CheckStoreOptions configures DB.Check. (CheckOptions validates Options.)
type CheckStoreOptions struct {
	// VerifyBlobs reads every blob back and checks it against its key.
	VerifyBlobs bool
	// Repair rewrites the blob and chunk reference counts from the
	// checkpoints when they disagree (SPEC §10 Q15), deleting chunks no
	// checkpoint uses, and the hold counts from the objects and artifact
	// records when they disagree; drops from the blob index every blob the check found
	// damaged or missing (read again first: see cas.Store.DropDamaged), so
	// that the next capture of the same bytes stores them again, and
	// forgets packs whose files are gone; stores again every intact blob
	// in quarantine that the index lacks, then empties the quarantine
	// (cas.Store.Reindex); and clears a meta-page note once reported.
	// The checkpoints naming a dropped blob are kept: CheckReport.Dropped
	// names them, and they restore again once the blob is stored again.
	// With VerifyBlobs every blob's bytes are checked; without, only what
	// the index says of its files (missing or truncated ones).
	Repair bool
	// Progress, if set, is called while blobs are verified with the number
	// read so far and the total.
	Progress func(done, total int)
	// BytesPerSecond, if positive, bounds the rate at which VerifyBlobs
	// reads blobs back, so that a background check (sbxdb serve
	// --scrub-every) takes a bounded share of the disk. The page walk and
	// the metadata checks are not paced: each runs in one read
	// transaction, and a long one delays a commit that grows the file
	// (bbolt remaps it only once every read transaction has ended).
	BytesPerSecond int64
}

// Severity of a finding: errors make a store unclean; warnings are states
// the contract allows but an operator may want to know of; notes are what
// ordinary operation leaves (a parent retention deleted), said so that
// nothing goes unexplained.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
	SeverityNote    = "note"
)

// Finding kinds.
const (
	FindingRecord         = "damaged-record" // a record that does not decode
	FindingIndex          = "thread-index"   // index and records disagree
	FindingHead           = "head"           // a head names a missing checkpoint
	FindingDanglingParent = "dangling-parent"
	FindingOffChain       = "off-chain" // a checkpoint no head chain reaches
	FindingRefCount       = "refcount"  // stored count ≠ recomputed count
	FindingChunk          = "chunk"     // a chunk missing, damaged, unused or miscounted
	FindingMissingBlob    = "missing-blob"
	FindingBlob           = "blob"       // damage found by the blob store's check
	FindingMetaPage       = "meta-page"  // the database opened on its older meta page
	FindingPending        = "pending"    // the pending set's weight or threads are off (a warning: they only time folds)
	FindingQuarantine     = "quarantine" // blob files moved aside because the database may be older than them (a warning)
	FindingHold           = "hold"       // stored hold count ≠ recount from the objects and artifact records
	FindingArtifactIndex  = "artifact-index"
)

// Finding is one problem Check found.
type Finding struct {
	Severity string `json:"severity"`
	Kind     string `json:"kind"`
	Subject  string `json:"subject"` // a checkpoint id, thread id or blob key
	Detail   string `json:"detail"`
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: %s %s: %s", f.Severity, f.Kind, f.Subject, f.Detail)
}

// CheckReport is what Check found.
type CheckReport struct {
	Threads     int `json:"threads"`
	Checkpoints int `json:"checkpoints"`
	Chunks      int `json:"chunks"`   // distinct chunks the checkpoints use
	BlobKeys    int `json:"blobKeys"` // distinct keys checkpoints reference
	Blobs       int `json:"blobs"`    // blobs stored
	// Objects and ArtifactRecords count the plain objects and artifact
	// records, and HeldKeys the distinct blob keys they name.
	Objects         int `json:"objects"`
	ArtifactRecords int `json:"artifactRecords"`
	HeldKeys        int `json:"heldKeys"`
	// Unreferenced counts stored blobs no checkpoint, object or artifact
	// record names: what a sweep deletes once they are older than its
	// window. Not a problem.
	Unreferenced int `json:"unreferenced"`
	// OrphanFiles counts large blob files no index entry names (left by
	// a crash); gc removes them. Not a problem either.
	OrphanFiles int       `json:"orphanFiles"`
	Verified    bool      `json:"verified"` // every blob was read back
	Repaired    int       `json:"repaired"` // findings Repair fixed: wrong counts, or the pending set
	Findings    []Finding `json:"findings"`
	// Dropped lists the damaged or missing blobs Repair removed from the
	// index that nothing in quarantine replaced, each with the checkpoints
	// naming it: they cannot be restored until the same bytes are stored
	// again (a capture of the same files does), and check reports them as
	// missing blobs until then.
	Dropped []DroppedBlob `json:"dropped,omitempty"`
	// Reindexed counts the blobs Repair stored again from quarantine, and
	// ReindexedFiles the quarantined files it emptied and removed.
	Reindexed      int `json:"reindexed,omitempty"`
	ReindexedFiles int `json:"reindexedFiles,omitempty"`
	// Left names what Repair had to leave for a later run: damaged blobs
	// a capture in progress relies on, and quarantined files holding a
	// blob that could not be replaced meanwhile.
	Left []string `json:"left,omitempty"`
}

// DroppedBlob is a blob Repair removed from the index, and the ids of the
// checkpoints that name it.
type DroppedBlob struct {
	Key         string   `json:"key"`
	Checkpoints []string `json:"checkpoints"`
}

// Clean reports whether the check found no errors (warnings allowed).
func (r *CheckReport) Clean() bool {
	for _, f := range r.Findings {
		if f.Severity == SeverityError {
			return false
		}
	}
	return true
}
