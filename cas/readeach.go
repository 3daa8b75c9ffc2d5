package cas

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"sync"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// ReadEach reads the blobs that keys name, each once however often it is
// named, and calls fn with a reader of each one's bytes, from workers
// goroutines at once. It reads them in the order they lie on disk, large
// blobs first: every block is read and decoded once, whatever order the
// keys come in and however many files share a blob, and every pack is read
// front to back. This is how a restore reads a checkpoint.
//
// Every key is looked up before any is read, so a key the store does not
// hold fails ReadEach (an error matching ErrNotFound naming it) before fn
// is called. r is verified like Open's readers: a packed blob's bytes
// before fn is called, a large blob's as they stream (the Read that would
// return io.EOF returns the ErrCorrupt error instead). r is valid only
// until fn returns. The first error, from a read or from fn, or the end of
// ctx, stops the others (a large blob's reader between two chunks) and is
// returned.
func (s *Store) ReadEach(ctx context.Context, keys []string, workers int, fn func(key string, r *Reader) error) error {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	items, gen, err := s.lookupAll(keys, workers)
	if err != nil {
		return err
	}
	packed := func(e *entry) int { // large blobs first: they take longest
		if e.packed() {
			return 1
		}
		return 0
	}
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(packed(&a.e), packed(&b.e)),
			cmp.Compare(a.e.pack, b.e.pack), cmp.Compare(a.e.offset, b.e.offset), cmp.Compare(a.e.at, b.e.at))
	})
	// A unit of work is one large blob, one blob frame, or the members of
	// one block.
	var units [][]item
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && items[i].e.where == whereBlock && items[j].e.where == whereBlock &&
			items[j].e.pack == items[i].e.pack && items[j].e.offset == items[i].e.offset {
			j++
		}
		units = append(units, items[i:j])
		i = j
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		next     int
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	take := func() []item {
		mu.Lock()
		defer mu.Unlock()
		if next == len(units) || firstErr != nil {
			return nil
		}
		next++
		return units[next-1]
	}
	// read reads one unit. packsMu is held for reading only while bytes are
	// read from a pack, not while fn runs nor across the whole call: a
	// Repack waiting for the lock would otherwise hold up every other
	// reader of the store until a restore ends. A Repack that removed
	// packs since the lookup moved the blobs in them, so then each blob of
	// the unit is located and read again. buf is the worker's buffer,
	// returned grown.
	read := func(unit []item, buf []byte) ([]byte, error) {
		if !unit[0].e.packed() { // a file or object of its own: no pack, no lock
			return buf, s.readLarge(ctx, &unit[0], fn)
		}
		s.packsMu.RLock()
		if s.packGen != gen {
			s.packsMu.RUnlock()
			for i := range unit {
				if err := s.relocate(ctx, &unit[i], fn); err != nil {
					return buf, err
				}
			}
			return buf, nil
		}
		it := &unit[0]
		if it.e.where == wherePack {
			buf = slices.Grow(buf[:0], int(it.e.raw)+decodeSlack)
			data, err := s.readPacked(it.key, it.ns, it.sum, &it.e, buf, nil)
			s.packsMu.RUnlock()
			if err != nil {
				return buf, err
			}
			return data, fn(it.key, bytesReader(it.key, data))
		}
		buf = slices.Grow(buf[:0], int(it.e.blockRaw)+decodeSlack)
		blk, err := s.decodeBlock(it.key, it.ns, it.sum, &it.e, buf)
		s.packsMu.RUnlock()
		if err != nil {
			return buf, err
		}
		for i := range unit {
			if err := ctx.Err(); err != nil { // another worker failed, or the caller gave up
				return blk.payload, err
			}
			m := &unit[i]
			data, err := blk.member(m.key, m.sum, &m.e)
			if err == nil {
				err = fn(m.key, bytesReader(m.key, data))
			}
			if err != nil {
				return blk.payload, err
			}
		}
		return blk.payload, nil
	}
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			var buf []byte // a decoded block or a blob frame's bytes, reused
			for unit := take(); unit != nil; unit = take() {
				err := ctx.Err()
				if err == nil {
					buf, err = read(unit, buf)
				}
				if err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// lookupAll looks up the index entries of keys (sorted, distinct), in
// order, with up to workers read transactions at once: a restore looks up
// every blob of its checkpoint before it reads any, 20,000 keys in tens of
// milliseconds on one core. gen is the pack generation of the lookups. A key
// the store does not hold is an ErrNotFound error naming it; of several
// failing keys, the first in order is reported, whatever the workers.
func (s *Store) lookupAll(keys []string, workers int) (items []item, gen uint64, err error) {
	const perWorker = 4096 // fewer keys than this are not worth a goroutine
	n := max(1, min(workers, len(keys)/perWorker))
	items = make([]item, len(keys))
	// The keys are looked up in byte order, each worker walking one
	// cursor over its range (walkKeys): on a backend that reads ahead, a
	// restore's keys, most of the index, cost a query per read-ahead batch
	// rather than one per key.
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	errAt := make([]int, n) // the first failing key's position in keys, per worker
	errs := make([]error, n)
	s.packsMu.RLock()
	defer s.packsMu.RUnlock()
	var wg sync.WaitGroup
	for w := range n {
		lo, hi := w*len(keys)/n, (w+1)*len(keys)/n
		errAt[w] = len(keys)
		wg.Go(func() {
			fail := func(i int, err error) {
				if i < errAt[w] {
					errAt[w], errs[w] = i, err
				}
			}
			err := s.db.View(func(tx kv.Tx) error {
				b := tx.Bucket(bucketIndex)
				if b == nil {
					for _, i := range order[lo:hi] {
						fail(i, &sbxdb.BlobError{Key: keys[i], Err: sbxdb.ErrBlobNotFound})
					}
					return nil
				}
				return walkKeys(b, len(order[lo:hi]), func(j int) string { return keys[order[lo+j]] }, func(j int, v []byte) error {
					i := order[lo+j]
					key := keys[i]
					ns, sum, err := ParseKey(key)
					switch {
					case err != nil:
						fail(i, err)
					case v == nil:
						fail(i, &sbxdb.BlobError{Key: key, Err: sbxdb.ErrBlobNotFound})
					default:
						e, err := decodeEntry(key, v)
						if err != nil {
							fail(i, corrupt(key, "index entry: "+err.Error()))
							return nil
						}
						items[i] = item{key, ns, sum, e}
					}
					return nil
				})
			})
			if err != nil {
				fail(-1, err) // the transaction's own failure comes first
			}
		})
	}
	wg.Wait()
	first, ferr := len(keys), error(nil)
	for w, err := range errs {
		if err != nil && errAt[w] < first {
			first, ferr = errAt[w], err
		}
	}
	if ferr != nil {
		return nil, 0, ferr
	}
	return items, s.packGen, nil
}

// item is a blob ReadEach reads: its key and index entry.
type item struct {
	key string
	ns  Namespace
	sum [32]byte
	e   entry
}

// readLarge streams the large blob it names to fn. The reader stops
// between chunks once ctx ends: one large file must not hold a cancelled
// ReadEach up until its last byte.
func (s *Store) readLarge(ctx context.Context, it *item, fn func(string, *Reader) error) error {
	r, err := s.openLarge(ctx, it.key, it.ns, it.sum, &it.e)
	if err != nil {
		return err
	}
	defer r.Close()
	r.ctx = ctx
	return fn(it.key, r)
}

// relocate finds the blob it names again, as Get does, and passes it to
// fn.
func (s *Store) relocate(ctx context.Context, it *item, fn func(string, *Reader) error) error {
	s.packsMu.RLock()
	e, err := s.entry(it.key)
	var data []byte
	if err == nil && e.packed() {
		data, err = s.readPacked(it.key, it.ns, it.sum, &e, nil, nil)
	}
	s.packsMu.RUnlock()
	switch {
	case err != nil:
		return err
	case !e.packed():
		it.e = e
		return s.readLarge(ctx, it, fn)
	}
	return fn(it.key, bytesReader(it.key, data))
}

// bytesReader returns a Reader of verified bytes.
func bytesReader(key string, data []byte) *Reader {
	return &Reader{key: key, size: int64(len(data)), r: bytes.NewReader(data)}
}

// member returns the bytes of the member e names, checked against the
// block's table and against sum.
func (blk *decodedBlock) member(key string, sum [32]byte, e *entry) ([]byte, error) {
	if uint64(len(blk.payload)) != e.blockRaw {
		return nil, corrupt(key, "the block's length does not match the index")
	}
	// The row at the entry's offset; empty members share theirs with the
	// next member.
	i, _ := slices.BinarySearchFunc(blk.members, e.at, func(m member, at uint64) int { return cmp.Compare(m.at, at) })
	for i < len(blk.members) && blk.members[i].at == e.at && blk.members[i].sum != sum {
		i++
	}
	if i == len(blk.members) || blk.members[i].at != e.at || blk.members[i].size != e.raw || blk.members[i].sum != sum {
		return nil, corrupt(key, "the block's member table does not match the index")
	}
	data := blk.payload[e.at : e.at+e.raw]
	if sha256.Sum256(data) != sum {
		return nil, corrupt(key, "sha256 of the bytes does not match the key")
	}
	return data, nil
}
