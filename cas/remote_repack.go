package cas

// Repacking in object storage. Packs in a bucket are read by every server
// sharing it, so a repack (repack.go's rule: the packs whose dead share
// reached the threshold, and with Recompress the cold ones written at a
// lower level) never removes a pack a reader may still be reading. Its
// steps, each safe to be killed after:
//
//  1. the live blobs of the old packs are read (each verified) and stored
//     anew in new local pack files, as Repack does on local disk;
//  2. the new packs are uploaded under new names (random ids, never used
//     before): until step 3 they are objects no entry names, which
//     RemoveOrphans takes once older than its window (remoteOrphans);
//  3. one index transaction points each moved entry at its new place, only
//     if it still names the old place (another server's sweep may have
//     deleted it, or its capture stored it again elsewhere: the copy is
//     then dead in the new pack), registers the new packs, forgets the old
//     ones and records each as retired at the store's clock (cas_retired);
//  4. a later RemoveOrphans deletes a retired pack's object once it was
//     retired more than its window ago, and at least RemoteOrphanMinAge,
//     then its record. A reader that located a blob in the old pack before
//     step 3 (on any server) reads it within that window.
//
// A retired pack is not an orphan: no entry names it, but the orphan
// window runs from its retirement, not from its upload. No entry can come
// to name it again: packs are written once, and only a batch writing it
// indexes entries into it. A pack whose blobs could not be read back
// intact is left as it is (RepackStats.Damaged); a blob that could not be
// fetched (a network error) fails the repack, changing nothing.

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/objstore"
)

// bucketRetired is cas_retired: the packs a remote repack replaced, by
// packKey, each with the Unix ms time it was retired at (a uvarint). Only
// a store with Remote has one.
var bucketRetired = []byte("cas_retired")

// Steps of repackRemote and removeRetired at which Store.repackHook is
// called (tests return an error there to stop as a kill would).
const (
	stepRepackWritten   = "written"   // new packs written locally, nothing uploaded
	stepRepackUploaded  = "uploaded"  // new packs uploaded, index unchanged
	stepRepackSwapped   = "swapped"   // index committed, old packs retired
	stepRetiredDeleting = "deleting"  // a retired pack's object about to be deleted
	stepRetiredDeleted  = "deleted"   // its object deleted, its record not yet
	stepRetiredForgot   = "forgotten" // its record removed
)

// hook runs Store.repackHook at step, if set. A repack stopped by the
// hook returns at once, cleaning nothing up, as a killed server would.
func (s *Store) hook(step string) error {
	if s.repackHook == nil {
		return nil
	}
	return s.repackHook(step)
}

// remotePackTimes returns the upload time of each pack object, by one
// listing of packs/.
func (s *Store) remotePackTimes(ctx context.Context) (map[uint64]time.Time, error) {
	out := map[uint64]time.Time{}
	err := s.opts.Remote.List(ctx, "packs/", func(i objstore.Info) error {
		if id, ok := parsePackObject(i.Name); ok {
			out[id] = i.Modified
		}
		return nil
	})
	return out, err
}

// remoteRepackPlan is repackPlan for remote packs: a pack is cold when its
// object was uploaded before opts.ColdBefore (mods, from the bucket); the
// mtime of a cached copy says only when it was last read.
func remoteRepackPlan(tx kv.Tx, opts RepackOptions, mods map[uint64]time.Time, st *sbxdb.RepackStats) (map[uint64]packStats, zstd.EncoderLevel, error) {
	old := map[uint64]packStats{}
	level := CaptureLevel
	cold := func(id uint64) bool {
		if opts.ColdBefore.IsZero() {
			return true
		}
		t, ok := mods[id]
		return ok && t.Before(opts.ColdBefore)
	}
	err := forEachPack(tx, func(id uint64, ps packStats, err error) error {
		if err != nil {
			return err
		}
		switch {
		case ps.dead > 0 && float64(ps.dead) >= opts.Threshold*float64(ps.total):
			level = max(level, ps.at())
		case opts.Recompress && ps.at() < RecompressLevel && ps.dead < ps.total && cold(id):
			level = RecompressLevel
			st.Recompressed++
			st.RecompressedBytes += int64(ps.total)
		default:
			return nil
		}
		old[id] = ps
		st.Packs++
		st.Before += int64(ps.total)
		return nil
	})
	if st.Recompressed > 0 {
		level = RecompressLevel
	}
	return old, level, err
}

