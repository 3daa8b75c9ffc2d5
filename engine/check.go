package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// Check verifies the store (sbxdb check, SPEC §10 Q15): every record
// decodes; the thread index and the records agree; heads name stored
// checkpoints of their thread; reference counts equal a recomputation from
// every checkpoint (distinct keys per checkpoint); the artifact indexes
// match the artifact records, and hold counts equal a recomputation from
// the objects and artifact records; every referenced or held blob is
// stored; the blob index matches its files, and with VerifyBlobs every
// blob's bytes match its key. Dangling parents (left by retention) are
// notes; checkpoints off every head chain are warnings, and so is each file in
// the blob store's quarantine (with how many blobs it holds). The error
// result is for a check that could not run; what it found is in the
// report.
func (db *DB) Check(ctx context.Context, opts sbxdb.CheckStoreOptions) (*sbxdb.CheckReport, error) {
	if opts.Repair && db.c == nil {
		return nil, sbxdb.ErrReadOnly
	}
	// Every page, whatever this Open trusted (internal/boltcheck/cleanclose.go): a damaged
	// one fails the check, as it fails an Open that walks them.
	if err := db.meta.verifyLive(nil); err != nil {
		return nil, err
	}
	r := &sbxdb.CheckReport{Findings: []sbxdb.Finding{}}
	add := func(sev, kind, subject, format string, args ...any) {
		r.Findings = append(r.Findings, sbxdb.Finding{Severity: sev, Kind: kind, Subject: subject, Detail: fmt.Sprintf(format, args...)})
	}
	var recount, objects, records map[string]int64
	var recovered string
	err := db.view(func(tx kv.Tx) error {
		if raw := tx.Bucket(meta.BucketMeta).Get(meta.KeyRecovered); raw != nil {
			p, err := meta.Unseal(meta.BucketMeta, meta.KeyRecovered, raw)
			if err != nil {
				return err
			}
			recovered = string(p)
		}
		var err error
		if recount, err = db.checkChains(ctx, tx, r, add); err != nil {
			return err
		}
		objects, records, err = checkHolds(ctx, tx, r, add)
		return err
	})
	switch {
	case recovered != "":
		add(sbxdb.SeverityWarning, sbxdb.FindingMetaPage, DBFile, "%s", recovered)
	case db.metaNote != "" && db.c == nil:
		// A read-only open, which stores nothing. A writable one stored
		// the note, and a repair may have cleared it since.
		add(sbxdb.SeverityWarning, sbxdb.FindingMetaPage, DBFile, "%s", db.metaNote)
	}
	if err != nil {
		return nil, err
	}
	r.BlobKeys = len(recount)

	// Blobs: the referenced and held ones are stored; the store's own check.
	named := maps.Clone(recount)
	held := map[string]bool{}
	for _, m := range []map[string]int64{objects, records} {
		for k := range m {
			named[k] += 0
			held[k] = true
		}
	}
	r.HeldKeys = len(held)
	keys := slices.Sorted(maps.Keys(named))
	missing, err := db.blobs.Missing(ctx, keys)
	if err != nil {
		return nil, err
	}
	naming, err := db.checkpointsNaming(ctx, missing)
	if err != nil {
		return nil, err
	}
	for _, k := range missing {
		switch {
		case !held[k]:
			add(sbxdb.SeverityError, sbxdb.FindingMissingBlob, k, "referenced by %d checkpoints, not stored: %s (storing the same bytes again, as a capture of them does, heals them)",
				recount[k], listIDs(naming[k]))
		case recount[k] == 0 && objects[k] == 0:
			// A host may save the record before (or without) its bytes.
			add(sbxdb.SeverityWarning, sbxdb.FindingMissingBlob, k, "named by %d artifact records, not stored", records[k])
		default:
			add(sbxdb.SeverityError, sbxdb.FindingMissingBlob, k, "referenced by %d checkpoints and held by %d objects and %d artifact records, not stored: %s (storing the same bytes again heals them)",
				recount[k], objects[k], records[k], listIDs(naming[k]))
		}
	}
	u, err := db.blobs.Usage(ctx)
	if err != nil {
		return nil, err
	}
	r.Blobs = u.Blobs
	r.Unreferenced = u.Blobs - (len(named) - len(missing))
	if r.OrphanFiles, err = db.blobs.Orphans(ctx); err != nil {
		return nil, err
	}
	var damaged []string // keys of blobs found damaged or missing
	blobProblems := false
	blobsFrom := len(r.Findings)
	var pace func(int64)
	if opts.BytesPerSecond > 0 {
		pace = newPacer(ctx, opts.BytesPerSecond).pace
	}
	err = db.blobs.CheckPaced(ctx, opts.VerifyBlobs, opts.Progress, pace, func(key string, err error) {
		add(sbxdb.SeverityError, sbxdb.FindingBlob, key, "%v", err)
		blobProblems = true
		if key != "" && errors.Is(err, sbxdb.ErrBlobCorrupt) {
			damaged = append(damaged, key)
		}
	})
	if err != nil {
		return nil, err
	}
	// The blob store reports from several readers at once: its findings
	// are put in key order, so that two checks of one store read alike.
	slices.SortStableFunc(r.Findings[blobsFrom:], func(a, b sbxdb.Finding) int { return strings.Compare(a.Subject, b.Subject) })
	r.Verified = opts.VerifyBlobs
	quarantined, err := db.blobs.Quarantined(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range quarantined {
		detail := fmt.Sprintf("intact blobs: %d, not indexed: %d", q.Blobs, q.Unindexed)
		if q.Damaged > 0 {
			detail += fmt.Sprintf(", damaged: %d", q.Damaged)
		}
		add(sbxdb.SeverityWarning, sbxdb.FindingQuarantine, filepath.Join(BlobDir, q.Name),
			"%s: moved aside because the database may be older than the blob files; check --repair indexes what the index lacks and removes the file", detail)
	}

	if wrong := len(findingsOf(r, sbxdb.FindingRefCount)) + len(findingsOf(r, sbxdb.FindingChunk)); opts.Repair && wrong > 0 {
		// Recount inside the write transaction: appends may have run since.
		// Blob and chunk counts are rebuilt together: the blob rebuild
		// empties the pending set, which holds both.
		err := db.write(ctx, func(tx kv.Tx) error {
			counts, err := countRefs(ctx, tx)
			if err != nil {
				return err
			}
			uses, err := meta.ChunkUses(tx, true)
			if err != nil {
				return err
			}
			if err := meta.RebuildRefs(tx, counts); err != nil {
				return err
			}
			return meta.RebuildChunkRefs(tx, uses)
		})
		if err != nil {
			return r, fmt.Errorf("repairing reference counts: %w", err)
		}
		r.Repaired = wrong
	} else if opts.Repair && len(findingsOf(r, sbxdb.FindingPending)) > 0 {
		// The rebuild above empties the pending set; alone, it is weighed anew.
		if err := db.write(ctx, meta.WeighPending); err != nil {
			return r, fmt.Errorf("weighing the pending set: %w", err)
		}
		r.Repaired = len(findingsOf(r, sbxdb.FindingPending))
	}
	if wrong := len(findingsOf(r, sbxdb.FindingHold)); opts.Repair && wrong > 0 {
		err := db.write(ctx, func(tx kv.Tx) error {
			objects, records, _, err := meta.CountHolds(tx, true) // a damaged record stops the repair
			if err != nil {
				return err
			}
			return meta.RebuildHolds(tx, objects, records)
		})
		if err != nil {
			return r, fmt.Errorf("repairing hold counts: %w", err)
		}
		r.Repaired += wrong
	}
	if opts.Repair {
		if err := db.repairBlobs(ctx, r, blobProblems, damaged); err != nil {
			return r, err
		}
	}
	if opts.Repair && recovered != "" {
		// Reported once in full; the store itself checked out.
		err := db.write(ctx, func(tx kv.Tx) error { return tx.Bucket(meta.BucketMeta).Delete(meta.KeyRecovered) })
		if err != nil {
			return r, fmt.Errorf("clearing the meta-page note: %w", err)
		}
	}
	return r, nil
}

// repairBlobs drops the damaged blobs from the index (with blobProblems,
// the keys in damaged), re-indexes the quarantine, and records in r what
// was dropped for good and which checkpoints name it.
func (db *DB) repairBlobs(ctx context.Context, r *sbxdb.CheckReport, blobProblems bool, damaged []string) error {
	var dropped []string
	if blobProblems {
		st, err := db.blobs.DropDamaged(ctx, damaged)
		if err != nil {
			return fmt.Errorf("dropping damaged blobs from the index: %w", err)
		}
		dropped = st.Dropped
		for _, k := range st.Busy {
			r.Left = append(r.Left, k+": in use by a capture in progress, not dropped")
		}
	}
	st, err := db.blobs.Reindex(ctx)
	if err != nil {
		return fmt.Errorf("re-indexing the quarantine: %w", err)
	}
	r.Reindexed, r.ReindexedFiles = st.Blobs, st.Files
	for _, f := range st.Kept {
		r.Left = append(r.Left, filepath.Join(BlobDir, f)+": kept in quarantine, a blob it holds could not be replaced yet")
	}
	gone, err := db.blobs.Missing(ctx, dropped)
	if err != nil {
		return err
	}
	naming, err := db.checkpointsNaming(ctx, gone)
	if err != nil {
		return err
	}
	for _, k := range gone {
		r.Dropped = append(r.Dropped, sbxdb.DroppedBlob{Key: k, Checkpoints: append([]string{}, naming[k]...)})
	}
	return nil
}

// checkpointsNaming returns, for each of keys, the ids of the checkpoints
// naming it, in id order. Damaged records are skipped (check reports them).
func (db *DB) checkpointsNaming(ctx context.Context, keys []string) (map[string][]string, error) {
	out := map[string][]string{}
	if len(keys) == 0 {
		return out, nil
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	err := db.view(func(tx kv.Tx) error {
		return meta.ForEachCheckpoint(tx, func(id string, cp *chain.Checkpoint, err error) error {
			if err != nil {
				return nil
			}
			for _, k := range cp.BlobKeys() {
				if want[k] {
					out[k] = append(out[k], id)
				}
			}
			return ctx.Err()
		})
	})
	return out, err
}

// listIDs lists checkpoint ids for a finding, the first ten of them.
func listIDs(ids []string) string {
	const shown = 10
	if len(ids) <= shown {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:shown], ", "), len(ids)-shown)
}

