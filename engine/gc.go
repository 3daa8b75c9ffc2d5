package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/lease"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/gc"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// Garbage collection, wired to this store. The algorithm is package gc's;
// what the engine adds is what makes it safe while captures run (SPEC §5.2):
// a capture pins every key it relies on from the moment it finds the blob
// stored until its append has committed or failed (cas/pins.go), and the
// sweep deletes in transactions of the group commit, where each key is
// checked again at the moment of deletion: no checkpoint references it, no
// plain object or artifact record holds it (meta.HoldCount), it is not
// pinned, and its upload time is still outside the window (a put or a
// StatObject that refreshed it after the listing keeps it). Those
// transactions are the lock appends take, so a sweep never holds a capture
// up for longer than one of them. OlderThan stays as an independent guard.
//
// The marks are the checkpoints' references and the holds of objects and
// artifact records together; the contract's BlobReferences lists the
// checkpoints' alone.

// Sweep deletes the blobs no checkpoint references that are older than
// opts.OlderThan (SPEC §5.2) and returns what it deleted; with opts.DryRun it
// returns its plan (gc.PlanSweep) and deletes nothing. It refuses to run,
// with an error naming a key, when a referenced blob is missing: the store
// is damaged, and sbxdb check says how. Deleted packed blobs leave dead
// space in their packs until Repack.
func (db *DB) Sweep(ctx context.Context, opts sbxdb.SweepOptions) (sbxdb.SweepResult, error) {
	if db.c == nil && !opts.DryRun {
		return sbxdb.SweepResult{}, sbxdb.ErrReadOnly
	}
	release, err := db.lockSweeps(ctx)
	if err != nil {
		return sbxdb.SweepResult{}, err
	}
	defer release()
	// One clock reading for the listing's window and the re-check at
	// deletion, which keeps a blob uploaded at or after now−OlderThan.
	in := db.sweepInput(opts.OlderThan, opts.Immediate, db.opts.Now(), nil)
	if opts.DryRun {
		p, err := gc.PlanSweep(ctx, in)
		if err != nil {
			return sbxdb.SweepResult{}, err
		}
		return p.Result(), nil
	}
	return gc.Sweep(ctx, in)
}

// sweepInput wires the sweep to this store: marks from checkedRefs (less
// the references in without, which a planned retention would drop) and
// deletes through sweepBlobs, which re-checks each key at now−olderThan.
func (db *DB) sweepInput(olderThan time.Duration, immediate bool, now time.Time, without map[string]int64) gc.SweepInput {
	return gc.SweepInput{
		References: checkedRefs{db: db, without: without},
		Blobs:      &sweepBlobs{db: db, deadline: now.Add(-olderThan)},
		OlderThan:  olderThan,
		Immediate:  immediate,
		Now:        func() time.Time { return now },
	}
}

// retainer is the store as GC's retention sees it: its leases live
// retentionLease, not the store's lease duration, so that a server killed
// while retention holds a thread's lease blocks the thread for seconds
// (from another host, where it cannot be proved dead, nothing else would
// free it before the lease expires).
type retainer struct {
	*DB
	// only, when not nil, limits the deletions to the ids it names per
	// thread (an executed plan's): a checkpoint the plan did not show is
	// never deleted, even if a capture since pushed it out of the newest
	// keep.
	only map[string]map[string]struct{}
}

// retentionLease is how long a lease GC's retention takes lives: one
// DeleteCheckpoints transaction per thread, far shorter.
const retentionLease = 10 * time.Second

func (r retainer) AcquireWriter(ctx context.Context, threadID string) (*lease.Lease, error) {
	return r.AcquireWriterWith(ctx, threadID, lease.AcquireOptions{Duration: retentionLease})
}

func (r retainer) DeleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer) ([]string, error) {
	var only map[string]struct{}
	if r.only != nil {
		if only = r.only[threadID]; only == nil {
			only = map[string]struct{}{}
		}
	}
	return r.deleteCheckpoints(ctx, threadID, keep, w, only)
}

// lockSweeps holds gcMu and, on shared metadata, the database's sweep lock
// (shared.go): one sweep at a time, in this process and across the
// servers.
func (db *DB) lockSweeps(ctx context.Context) (release func(), err error) {
	db.gcMu.Lock()
	unlock, err := db.meta.lock(ctx, "sweep")
	if err != nil {
		db.gcMu.Unlock()
		return nil, err
	}
	return func() { unlock(); db.gcMu.Unlock() }, nil
}