// remoteRepackPlanStats is RepackPlan for a store with Remote. Large objects are
// not recompressed in object storage.
func (s *Store) remoteRepackPlanStats(ctx context.Context, opts RepackOptions) (sbxdb.RepackStats, error) {
	var st sbxdb.RepackStats
	var mods map[uint64]time.Time
	if opts.Recompress && !opts.ColdBefore.IsZero() {
		var err error
		if mods, err = s.remotePackTimes(ctx); err != nil {
			return st, err
		}
	}
	err := s.db.View(func(tx kv.Tx) error {
		st = sbxdb.RepackStats{}
		_, _, err := remoteRepackPlan(tx, opts, mods, &st)
		return err
	})
	return st, err
}

// repackRemote is Repack for a store with Remote (see the top of this
// file). repackMu is held.
func (s *Store) repackRemote(ctx context.Context, opts RepackOptions) (sbxdb.RepackStats, error) {
	var st sbxdb.RepackStats
	var mods map[uint64]time.Time
	if opts.Recompress && !opts.ColdBefore.IsZero() {
		var err error
		if mods, err = s.remotePackTimes(ctx); err != nil {
			return st, err
		}
	}
	type move struct {
		key    string
		from   entry
		to     entry
		copied bool
	}
	var old map[uint64]packStats
	var level zstd.EncoderLevel
	var moves []move
	err := s.db.View(func(tx kv.Tx) error {
		var plan sbxdb.RepackStats
		var err error
		moves = moves[:0]
		if old, level, err = remoteRepackPlan(tx, opts, mods, &plan); err != nil || len(old) == 0 {
			return err
		}
		return forEachEntry(ctx, tx, func(key string, e *entry, err error) error {
			if err != nil {
				return err
			}
			if _, ok := old[e.pack]; ok && e.packed() {
				moves = append(moves, move{key: key, from: *e})
			}
			return nil
		})
	})
	if err != nil || len(old) == 0 {
		return st, err
	}
	enc, err := s.encoder(level)
	if err != nil {
		return st, err
	}
	// Read each old pack front to back: one download each.
	slices.SortFunc(moves, func(a, b move) int {
		if a.from.pack != b.from.pack {
			return cmp.Compare(a.from.pack, b.from.pack)
		}
		return cmp.Compare(a.from.offset, b.from.offset)
	})

	// 1. Copy and verify the live blobs into new local packs.
	w := s.NewBatch()
	w.enc, w.level = enc, level
	defer w.removeFiles() // a no-op once the new packs are indexed
	damaged := map[uint64]bool{}
	out := getBuf(MaxPacked + decodeSlack)
	defer putBuf(out)
	blocks := newBlockCache()
	for i := range moves {
		m := &moves[i]
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
		if damaged[m.from.pack] {
			continue
		}
		ns, sum, _ := ParseKey(m.key)
		data, err := s.readPacked(m.key, ns, sum, &m.from, (*out)[:0], blocks)
		if errors.Is(err, sbxdb.ErrBlobCorrupt) {
			damaged[m.from.pack] = true
			st.Damaged = append(st.Damaged, fmt.Sprintf("pack %016x: %v", m.from.pack, err))
			continue
		} else if err != nil {
			return st, err // could not fetch: not damage
		}
		if _, err := w.store(ns, m.key, sum, data); err != nil {
			return st, err
		}
		m.copied = true
	}
	w.mu.Lock()
	err = w.flushBlocks()
	w.mu.Unlock()
	if err != nil {
		return st, err
	}
	for i := range moves {
		if m := &moves[i]; m.copied {
			m.to = w.added[m.key]
		}
	}
	for _, p := range w.packs {
		if err := p.finish(s); err != nil {
			return st, err
		}
	}
	if err := s.hook(stepRepackWritten); err != nil {
		w.packs = nil // killed: the files stay, for Open to remove
		return st, err
	}

	// 2. Upload them under their new names.
	for _, p := range w.packs {
		w.uploaded = append(w.uploaded, packObject(p.id))
		if err := s.putFile(ctx, packObject(p.id), p.path); err != nil {
			return st, err
		}
	}
	if err := s.hook(stepRepackUploaded); err != nil {
		w.packs, w.uploaded = nil, nil // killed: the uploads stay, orphans
		return st, err
	}

	// 3. One transaction moves the entries, swaps the packs and retires
	// the old ones.
	retiredAt := binary.AppendUvarint(nil, uint64(s.opts.Now().UnixMilli()))
	bodyDone := false
	err = s.db.Update(func(tx kv.Tx) error {
		bodyDone = false // the body may run twice (a shared transaction retried alone)
		idx, packs := tx.Bucket(bucketIndex), tx.Bucket(bucketPacks)
		retired, err := tx.CreateBucketIfNotExists(bucketRetired)
		if err != nil {
			return err
		}
		newStats := map[uint64]*packStats{}
		for _, p := range w.packs {
			newStats[p.id] = &packStats{total: uint64(p.size), level: level}
		}
		for i := range moves {
			m := &moves[i]
			if !m.copied {
				continue
			}
			if damaged[m.from.pack] { // the old pack stays; so does the entry
				newStats[m.to.pack].dead += m.to.footprint()
				continue
			}
			cur, ok, err := lookup(tx, m.key)
			if err != nil {
				return err
			}
			if !ok || cur.where != m.from.where || cur.pack != m.from.pack || cur.offset != m.from.offset || cur.at != m.from.at {
				newStats[m.to.pack].dead += m.to.footprint() // deleted or stored again meanwhile
				continue
			}
			to := m.to
			to.uploaded = cur.uploaded
			if err := idx.Put([]byte(m.key), to.encode(m.key)); err != nil {
				return err
			}
		}
		for id, ps := range newStats {
			if err := packs.Put(packKey(id), ps.encode()); err != nil {
				return err
			}
		}
		for id := range old {
			if damaged[id] {
				continue
			}
			if err := packs.Delete(packKey(id)); err != nil {
				return err
			}
			if err := retired.Put(packKey(id), retiredAt); err != nil {
				return err
			}
		}
		bodyDone = true
		return nil
	})
	if err != nil {
		if bodyDone {
			// The commit itself failed and may have landed: keep the
			// uploads. If it did not, no entry names them and
			// RemoveOrphans takes them after its window.
			w.packs, w.uploaded = nil, nil
		}
		return st, err
	}
	for _, p := range w.packs {
		st.After += p.size
		s.cache.add(p.id, nil, p.size, 0)
	}
	w.packs, w.uploaded = nil, nil // indexed: no longer ours to remove
	for id, ps := range old {
		if damaged[id] {
			continue
		}
		s.dropCachedPack(id) // its object stays until its window passes
		st.Packs++
		st.Before += int64(ps.total)
		if ps.dead == 0 || float64(ps.dead) < opts.Threshold*float64(ps.total) {
			st.Recompressed++
			st.RecompressedBytes += int64(ps.total)
		}
	}
	for _, m := range moves {
		if m.copied && !damaged[m.from.pack] {
			st.Blobs++
		}
	}
	return st, s.hook(stepRepackSwapped)
}

