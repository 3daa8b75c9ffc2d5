package cas

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Repacking. Deleting a packed blob only marks its bytes dead (cas_packs
// counts them); the pack file keeps them. Repack copies the live blobs of
// every pack whose dead share has reached a threshold into new packs and
// then drops the old ones, in an order that is safe at every step:
//
//  1. the live blobs are read, each verified (header, size, sha256), and
//     stored anew in new pack files (small ones gathered into blocks, as a
//     batch stores them), which are fsynced with their directory;
//  2. one index transaction points each moved entry at its new place, but
//     only if it still names the old place (a sweep may have deleted it
//     meanwhile: its copy is then dead in the new pack), registers the new
//     packs and forgets the old ones;
//  3. the old pack files are removed, under packsMu so that no reader that
//     located a blob before step 2 is still reading them.
//
// A crash before step 2 leaves new pack files no entry names; a crash
// between 2 and 3 leaves old ones. Either way the files are not in
// cas_packs, and Open removes them. If the commit of step 2 is lost after
// step 3 (the database reopened at an older meta page), the index names
// the removed packs and not the new one: Open finds an indexed pack gone
// and quarantines the new one instead (removeOrphanPacks, quarantine.go).

// DefaultRepackThreshold is the dead share at which a pack is rewritten, in
// the spirit of restic's prune, which tolerates 5% unused space.
const DefaultRepackThreshold = 0.05

// RepackOptions says which packs Repack rewrites.
type RepackOptions struct {
	// Threshold is the dead share at which a pack is rewritten without
	// its dead bytes (0 < Threshold <= 1).
	Threshold float64
	// Recompress also rewrites, at RecompressLevel, every pack whose
	// frames were compressed at a lower level (a pack that records none
	// was written at zstd.SpeedDefault), if its file was last modified
	// before ColdBefore (the zero time: whatever its age).
	Recompress bool
	ColdBefore time.Time
}

// Usage sums the index: packs, their dead bytes, blobs and large files. A
// damaged record is counted in Damaged, not an error: Check, which reports
// damage, needs the sums too.
func (s *Store) Usage(ctx context.Context) (sbxdb.BlobUsage, error) {
	var u sbxdb.BlobUsage
	err := s.db.View(func(tx kv.Tx) error {
		if err := forEachPack(tx, func(id uint64, st packStats, err error) error {
			if err != nil {
				u.Damaged++
				return nil
			}
			u.Packs++
			u.PackBytes += int64(st.total)
			u.DeadBytes += int64(st.dead)
			return nil
		}); err != nil {
			return err
		}
		return forEachEntry(ctx, tx, func(key string, e *entry, err error) error {
			if err != nil {
				u.Damaged++
				return nil
			}
			u.Blobs++
			u.RawBytes += int64(e.raw)
			if !e.packed() {
				u.LargeBytes += headerSize + int64(e.stored)
			}
			return nil
		})
	})
	return u, err
}

// repackPlan picks the packs Repack rewrites, and the level it writes them
// at: RecompressLevel if any is picked for its level, else the highest
// level any of them was written at, so a repack never compresses worse.
// dying (nil for a repack) adds, per pack, dead bytes a planned sweep would
// leave (PlanRepack).
func (s *Store) repackPlan(tx kv.Tx, opts RepackOptions, st *sbxdb.RepackStats, dying map[uint64]uint64) (map[uint64]packStats, zstd.EncoderLevel, error) {
	old := map[uint64]packStats{}
	level := CaptureLevel
	err := forEachPack(tx, func(id uint64, ps packStats, err error) error {
		if err != nil {
			return err
		}
		ps.dead = min(ps.total, ps.dead+dying[id])
		switch {
		case ps.dead > 0 && float64(ps.dead) >= opts.Threshold*float64(ps.total):
			level = max(level, ps.at())
		case opts.Recompress && ps.at() < RecompressLevel && ps.dead < ps.total && s.packColdBefore(id, opts.ColdBefore):
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

// packColdBefore reports whether pack id's file was last modified before
// t (the zero time: always). Packs are written once, by one batch.
func (s *Store) packColdBefore(id uint64, t time.Time) bool {
	if t.IsZero() {
		return true
	}
	fi, err := os.Stat(filepath.Join(s.dir, packPath(id)))
	return err == nil && fi.ModTime().Before(t)
}

// checkRepackOptions validates opts.
func checkRepackOptions(opts RepackOptions) error {
	if !(opts.Threshold > 0 && opts.Threshold <= 1) {
		return fmt.Errorf("cas: repack threshold %v is not in (0, 1]", opts.Threshold)
	}
	return nil
}

// largeItem is a large blob that Repack may recompress.
type largeItem struct {
	key string
	e   entry
}

// coldLarges lists the large blobs whose files were written before t
// (the zero time: any) at a level below RecompressLevel: their frame
// header records none (a batch's, at zstd.SpeedFastest) or a lower one.
// It also returns those recompressed already whose index entry does not
// have their frame's stored size (a crash before recompressLarge's step
// 4), with the size in e.stored.
func (s *Store) coldLarges(ctx context.Context, t time.Time) (cold, stale []largeItem, err error) {
	var all []largeItem
	err = s.db.View(func(tx kv.Tx) error {
		return forEachEntry(ctx, tx, func(key string, e *entry, err error) error {
			if err == nil && e.where == whereLarge && e.codec == codecZstd {
				all = append(all, largeItem{key, *e})
			}
			return err
		})
	})
	if err != nil {
		return nil, nil, err
	}
	for _, l := range all {
		ns, sum, _ := ParseKey(l.key)
		path := filepath.Join(s.dir, largePath(ns, sum))
		f, err := os.Open(path)
		if err != nil {
			continue // Check reports it
		}
		var hb [headerSize]byte
		_, err = io.ReadFull(f, hb[:])
		fi, serr := f.Stat()
		f.Close()
		if err != nil || serr != nil {
			continue
		}
		h, err := decodeHeader(hb[:])
		switch {
		case err != nil || h.raw != l.e.raw:
		case h.level >= byte(RecompressLevel):
			if h.stored != l.e.stored || h.codec != l.e.codec {
				l.e.stored, l.e.codec = h.stored, h.codec
				stale = append(stale, l)
			}
		case t.IsZero() || fi.ModTime().Before(t):
			cold = append(cold, l)
		}
	}
	return cold, stale, nil
}

// setLargeStored records the stored size and codec of l's large file in
// its index entry if that still names a large file of the same size.
func (s *Store) setLargeStored(l largeItem) error {
	return s.db.Update(func(tx kv.Tx) error {
		e, ok, err := lookup(tx, l.key)
		if err != nil || !ok || e.where != whereLarge || e.raw != l.e.raw {
			return err
		}
		e.codec, e.stored = l.e.codec, l.e.stored
		return tx.Bucket(bucketIndex).Put([]byte(l.key), e.encode(l.key))
	})
}

// recompressLarges rewrites each cold large file (coldLarges) at
// RecompressLevel, adding what it did to st. For each, in an order that is
// safe at every step:
//
//  1. the key is pinned, so no sweep deletes it meanwhile;
//  2. its bytes are read, verified as every read is, and written to a
//     temporary file as a new frame recording RecompressLevel, which is
//     fsynced; a file that does not shrink is left as it is;
//  3. the new file is renamed over the old (its directory fsynced): a
//     reader finds one whole frame or the other, and a large frame's own
//     header gives its codec and stored size (checkFrame);
//  4. one transaction records the new stored size in the index entry if
//     it still names the large file.
//
// A crash before 3 leaves a temporary file, which Open removes; between 3
// and 4, an entry whose stored size is the old frame's, which only Usage
// reads. A file that does not read back intact is left alone and reported
// in st.Damaged.
func (s *Store) recompressLarges(ctx context.Context, t time.Time, st *sbxdb.RepackStats) error {
	cold, stale, err := s.coldLarges(ctx, t)
	if err != nil {
		return err
	}
	for _, l := range stale {
		if err := s.setLargeStored(l); err != nil {
			return err
		}
	}
	if len(cold) == 0 {
		return nil
	}
	// Up to GOMAXPROCS files at a time, each through an encoder of its own.
	var (
		mu    sync.Mutex
		first error
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for range min(runtime.GOMAXPROCS(0), len(cold)) {
		wg.Go(func() {
			enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(RecompressLevel),
				zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(4<<20), zstd.WithEncoderCRC(false))
			if err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
				return
			}
			defer enc.Close()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cold) || ctx.Err() != nil {
					return
				}
				l := cold[i]
				s.pins.pin([]string{l.key})
				after, err := s.recompressLarge(ctx, enc, l)
				s.pins.unpin([]string{l.key})
				mu.Lock()
				switch {
				case errors.Is(err, sbxdb.ErrBlobCorrupt):
					st.Damaged = append(st.Damaged, fmt.Sprintf("large blob %s: %v", l.key, err))
				case err != nil:
					first = cmp.Or(first, err)
					next.Store(int64(len(cold))) // stop the others
				case after > 0:
					st.Packs++
					st.Blobs++
					st.Recompressed++
					st.RecompressedBytes += headerSize + int64(l.e.stored)
					st.Before += headerSize + int64(l.e.stored)
					st.After += after
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return cmp.Or(first, ctx.Err())
}

// recompressLarge rewrites one large file (recompressLarges) and returns
// its new size, or 0 if it was left as it was.
func (s *Store) recompressLarge(ctx context.Context, enc *zstd.Encoder, l largeItem) (int64, error) {
	ns, sum, _ := ParseKey(l.key)
	cur, err := s.entry(l.key)
	if errors.Is(err, sbxdb.ErrBlobNotFound) || err == nil && cur.where != whereLarge {
		return 0, nil // deleted or moved since it was listed
	} else if err != nil {
		return 0, err
	}
	r, err := s.openLarge(ctx, l.key, ns, sum, &cur)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	r.ctx = ctx
	tmp, err := s.fs.CreateTemp(filepath.Join(s.dir, "tmp"), "recompress-*")
	if err != nil {
		return 0, err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			s.fs.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(make([]byte, headerSize)); err != nil {
		return 0, err
	}
	counted := &countWriter{w: tmp}
	enc.Reset(counted)
	bw := bufio.NewWriterSize(enc, 256<<10)
	buf := copyBufs.Get().(*[]byte)
	raw, err := io.CopyBuffer(struct{ io.Writer }{bw}, struct{ io.Reader }{r}, *buf)
	copyBufs.Put(buf)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err // a read error is the blob's (*Error), verified by r
	}
	stored := uint64(counted.n)
	if uint64(raw) != cur.raw || stored >= cur.stored {
		return 0, nil // no smaller: the next run tries again
	}
	h := header{version: blobFrame, codec: codecZstd, ns: ns, raw: uint64(raw), stored: stored, sum: sum, level: byte(RecompressLevel)}
	hb := h.encode()
	if _, err := tmp.WriteAt(hb[:], 0); err != nil {
		return 0, err
	}
	if !s.opts.NoSync {
		if err := tmp.Sync(); err != nil {
			return 0, s.syncFailed(err)
		}
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	dst := filepath.Join(s.dir, largePath(ns, sum))
	if err := s.fs.Rename(tmp.Name(), dst); err != nil {
		return 0, err
	}
	done = true
	if !s.opts.NoSync {
		if err := s.fs.SyncDir(filepath.Dir(dst)); err != nil {
			return 0, s.syncFailed(err)
		}
	}
	l.e.codec, l.e.stored = codecZstd, stored
	return headerSize + int64(stored), s.setLargeStored(l)
}

// Repack rewrites every pack whose dead bytes are at least opts.Threshold
// of its size (packs with no dead bytes are never rewritten for them) and,
// with opts.Recompress, every cold pack written at a level below
// RecompressLevel. Readers and writers go on meanwhile; one Repack runs at
// a time.
func (s *Store) Repack(ctx context.Context, opts RepackOptions) (sbxdb.RepackStats, error) {
	var st sbxdb.RepackStats
	if s.opts.ReadOnly {
		return st, ErrReadOnly
	}
	if err := checkRepackOptions(opts); err != nil {
		return st, err
	}
	if err := s.gate.Refused(); err != nil {
		return st, err
	}
	s.repackMu.Lock()
	defer s.repackMu.Unlock()
	if s.opts.Remote != nil {
		return s.repackRemote(ctx, opts) // remote_repack.go
	}

	// Which packs, and which of their blobs are live.
	type move struct {
		key    string
		from   entry
		to     entry
		copied bool
	}
	var old map[uint64]packStats
	var level zstd.EncoderLevel
	var plan sbxdb.RepackStats
	var moves []move
	err := s.db.View(func(tx kv.Tx) error {
		var err error
		if old, level, err = s.repackPlan(tx, opts, &plan, nil); err != nil || len(old) == 0 {
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
	if err != nil {
		return st, err
	}
	if opts.Recompress {
		// Large files first: they do not depend on the packs' outcome.
		if err := s.recompressLarges(ctx, opts.ColdBefore, &st); err != nil {
			return st, err
		}
	}
	if len(old) == 0 {
		return st, nil
	}
	enc, err := s.encoder(level)
	if err != nil {
		return st, err
	}
	// Read each old pack front to back.
	slices.SortFunc(moves, func(a, b move) int {
		if a.from.pack != b.from.pack {
			return cmp.Compare(a.from.pack, b.from.pack)
		}
		return cmp.Compare(a.from.offset, b.from.offset)
	})

	// 1. Copy and verify the live blobs. They are stored anew, as a batch
	// stores them: small ones gathered into blocks, whatever frames they
	// had, so repacking a format-1 pack also gives its blobs blocks.
	w := s.NewBatch()
	w.enc, w.level = enc, level
	defer w.removeFiles() // a no-op once the new packs are registered
	damaged := map[uint64]bool{}
	out := getBuf(MaxPacked + decodeSlack)
	defer putBuf(out)
	cache := newBlockCache()
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
		data, err := s.readPacked(m.key, ns, sum, &m.from, (*out)[:0], cache)
		if err != nil {
			damaged[m.from.pack] = true
			st.Damaged = append(st.Damaged, fmt.Sprintf("pack %016x: %v", m.from.pack, err))
			continue
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
	if len(w.packs) > 0 && !s.opts.NoSync {
		if err := s.fs.SyncDir(filepath.Join(s.dir, "packs")); err != nil {
			return st, s.syncFailed(err)
		}
	}

	// 2. One transaction moves the entries and swaps the packs.
	bodyDone := false
	err = s.db.Update(func(tx kv.Tx) error {
		bodyDone = false // the body may run twice (a shared transaction retried alone)
		idx, packs := tx.Bucket(bucketIndex), tx.Bucket(bucketPacks)
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
				newStats[m.to.pack].dead += m.to.footprint() // deleted meanwhile
				continue
			}
			m.to.uploaded = cur.uploaded
			if err := idx.Put([]byte(m.key), m.to.encode(m.key)); err != nil {
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
		}
		bodyDone = true
		return nil
	})
	if err != nil {
		if bodyDone {
			// The commit itself failed, and may reach the file anyway (a
			// failed fsync): keep the new packs, which Open removes if no
			// index entry names them (as in Batch.CommitWith).
			w.packs = nil
		}
		return st, err
	}
	for _, p := range w.packs {
		st.After += p.size
	}
	w.packs = nil // registered: no longer ours to remove

	// 3. Drop the old files once no reader can be inside them.
	s.packsMu.Lock()
	s.packGen++
	s.mu.Lock()
	for id, ps := range old {
		if damaged[id] {
			continue
		}
		if f := s.packs[id]; f != nil {
			f.Close()
			delete(s.packs, id)
		}
		s.fs.Remove(filepath.Join(s.dir, packPath(id)))
		st.Packs++
		st.Before += int64(ps.total)
		if ps.dead == 0 || float64(ps.dead) < opts.Threshold*float64(ps.total) {
			st.Recompressed++
			st.RecompressedBytes += int64(ps.total)
		}
	}
	s.mu.Unlock()
	s.packsMu.Unlock()
	for _, m := range moves {
		if m.copied && !damaged[m.from.pack] {
			st.Blobs++
		}
	}
	return st, nil
}

// removeOrphanPacks removes pack files that cas_packs does not list and no
// index entry names: the leftovers of a batch or repack that crashed before
// its index commit, or of a repack that crashed before removing what it had
// replaced. A file that entries still name is not a leftover but a pack
// whose cas_packs record was damaged (its key carries no checksum): it is
// kept, for Check to report the entries naming an unregistered pack.
//
// When the index may be older than the files (Options.IndexMayBeOlder, or
// a pack that cas_packs lists or an entry names has no file: only a lost
// transaction or damage removes those), an unlisted pack may hold the only
// copy of blobs the index has lost track of; it is moved into quarantine
// instead (quarantine.go), and so are unindexed large files from then on.
// Only Open calls it, before any batch can be writing.
func (s *Store) removeOrphanPacks() error {
	ents, err := os.ReadDir(filepath.Join(s.dir, "packs"))
	if err != nil {
		return err
	}
	files := map[uint64]string{}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".pack")
		if !ok || len(name) != 16 {
			continue
		}
		if id, err := strconv.ParseUint(name, 16, 64); err == nil {
			files[id] = e.Name()
		}
	}
	unlisted := map[uint64]string{}
	err = s.db.View(func(tx kv.Tx) error {
		b := tx.Bucket(bucketPacks)
		for id, name := range files {
			if b.Get(packKey(id)) == nil {
				unlisted[id] = name
			}
		}
		forEachPack(tx, func(id uint64, _ packStats, err error) error {
			// A remote store's directory only caches packs: a missing
			// one says nothing of the index.
			if _, ok := files[id]; err == nil && !ok && s.opts.Remote == nil {
				s.indexMayBeOlder = true
			}
			return nil
		})
		if len(unlisted) == 0 {
			return nil
		}
		// Only after a crash (or damage): one pass over the index.
		return forEachEntry(context.Background(), tx, func(_ string, e *entry, err error) error {
			if err == nil && e.packed() {
				delete(unlisted, e.pack)
				if _, ok := files[e.pack]; !ok && s.opts.Remote == nil {
					s.indexMayBeOlder = true
				}
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Values(unlisted)) {
		if !s.indexMayBeOlder {
			s.fs.Remove(filepath.Join(s.dir, "packs", name))
			continue
		}
		rel, err := s.quarantine(filepath.Join("packs", name), name)
		if err != nil {
			return fmt.Errorf("cas: moving unindexed pack %s into quarantine: %w", name, err)
		}
		s.quarantinedAtOpen = append(s.quarantinedAtOpen, rel)
	}
	return nil
}

// forEachPack decodes every pack's stats. A damaged record is passed to fn
// as err (matching ErrCorrupt), for fn to return or to report.
func forEachPack(tx kv.Tx, fn func(id uint64, st packStats, err error) error) error {
	b := tx.Bucket(bucketPacks)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		st, err := decodePackStats(v)
		if err != nil || len(k) != 8 {
			return fn(0, st, fmt.Errorf("%w: pack stats %x do not decode", sbxdb.ErrBlobCorrupt, k))
		}
		return fn(binary.BigEndian.Uint64(k), st, nil)
	})
}

// forEachEntry decodes every index entry in key order. A damaged entry is
// passed to fn as err (matching ErrCorrupt), for fn to return or to report.
func forEachEntry(ctx context.Context, tx kv.Tx, fn func(key string, e *entry, err error) error) error {
	b := tx.Bucket(bucketIndex)
	if b == nil {
		return nil
	}
	n := 0
	return b.ForEach(func(k, v []byte) error {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		e, err := decodeEntry(string(k), v)
		if err != nil {
			return fn(string(k), nil, corrupt(string(k), "index entry does not decode"))
		}
		return fn(string(k), &e, nil)
	})
}