// indexMayBeOlder reports whether the blob index may be older than the
// blob directory: this open found the newest meta page damaged and
// opened at the older one, or an earlier open did and no check --repair
// has run since (meta/recovered). The blob store then quarantines the
// files its index does not name rather than remove them. A note that
// cannot be read counts as set.
func (db *DB) indexMayBeOlder() bool {
	if db.metaNote != "" {
		return true
	}
	noted := true
	db.view(func(tx kv.Tx) error {
		b := tx.Bucket(meta.BucketMeta)
		noted = b != nil && b.Get(meta.KeyRecovered) != nil
		return nil
	})
	return noted
}

func findingsOf(r *sbxdb.CheckReport, kind string) []sbxdb.Finding {
	var out []sbxdb.Finding
	for _, f := range r.Findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

// checkChains checks the chain buckets in one read transaction and returns
// the recomputed reference counts.
func (db *DB) checkChains(ctx context.Context, tx kv.Tx, r *sbxdb.CheckReport, add func(sev, kind, subject, format string, args ...any)) (map[string]int64, error) {
	threadOf := map[string]string{} // checkpoint id → thread
	parentOf := map[string]string{}
	counts := map[string]int64{}
	n := 0
	err := meta.ForEachCheckpoint(tx, func(id string, cp *chain.Checkpoint, err error) error {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err != nil {
			add(sbxdb.SeverityError, sbxdb.FindingRecord, id, "%v", err)
			return nil
		}
		threadOf[id], parentOf[id] = cp.ThreadID, cp.ParentID
		for _, k := range cp.BlobKeys() {
			counts[k]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Checkpoints = n

	// The thread index names each checkpoint exactly once, under its thread.
	indexed := map[string]bool{}
	err = meta.ForEachIndexed(tx, func(threadID string, createdAt int64, id string) error {
		t, ok := threadOf[id]
		switch {
		case !ok:
			add(sbxdb.SeverityError, sbxdb.FindingIndex, id, "thread %q lists a checkpoint that is not stored", threadID)
		case t != threadID:
			add(sbxdb.SeverityError, sbxdb.FindingIndex, id, "listed under thread %q, belongs to %q", threadID, t)
		case indexed[id]:
			add(sbxdb.SeverityError, sbxdb.FindingIndex, id, "listed twice")
		}
		indexed[id] = true
		return nil
	})
	if err != nil {
		add(sbxdb.SeverityError, sbxdb.FindingIndex, "", "%v", err)
	}
	for id := range threadOf {
		if !indexed[id] {
			add(sbxdb.SeverityError, sbxdb.FindingIndex, id, "stored but not listed under thread %q", threadOf[id])
		}
	}

	// Heads, and what their chains reach.
	reached := map[string]bool{}
	err = meta.ForEachHead(tx, func(threadID, id string) error {
		t, ok := threadOf[id]
		if !ok || t != threadID {
			add(sbxdb.SeverityError, sbxdb.FindingHead, threadID, "head names checkpoint %q, which is not stored in the thread", id)
			return nil
		}
		for id != "" && !reached[id] && threadOf[id] == threadID {
			reached[id] = true
			id = parentOf[id]
		}
		return nil
	})
	if err != nil {
		add(sbxdb.SeverityError, sbxdb.FindingHead, "", "%v", err)
	}
	threads, err := meta.Threads(tx)
	if err != nil {
		return nil, err
	}
	r.Threads = len(threads)
	for _, id := range slices.Sorted(maps.Keys(threadOf)) {
		if p := parentOf[id]; p != "" {
			if _, ok := threadOf[p]; !ok {
				add(sbxdb.SeverityNote, sbxdb.FindingDanglingParent, id, "parent %q is not stored, as after retention deleted it", p)
			}
		}
		if !reached[id] {
			add(sbxdb.SeverityWarning, sbxdb.FindingOffChain, id, "no head chain of thread %q reaches it", threadOf[id])
		}
	}

	// Chunks.
	uses, err := meta.ChunkUses(tx, false)
	if err != nil {
		return nil, err
	}
	r.Chunks = len(uses)
	problems, err := meta.CheckChunks(tx, uses)
	if err != nil {
		add(sbxdb.SeverityError, sbxdb.FindingChunk, "", "chunks unreadable: %v", err)
	}
	for _, p := range problems {
		add(sbxdb.SeverityError, sbxdb.FindingChunk, p.Chunk, "%s", p.Detail)
	}

	pending, err := meta.CheckPending(tx)
	if err != nil {
		add(sbxdb.SeverityError, sbxdb.FindingRefCount, "", "pending set unreadable: %v", err)
	}
	for _, p := range pending {
		add(sbxdb.SeverityWarning, sbxdb.FindingPending, "refs_pending", "%s", p)
	}

	// Reference counts.
	stored, err := meta.References(tx)
	if err != nil {
		add(sbxdb.SeverityError, sbxdb.FindingRefCount, "", "stored counts unreadable: %v", err)
		return counts, nil
	}
	seen := make(map[string]bool, len(stored))
	var bad []string
	for _, ref := range stored {
		seen[ref.Key] = true
		if want := counts[ref.Key]; ref.References != want {
			bad = append(bad, fmt.Sprintf("%s\x00stored %d, checkpoints use it %d times", ref.Key, ref.References, want))
		}
	}
	for k, want := range counts {
		if !seen[k] {
			bad = append(bad, fmt.Sprintf("%s\x00stored 0, checkpoints use it %d times", k, want))
		}
	}
	slices.Sort(bad)
	for _, b := range bad {
		key, detail, _ := strings.Cut(b, "\x00")
		add(sbxdb.SeverityError, sbxdb.FindingRefCount, key, "%s", detail)
	}
	return counts, nil
}

// checkHolds checks the plain objects and artifact records in tx: every
// record decodes, the artifact indexes match the records, and the stored
// hold counts equal a recount. It returns the recount: per blob key, how
// many objects and how many artifact records name it.
func checkHolds(ctx context.Context, tx kv.Tx, r *sbxdb.CheckReport, add func(sev, kind, subject, format string, args ...any)) (objects, records map[string]int64, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	objects, records, damaged, err := meta.CountHolds(tx, false)
	if err != nil {
		return nil, nil, err
	}
	counts := maps.Clone(objects)
	for k, n := range records {
		counts[k] += n
	}
	for _, p := range damaged {
		add(sbxdb.SeverityError, sbxdb.FindingRecord, p.Bucket+"/"+p.Key, "%s", p.Detail)
	}
	if r.Objects, err = kv.Count(tx.Bucket(meta.BucketObjects)); err != nil {
		return nil, nil, err
	}
	if r.ArtifactRecords, err = kv.Count(tx.Bucket(meta.BucketArtifactRecords)); err != nil {
		return nil, nil, err
	}
	problems, err := meta.CheckArtifactIndexes(tx)
	if err != nil {
		add(sbxdb.SeverityError, sbxdb.FindingArtifactIndex, "", "artifact indexes unreadable: %v", err)
	}
	for _, p := range problems {
		add(sbxdb.SeverityError, sbxdb.FindingArtifactIndex, p.Bucket+"/"+p.Key, "%s", p.Detail)
	}
	stored, err := meta.Holds(tx)
	if err != nil {
		add(sbxdb.SeverityError, sbxdb.FindingHold, "", "stored hold counts unreadable: %v", err)
		return objects, records, nil
	}
	seen := make(map[string]bool, len(stored))
	for _, h := range stored {
		seen[h.Key] = true
		if want := counts[h.Key]; h.References != want {
			add(sbxdb.SeverityError, sbxdb.FindingHold, h.Key, "stored %d, objects and artifact records name it %d times", h.References, want)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if !seen[k] {
			add(sbxdb.SeverityError, sbxdb.FindingHold, k, "stored 0, objects and artifact records name it %d times", counts[k])
		}
	}
	return objects, records, nil
}

// countRefs recomputes every key's count from the stored checkpoints.
func countRefs(ctx context.Context, tx kv.Tx) (map[string]int64, error) {
	counts := map[string]int64{}
	err := meta.ForEachCheckpoint(tx, func(id string, cp *chain.Checkpoint, err error) error {
		if err != nil {
			return err // never rebuild counts from a damaged store
		}
		for _, k := range cp.BlobKeys() {
			counts[k]++
		}
		return ctx.Err()
	})
	return counts, err
}

// pacer bounds the rate of the reads it is told of: after n bytes in all,
// pace returns no earlier than n/rate seconds after the first call (or ctx
// ends). It is safe for concurrent use.
type pacer struct {
	ctx   context.Context
	rate  float64 // bytes per second
	mu    sync.Mutex
	start time.Time
	bytes int64
}

func newPacer(ctx context.Context, bytesPerSecond int64) *pacer {
	return &pacer{ctx: ctx, rate: float64(bytesPerSecond)}
}

func (p *pacer) pace(n int64) {
	p.mu.Lock()
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.bytes += n
	due := p.start.Add(time.Duration(float64(p.bytes) / p.rate * float64(time.Second)))
	p.mu.Unlock()
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.ctx.Done():
		}
	}
}