// retiredPacks reads cas_retired. A record that does not decode counts as
// retired now: its pack is deleted a window later than it could be.
func (s *Store) retiredPacks() (map[uint64]time.Time, error) {
	out := map[uint64]time.Time{}
	now := s.opts.Now()
	err := s.db.View(func(tx kv.Tx) error {
		clear(out)
		b := tx.Bucket(bucketRetired)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return nil
			}
			at := now
			if ms, n := binary.Uvarint(v); n > 0 && n == len(v) {
				at = time.UnixMilli(int64(ms))
			}
			out[binary.BigEndian.Uint64(k)] = at
			return nil
		})
	})
	return out, err
}

// removeRetired deletes the objects of the packs retired more than
// olderThan ago (at least RemoteOrphanMinAge) by the store's clock, each
// before its record, and returns how many it deleted. Killed between the
// two, the record stays and the next run finds the object gone, which is
// no error.
func (s *Store) removeRetired(ctx context.Context, olderThan time.Duration) (int, error) {
	retired, err := s.retiredPacks()
	if err != nil || len(retired) == 0 {
		return 0, err
	}
	olderThan = max(olderThan, RemoteOrphanMinAge)
	now := s.opts.Now()
	ids := make([]uint64, 0, len(retired))
	for id, at := range retired {
		if now.Sub(at) > olderThan {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	removed := 0
	for _, id := range ids {
		if err := s.hook(stepRetiredDeleting); err != nil {
			return removed, err
		}
		if err := s.opts.Remote.Delete(ctx, packObject(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("cas: removing retired pack %s: %w", packObject(id), err)
		}
		s.dropCachedPack(id)
		if err := s.hook(stepRetiredDeleted); err != nil {
			return removed, err
		}
		err := s.db.Update(func(tx kv.Tx) error {
			if b := tx.Bucket(bucketRetired); b != nil {
				return b.Delete(packKey(id))
			}
			return nil
		})
		if err != nil {
			return removed, err
		}
		removed++
		if err := s.hook(stepRetiredForgot); err != nil {
			return removed, err
		}
	}
	return removed, nil
}
