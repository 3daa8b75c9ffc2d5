package cas

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Check looks for damage in the blob store and calls report once per
// problem found, with the key concerned ("" for a pack) and an error
// matching ErrCorrupt: index entries or pack stats that do not decode,
// entries naming an unregistered pack, a pack or large file that is missing
// or shorter than its entries say (each entry in it reported by its key).
// With deep, it also reads back every blob not reported already
// and checks its bytes against its key and size, in parallel; progress, if
// set, is called with blobs read so far and the total. Check returns an
// error only when it could not run.
func (s *Store) Check(ctx context.Context, deep bool, progress func(done, total int), report func(key string, err error)) error {
	return s.CheckPaced(ctx, deep, progress, nil, report)
}

// CheckPaced is Check calling pace, when set, after each blob the deep
// read read back, with its bytes; pace may sleep to bound the rate of the
// reads. It runs on the reading goroutines, several at once.
func (s *Store) CheckPaced(ctx context.Context, deep bool, progress func(done, total int), pace func(bytes int64), report func(key string, err error)) error {
	type item struct {
		key string
		e   entry
	}
	var items []item
	packs := map[uint64]packStats{}
	// A repack must not swap packs between the index read and the stats
	// below (it would look like a missing pack); it waits for this lock.
	s.packsMu.RLock()
	err := s.db.View(func(tx kv.Tx) error {
		forEachPack(tx, func(id uint64, st packStats, err error) error {
			if err != nil {
				report("", err)
			} else {
				packs[id] = st
			}
			return nil
		})
		return forEachEntry(ctx, tx, func(key string, e *entry, err error) error {
			if err != nil {
				report(key, err)
			} else {
				items = append(items, item{key, *e})
			}
			return nil
		})
	})
	if err != nil {
		s.packsMu.RUnlock()
		return err
	}
	// With Remote, the bucket is the truth: one listing, taken after the
	// index was read, so that every object an entry read names was
	// uploaded before it. Only a delete committed meanwhile can make a
	// large blob's object look missing (a registered pack's object is
	// never deleted: Repack is refused), so such a finding is checked
	// against the index again before it is reported.
	var remote *remoteListing
	if s.opts.Remote != nil {
		if remote, err = s.listRemote(ctx); err != nil {
			s.packsMu.RUnlock()
			return err
		}
	}
	packSize := map[uint64]int64{}
	packGone := map[uint64]bool{}
	for id, st := range packs {
		var size int64
		if remote != nil {
			info, ok := remote.packs[id]
			if !ok {
				packGone[id] = true
				report("", fmt.Errorf("%w: pack %016x: its object is missing", sbxdb.ErrBlobCorrupt, id))
				continue
			}
			size = info.Size
		} else {
			fi, err := os.Stat(filepath.Join(s.dir, packPath(id)))
			packGone[id] = os.IsNotExist(err)
			if err != nil {
				report("", fmt.Errorf("%w: pack %016x: %v", sbxdb.ErrBlobCorrupt, id, err))
				continue
			}
			size = fi.Size()
		}
		if size < int64(st.total) {
			report("", fmt.Errorf("%w: pack %016x holds %d bytes, the index says %d", sbxdb.ErrBlobCorrupt, id, size, st.total))
		}
		packSize[id] = size
	}
	reported := map[string]bool{} // no deep read repeats these
	bad := func(key, detail string) {
		reported[key] = true
		report(key, corrupt(key, detail))
	}
	for _, it := range items {
		ns, sum, err := ParseKey(it.key)
		if err != nil {
			bad(it.key, "the index holds an invalid key")
			continue
		}
		end := int64(it.e.offset + headerSize + it.e.stored)
		switch it.e.where {
		case wherePack, whereBlock:
			if _, ok := packs[it.e.pack]; !ok {
				bad(it.key, fmt.Sprintf("names pack %016x, which is not registered", it.e.pack))
			} else if packGone[it.e.pack] {
				bad(it.key, fmt.Sprintf("pack %016x is missing", it.e.pack))
			} else if size, ok := packSize[it.e.pack]; ok && size < end {
				bad(it.key, fmt.Sprintf("pack %016x is truncated", it.e.pack))
			}
		case whereLarge:
			fi, err := os.Stat(filepath.Join(s.dir, largePath(ns, sum)))
			if err != nil {
				bad(it.key, "its file is missing")
			} else if fi.Size() < end && fi.Size()-headerSize < largeStored(filepath.Join(s.dir, largePath(ns, sum))) {
				// A recompressed file may be shorter than the index
				// says until the index learns its size: its header says.
				bad(it.key, "its file is truncated")
			}
		case whereObject:
			if remote == nil {
				reported[it.key] = true
				report(it.key, errInObjectStorage(it.key))
				break
			}
			info, ok := remote.objects[largeObject(ns, sum, it.e.object)]
			switch {
			case !ok && s.stillIndexed(it.key, &it.e):
				bad(it.key, "its object is missing")
			case ok && info.Size != headerSize+int64(it.e.stored):
				bad(it.key, fmt.Sprintf("its object holds %d bytes, the index says %d", info.Size, headerSize+it.e.stored))
			}
		}
	}
	s.packsMu.RUnlock() // before deep reads, which take it per blob
	if !deep {
		return nil
	}
	// Read everything back, several blobs at a time, in the order they lie
	// in the packs (large blobs, with no pack, first), so each block is
	// decoded about once.
	items = slices.DeleteFunc(items, func(it item) bool { return reported[it.key] })
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.e.pack, b.e.pack), cmp.Compare(a.e.offset, b.e.offset), cmp.Compare(a.e.at, b.e.at))
	})
	cache := newBlockCache()
	var next, done atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			b := make([]byte, 256<<10)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(items) || ctx.Err() != nil {
					return
				}
				key := items[i].key
				r, err := s.openCached(ctx, key, cache)
				if err == nil {
					var n int64
					n, err = io.CopyBuffer(io.Discard, r, b)
					r.Close()
					if pace != nil {
						pace(n)
					}
				}
				if err != nil && ctx.Err() == nil {
					mu.Lock()
					report(key, err)
					mu.Unlock()
				}
				if n := done.Add(1); progress != nil && n%256 == 0 {
					mu.Lock()
					progress(int(n), len(items))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if progress != nil {
		progress(int(done.Load()), len(items))
	}
	return ctx.Err()
}

// largeStored returns the stored size a large file's frame header gives,
// or the largest int64 if the header does not decode.
func largeStored(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return math.MaxInt64
	}
	defer f.Close()
	var hb [headerSize]byte
	if _, err := io.ReadFull(f, hb[:]); err != nil {
		return math.MaxInt64
	}
	h, err := decodeHeader(hb[:])
	if err != nil || h.stored > math.MaxInt64-headerSize {
		return math.MaxInt64
	}
	return int64(h.stored)
}