// markedRefs returns, in key byte order, the checkpoints' reference counts
// and every blob key the sweep must keep for what names it: those counts
// plus the holds of plain objects and artifact records, read in one
// transaction.
func (db *DB) markedRefs(ctx context.Context) (cps, all []chain.BlobRef, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	err = db.view(func(tx kv.Tx) error {
		if cps, err = meta.References(tx); err != nil {
			return err
		}
		holds, err := meta.Holds(tx)
		all = mergeRefs(cps, holds)
		return err
	})
	return cps, all, err
}

// mergeRefs merges two lists of counts in key byte order, summing a key's
// counts.
func mergeRefs(a, b []chain.BlobRef) []chain.BlobRef {
	if len(b) == 0 {
		return a
	}
	out := make([]chain.BlobRef, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i].Key < b[j].Key:
			out = append(out, a[i])
			i++
		case i == len(a) || b[j].Key < a[i].Key:
			out = append(out, b[j])
			j++
		default:
			out = append(out, chain.BlobRef{Key: a[i].Key, References: a[i].References + b[j].References})
			i, j = i+1, j+1
		}
	}
	return out
}

// blobUse is the in-use test of a delete from the blob store, inside the
// deleting transaction: a key is in use while a checkpoint references it
// or a plain object or artifact record holds it, and, unless deadline is
// zero, while the upload time of its index entry, read in the same
// transaction, is not before deadline. pending, if set, caches the pending
// checkpoints across the transactions of one sweep.
func (db *DB) blobUse(pending *meta.PendingCache, deadline time.Time) cas.InUse {
	return func(tx kv.Tx) (func(string, time.Time) (bool, error), error) {
		var rc *meta.RefCounter
		if pending != nil {
			var err error
			if rc, err = pending.Counter(tx); err != nil {
				return nil, err
			}
		} else {
			rc = meta.NewRefCounter(tx)
		}
		return func(key string, uploaded time.Time) (bool, error) {
			if !deadline.IsZero() && !uploaded.Before(deadline) {
				return true, nil // refreshed since the listing
			}
			if n, err := meta.HoldCount(tx, key); n > 0 || err != nil {
				return true, err
			}
			return rc.Referenced(key)
		}, nil
	}
}

// checkedRefs reads the marks for a sweep (markedRefs) and refuses when a
// checkpoint references a blob the store does not hold. The blob index is
// read after the references, and only a sweep deletes (one at a time), so
// a key missing then was missing for good. A held blob that is missing
// does not stop a sweep: an artifact record may name bytes a host has not
// stored (yet), and check reports an object's missing blob.
type checkedRefs struct {
	db      *DB
	without map[string]int64 // references a dry-run retention would drop
}

func (r checkedRefs) BlobReferences(ctx context.Context) ([]chain.BlobRef, error) {
	cps, refs, err := r.db.markedRefs(ctx)
	if err == nil {
		err = r.db.point("sweep.marked") // a test may call the store here
	}
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(cps))
	for i, ref := range cps {
		keys[i] = ref.Key
	}
	missing, err := r.db.blobs.Missing(ctx, keys)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		if len(missing) == 1 {
			return nil, chain.Errorf(chain.ErrMissingBlob, "sweep refused: 1 referenced blob is missing (%s); run sbxdb check", missing[0])
		}
		return nil, chain.Errorf(chain.ErrMissingBlob,
			"sweep refused: %d referenced blobs are missing (first %s); run sbxdb check", len(missing), missing[0])
	}
	if len(r.without) > 0 {
		out := refs[:0]
		for _, ref := range refs {
			ref.References -= r.without[ref.Key]
			if ref.References > 0 {
				out = append(out, ref)
			}
		}
		refs = out
	}
	return refs, nil
}

// sweepBlobs is the blob store as the sweep sees it: DeleteKeys deletes in
// one group-commit transaction per group, re-checking each key there.
type sweepBlobs struct {
	db       *DB
	deadline time.Time         // a blob uploaded at or after it is kept
	pending  meta.PendingCache // one sweep's transactions run one at a time
	warm     bool
}

