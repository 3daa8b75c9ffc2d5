package cas

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Pins keep a sweep away from keys a writer is about to rely on.
//
// A capture that finds a blob already stored does not write it again; it
// will name the key in a checkpoint a little later. If a sweep deleted the
// key in between (it was unreferenced, say its last checkpoint had just been
// pruned), the checkpoint would name a blob that is gone. So a Batch pins
// every key it adds or finds, and keeps the pins until Close, which the
// caller calls once its checkpoint has committed or failed. DeleteUnused
// skips pinned keys.
//
// The invariant that makes this race-free, with the index read in separate
// transactions:
//
//	A key is marked dying, under mu, by the sweep that deletes it, before
//	its transaction commits, and unmarked only after that transaction has
//	committed or rolled back and the blob's file (a large blob) is
//	removed. Marking happens only if the key is not pinned. Pinning a
//	dying key waits, under the same mu, until it is unmarked.
//
// Marks are counted, not set: two deleters can hold one key at once (a
// sweep that has unindexed a large blob and not yet removed its file, and
// RemoveOrphans, which finds that file unindexed meanwhile). The key stays
// dying until the last of them unmarks it; with a set, the first to finish
// would clear the other's mark, and a batch could store the key again and
// have its new file removed by the other's late removal.
//
// So when a batch has pinned key k, either no sweep had decided to delete
// k (and none will while the pin lasts), or the one that did had finished,
// file and all, and every index read the batch makes afterwards sees k
// gone: the batch writes the bytes again, and no late removal of the old
// file can take its new copy.
type pinSet struct {
	mu    sync.Mutex
	cond  sync.Cond // signalled when keys stop dying; L is &mu (Open sets it)
	count map[string]int32
	dying map[string]int32 // deleters holding each key
}

// pin pins keys, waiting for any that is dying to be deleted first.
func (p *pinSet) pin(keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count == nil {
		p.count = map[string]int32{}
	}
	for _, k := range keys {
		for {
			if _, d := p.dying[k]; !d {
				break
			}
			p.cond.Wait()
		}
		p.count[k]++
	}
}

func (p *pinSet) unpin(keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	release(p.count, keys)
}

// release takes one hold of each of keys off holds, forgetting a key at
// zero so that the map holds only keys still held.
func release(holds map[string]int32, keys []string) {
	for _, k := range keys {
		if n := holds[k] - 1; n > 0 {
			holds[k] = n
		} else {
			delete(holds, k)
		}
	}
}

// markDying marks key dying unless it is pinned, and reports whether it did.
// Each successful mark must be undone by one unmarkDying.
func (p *pinSet) markDying(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count[key] > 0 {
		return false
	}
	if p.dying == nil {
		p.dying = map[string]int32{}
	}
	p.dying[key]++
	return true
}

func (p *pinSet) unmarkDying(keys []string) {
	if len(keys) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	release(p.dying, keys)
	p.cond.Broadcast()
}

// Pinned reports whether a batch holds a pin on key.
func (s *Store) Pinned(key string) bool {
	s.pins.mu.Lock()
	defer s.pins.mu.Unlock()
	return s.pins.count[key] > 0
}

// ErrPinned reports a Delete of a key that a batch in progress relies on.
var ErrPinned = errors.New("blob is pinned by a write in progress")

// InUse tells DeleteUnused, inside its transaction, whether something other
// than a pin still needs a key (the engine: a checkpoint references it). It
// is called once per transaction and returns the per-key test, which is
// given the upload time of the key's index entry as that transaction reads
// it, so that it need not look the entry up again.
type InUse func(tx kv.Tx) (func(key string, uploaded time.Time) (bool, error), error)

// DeleteUnused deletes those of keys that are stored, not pinned, and not in
// use by inUse's account (nil: nothing is), all in one index transaction that
// re-checks each key at the moment of deletion. Keys that are not valid
// blob keys are skipped. It returns the keys it deleted, sorted. A packed
// blob's bytes become dead space in its pack (Repack reclaims it); a large
// blob's file is removed after the transaction commits, outside it. A batch
// that pins one of the keys meanwhile waits until it is all gone.
func (s *Store) DeleteUnused(ctx context.Context, keys []string, inUse InUse) ([]string, error) {
	if s.opts.ReadOnly {
		return nil, ErrReadOnly
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	type largeFile struct {
		key string
		e   entry
	}
	var deleted []string // each marked dying
	var files []largeFile
	err := s.db.Update(func(tx kv.Tx) error {
		// The function may run twice (a shared transaction that failed is
		// retried alone); start clean each time.
		s.pins.unmarkDying(deleted)
		deleted, files = deleted[:0], files[:0]
		used := func(string, time.Time) (bool, error) { return false, nil }
		if inUse != nil {
			var err error
			if used, err = inUse(tx); err != nil {
				return err
			}
		}
		dead := map[uint64]uint64{} // pack → bytes that became dead
		// keys are sorted: one cursor walks the index forward.
		c := tx.Bucket(bucketIndex).Cursor()
		for _, key := range keys {
			if _, _, err := ParseKey(key); err != nil {
				continue
			}
			k, v := c.Seek([]byte(key))
			if k == nil || string(k) != key {
				continue
			}
			e, err := decodeEntry(key, v)
			if err != nil {
				return corrupt(key, "index entry: "+err.Error())
			}
			if u, err := used(key, time.UnixMilli(e.uploaded)); u || err != nil {
				if err != nil {
					return err
				}
				continue
			}
			if !s.pins.markDying(key) {
				continue
			}
			deleted = append(deleted, key)
			if err := c.Delete(); err != nil {
				return err
			}
			if !e.packed() {
				files = append(files, largeFile{key, e})
			} else {
				dead[e.pack] += e.footprint()
			}
		}
		for pack, n := range dead {
			if err := addDead(tx, pack, n); err != nil {
				return err
			}
		}
		if len(deleted) == 0 {
			return nil
		}
		return noteDeletions(tx)
	})
	// The marks outlive the files: a batch that stores one of these keys
	// again must not have its new file removed here (pins.go).
	defer s.pins.unmarkDying(deleted)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		ns, sum, _ := ParseKey(f.key)
		if err := s.removeLarge(ctx, ns, sum, &f.e); err != nil {
			return deleted, &sbxdb.BlobError{Key: f.key, Err: err, Detail: "index entry removed, file left behind"}
		}
	}
	return deleted, nil
}