func (b *sweepBlobs) List(ctx context.Context, prefix string) ([]cas.Info, error) {
	return b.db.blobs.List(ctx, prefix)
}

func (b *sweepBlobs) Delete(ctx context.Context, key string) error {
	_, err := b.DeleteKeys(ctx, []string{key})
	return err
}

// DeleteKeys deletes keys that are unused at the moment of deletion
// (blobUse): no reference, no hold, no upload since the deadline. The
// counts are read in the delete transaction itself, the pending part from
// a cache that decodes each pending checkpoint once per sweep.
func (b *sweepBlobs) DeleteKeys(ctx context.Context, keys []string) ([]string, error) {
	if !b.warm {
		// Decode the pending checkpoints in a read transaction, outside
		// the write lock; the write transactions then find them cached.
		b.warm = true
		if err := b.db.view(func(tx kv.Tx) error { _, err := b.pending.Counter(tx); return err }); err != nil {
			return nil, err
		}
	}
	return b.db.blobs.DeleteUnused(ctx, keys, b.db.blobUse(&b.pending, b.deadline))
}

// Repack rewrites the blob packs whose dead share is at least
// opts.Threshold (0 means cas.DefaultRepackThreshold), giving back the
// space of swept blobs, and with opts.Recompress the cold packs written at
// a level below cas.RecompressLevel (cas.Store.Repack).
func (db *DB) Repack(ctx context.Context, opts cas.RepackOptions) (sbxdb.RepackStats, error) {
	if db.c == nil {
		return sbxdb.RepackStats{}, sbxdb.ErrReadOnly
	}
	if opts.Threshold == 0 {
		opts.Threshold = cas.DefaultRepackThreshold
	}
	return db.blobs.Repack(ctx, opts)
}

// GCPlan is a GC planned by PlanGC: the printable sbxdb.GCPlan and what
// ExecuteGC needs besides, the sweep's plan with its sizes and the clock
// reading its window is measured from.
type GCPlan struct {
	sbxdb.GCPlan
	db    *DB
	keep  int           // retention's keep (max(Keep, 1)), 0 for none
	sweep *gc.SweepPlan // nil: the sweep is planned when it runs (GC)
	now   time.Time     // the sweep plan's clock reading
	// lazy: retention is planned when it runs, after the usage and the
	// refusal are read (GC: nothing is read twice).
	lazy bool
}

// gcKeep validates opts' retention and returns its keep: 0 for none.
func gcKeep(opts sbxdb.GCOptions) (int, error) {
	if !opts.Retain {
		return 0, nil
	}
	if opts.Keep < 0 || opts.Keep > chain.MaxSafeInteger {
		return 0, chain.Errorf(chain.ErrInvalidEntry, "keep %d must be an integer from 0 to 2^53−1", opts.Keep)
	}
	return max(opts.Keep, 1), nil
}

// PlanGC decides what GC with opts would do now and changes nothing (a dry
// run; the store may be read-only): the checkpoints retention would delete
// and the threads it would skip, the blob keys the sweep would delete once
// those checkpoints are gone (decoding them for the references they drop),
// the packs repacking would rewrite after that sweep, and the bytes given
// back. Like GC it refuses, deleting nothing, when a referenced blob is
// missing. ExecuteGC carries the plan out.
func (db *DB) PlanGC(ctx context.Context, opts sbxdb.GCOptions) (*GCPlan, error) {
	keep, err := gcKeep(opts)
	if err != nil {
		return nil, err
	}
	p := &GCPlan{db: db, keep: keep, GCPlan: sbxdb.GCPlan{Options: opts, Retention: sbxdb.RetentionResult{Deleted: map[string][]string{}}}}
	if p.Before, err = db.blobs.Usage(ctx); err != nil {
		return nil, err
	}
	p.After = p.Before
	if err := db.refuseMissing(ctx); err != nil {
		return nil, err
	}
	without, err := db.planRetention(ctx, keep, opts.Threads, &p.Retention, true)
	if err != nil {
		return nil, err
	}
	release, err := db.lockSweeps(ctx)
	if err != nil {
		return nil, err
	}
	p.now = db.opts.Now()
	p.sweep, err = gc.PlanSweep(ctx, db.sweepInput(opts.OlderThan, opts.Immediate, p.now, without))
	release()
	if err != nil {
		return nil, err
	}
	p.Sweep = p.sweep.Result()
	p.Freed = p.Sweep.Bytes
	if db.opts.Blobs == "" {
		rp, err := db.blobs.PlanRepack(ctx, db.repackOptions(opts), p.sweep.Keys)
		if err != nil {
			return nil, err
		}
		p.Repack, p.Freed = rp.Stats, rp.Freed
	}
	return p, nil
}

// refuseMissing returns the sweep's refusal, if it would refuse: a
// referenced blob is missing. Under the sweep lock, as in the sweep:
// checkedRefs reads the references and then the blob index, and without
// it a concurrent sweep could delete, between the two reads, a blob whose
// last checkpoint was deleted after the references were read — a missing
// blob that is not missing.
func (db *DB) refuseMissing(ctx context.Context) error {
	release, err := db.lockSweeps(ctx)
	if err != nil {
		return err
	}
	defer release()
	_, err = (checkedRefs{db: db}).BlobReferences(ctx)
	return err
}

// GC runs retention on every thread (or opts.Threads), then the sweep,
// then repacking, then removes blob files a crash left behind. Threads whose
// writer lease is held are skipped and listed in Retention.Busy. Nothing is
// deleted when a referenced blob is missing.
//
// GC is ExecuteGC of a plan made as it runs, with two differences from
// PlanGC then ExecuteGC. Its plan holds retention alone (ids, no
// checkpoint decoded), made once the usage is read and the refusal
// checked, and the sweep lists the blobs after retention has run (a single
// pass, as gc.Sweep): planning the sweep before retention would decode
// every checkpoint retention deletes for the references it drops, and
// would miss the blobs that checkpoints deleted meanwhile leave
// unreferenced, for the same one listing. And its retention deletes what
// retention deletes when it runs on the planned threads, not only the
// planned ids.
func (db *DB) GC(ctx context.Context, opts sbxdb.GCOptions) (*sbxdb.GCResult, error) {
	if db.c == nil {
		return nil, sbxdb.ErrReadOnly
	}
	keep, err := gcKeep(opts)
	if err != nil {
		return nil, err
	}
	p := &GCPlan{db: db, keep: keep, lazy: true, GCPlan: sbxdb.GCPlan{Options: opts, Retention: sbxdb.RetentionResult{Deleted: map[string][]string{}}}}
	return db.executeGC(ctx, p, false)
}

// ExecuteGC carries out p, a plan PlanGC made on db, possibly a while ago,
// and returns what it did. Every deletion is decided again under the lock
// that decides it in GC, so a stale plan is safe: retention takes each
// planned thread's writer lease and deletes, of the ids the plan names,
// those still outside the newest Keep of its head chain (a thread whose
// lease was taken since is skipped and listed in Retention.Busy, with the
// threads the plan found busy); the sweep deletes, of the keys the plan
// names, those still unreferenced, unheld, unpinned and not uploaded since
// the plan's window (gc.ExecuteSweep, sweepBlobs); repacking decides again
// from the index which packs to rewrite; orphan files are removed as in
// GC. Nothing the plan does not name is deleted by retention or the sweep.
// The refusal on a missing referenced blob is checked again first.
func (db *DB) ExecuteGC(ctx context.Context, p *GCPlan) (*sbxdb.GCResult, error) {
	switch {
	case p == nil || p.db != db:
		return nil, fmt.Errorf("engine: ExecuteGC: not a plan of this store")
	case db.c == nil:
		return nil, sbxdb.ErrReadOnly
	}
	return db.executeGC(ctx, p, true)
}

// executeGC carries out p; exact limits retention to the planned ids.
func (db *DB) executeGC(ctx context.Context, p *GCPlan, exact bool) (*sbxdb.GCResult, error) {
	opts := p.Options
	res := &sbxdb.GCResult{Retention: sbxdb.RetentionResult{Deleted: map[string][]string{}}}
	var err error
	if res.Before, err = db.blobs.Usage(ctx); err != nil {
		return nil, err
	}
	if err := db.refuseMissing(ctx); err != nil {
		return nil, err
	}
	if p.lazy {
		if _, err := db.planRetention(ctx, p.keep, opts.Threads, &p.Retention, false); err != nil {
			return res, err
		}
	}
	if p.keep > 0 {
		// Only threads with something to delete take a lease: most threads
		// of a large store have nothing, and each lease is a write.
		r := retainer{DB: db}
		if exact {
			r.only = map[string]map[string]struct{}{}
			for t, ids := range p.Retention.Deleted {
				r.only[t] = map[string]struct{}{}
				for _, id := range ids {
					r.only[t][id] = struct{}{}
				}
			}
		}
		threads := slices.Sorted(maps.Keys(p.Retention.Deleted))
		if len(threads) > 0 {
			if res.Retention, err = gc.KeepNewestAll(ctx, r, p.keep, threads...); err != nil {
				return res, err
			}
		}
		res.Retention.Busy = append(res.Retention.Busy, p.Retention.Busy...)
		slices.Sort(res.Retention.Busy)
	}
	if p.sweep == nil {
		res.Sweep, err = db.Sweep(ctx, sbxdb.SweepOptions{OlderThan: opts.OlderThan, Immediate: opts.Immediate})
	} else {
		res.Sweep, err = db.executeSweep(ctx, p)
	}
	if err != nil {
		return res, err
	}
	// Packs in object storage are repacked too: the old ones are retired
	// and their objects deleted by a later RemoveOrphans (cas/remote_repack.go).
	if res.Repack, err = db.Repack(ctx, db.repackOptions(opts)); err != nil {
		return res, err
	}
	if res.Orphans, err = db.blobs.RemoveOrphans(ctx, opts.OlderThan); err != nil {
		return res, err
	}
	res.After, err = db.blobs.Usage(ctx)
	return res, err
}

// executeSweep deletes the keys of p's sweep plan under the sweep lock,
// each re-checked in its delete transaction against the plan's window.
func (db *DB) executeSweep(ctx context.Context, p *GCPlan) (sbxdb.SweepResult, error) {
	release, err := db.lockSweeps(ctx)
	if err != nil {
		return sbxdb.SweepResult{}, err
	}
	defer release()
	in := db.sweepInput(p.Options.OlderThan, p.Options.Immediate, p.now, nil)
	return gc.ExecuteSweep(ctx, in, p.sweep)
}

// repackOptions returns the repack options of a GC with opts: cold packs
// are those whose files were written more than opts.OlderThan ago, by the
// wall clock that stamps files (as for RemoveOrphans).
func (db *DB) repackOptions(opts sbxdb.GCOptions) cas.RepackOptions {
	ro := cas.RepackOptions{Threshold: opts.RepackThreshold, Recompress: opts.Recompress}
	if ro.Threshold == 0 {
		ro.Threshold = cas.DefaultRepackThreshold
	}
	if opts.Recompress {
		ro.ColdBefore = time.Now().Add(-opts.OlderThan)
	}
	return ro
}

// planRetention fills res.Deleted with what retention would delete, and
// res.Busy with the threads a live writer holds (they
// are left alone). With refs, it also returns, per blob key, how many references
// that would drop (decoding those checkpoints; without, only ids are read).
func (db *DB) planRetention(ctx context.Context, keep int, threads []string, res *sbxdb.RetentionResult, refs bool) (map[string]int64, error) {
	if keep == 0 {
		return nil, nil
	}
	without := map[string]int64{}
	now := db.opts.nowMs()
	err := db.view(func(tx kv.Tx) error {
		all := threads
		if len(all) == 0 {
			var err error
			if all, err = meta.Threads(tx); err != nil {
				return err
			}
		}
		for _, t := range all {
			if err := chain.CheckID("threadId", t); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			kept, err := keptSet(tx, t, keep)
			if err != nil {
				return err
			}
			if st, err := meta.LoadLease(tx, t); err != nil {
				return err
			} else if st.Live(now) {
				// A writer holds the thread: the run would skip it.
				res.Busy = append(res.Busy, t)
				continue
			}
			err = meta.ForEachInThread(tx, t, func(id string) error {
				if _, ok := kept[id]; ok {
					return nil
				}
				res.Deleted[t] = append(res.Deleted[t], id)
				if !refs {
					return nil
				}
				cp, err := meta.GetCheckpoint(tx, id)
				if err != nil || cp == nil {
					return err
				}
				for _, k := range cp.BlobKeys() {
					without[k]++
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return without, err
}
