package meta

import (
	"bytes"
	"encoding/binary"
	"maps"
	"slices"
	"strconv"

	"github.com/sbxdb/sbxdb/internal/kv"
)

// Chunks: the shared parts of checkpoint records (record.go).
//
// A chunk is stored once, under an 8-byte id, and counted: the count of a
// chunk is the number of checkpoints that use it, kept the way blob
// references are (refs.go):
//
//	count(c) = chunk_refs[c] + the number of pending checkpoints using c
//
// An append stores the chunks it lacks and leaves its counts pending; the
// fold adds them to chunk_refs. Deleting checkpoints subtracts their counts
// and removes, in the same transaction, every chunk whose count reached 0.
// So a chunk is stored exactly when some checkpoint uses it, which Check
// verifies.

func chunkKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// chunkCursor looks chunks up with one bbolt cursor: bbolt's Get makes a
// cursor, and its search stack, for every call, which for the thousands
// of chunks of one manifest was the largest allocation of an append.
//
// On a backend with a cost per request (not bbolt), prefetch reads many
// chunks in one GetMany; get answers from what it read, kept up to date by
// the chunk cursor's own writes.
type chunkCursor struct {
	b       kv.Bucket
	c       kv.Cursor
	k       [8]byte
	bolt    bool
	fetched map[uint64][]byte // by prefetch: the value, nil for absent
}

func newChunkCursor(tx kv.Tx) *chunkCursor {
	b := bucket(tx, BucketChunks)
	return &chunkCursor{b: b, c: b.Cursor(), bolt: kv.BoltTx(tx) != nil}
}

// prefetch reads the chunks ids (not yet read) in one GetMany, unless the
// backend is bbolt, whose reads cost no request.
func (cc *chunkCursor) prefetch(ids []uint64) {
	if cc.bolt {
		return
	}
	var keys [][]byte
	var want []uint64
	for _, id := range ids {
		if _, ok := cc.fetched[id]; !ok {
			keys = append(keys, chunkKey(id))
			want = append(want, id)
		}
	}
	if len(keys) == 0 {
		return
	}
	if cc.fetched == nil {
		cc.fetched = make(map[uint64][]byte, len(keys))
	}
	for i, v := range cc.b.GetMany(keys) {
		cc.fetched[want[i]] = v
	}
}

// get returns the stored value of chunk id, nil when it is absent.
func (cc *chunkCursor) get(id uint64) []byte {
	binary.BigEndian.PutUint64(cc.k[:], id)
	if v, ok := cc.fetched[id]; ok {
		return v
	}
	k, v := cc.c.Seek(cc.k[:])
	if !bytes.Equal(k, cc.k[:]) {
		return nil
	}
	return v
}

// store stores c unless an identical chunk is stored, and returns its id
// (c.hash, or the first id after it not held by a different chunk) and
// whether it stored it.
// Comparing the stored value with c's sealed form compares the bytes and
// checks the stored seal at once. A damaged stored chunk differs, so a new
// copy goes under the next id and later records no longer name the damage.
func (cc *chunkCursor) store(c *preparedChunk) (id uint64, created bool, err error) {
	id, s := c.hash, c.sum
	for {
		v := cc.get(id)
		if v == nil {
			key := chunkKey(id) // bbolt keeps the key until the commit
			// The next get seeks from the root again, which is all a
			// cursor needs after a put.
			v := Seal(BucketChunks, key, c.data)
			if cc.fetched != nil {
				cc.fetched[id] = v
			}
			return id, true, cc.b.Put(key, v)
		}
		if len(v) == len(c.data)+sealSize && v[0] == recordVersion &&
			binary.LittleEndian.Uint64(v[len(v)-8:]) == s && bytes.Equal(v[1:len(v)-8], c.data) {
			return id, false, nil
		}
		id++
		binary.BigEndian.PutUint64(cc.k[:], id)
		s = sum(BucketChunks, cc.k[:], c.data)
	}
}

// read returns the payload of chunk id, which aliases the transaction's
// memory. A missing or damaged chunk is ErrCorrupt naming the checkpoint
// that needs it.
func (cc *chunkCursor) read(id uint64, owner string) ([]byte, error) {
	v := cc.get(id)
	if v == nil {
		return nil, corrupt(BucketCheckpoints, []byte(owner), "chunk "+chunkName(id)+" is missing")
	}
	p, err := Unseal(BucketChunks, cc.k[:], v)
	if err != nil {
		return nil, corrupt(BucketCheckpoints, []byte(owner), "chunk "+chunkName(id)+" is damaged")
	}
	return p, nil
}

// del deletes chunk id.
func (cc *chunkCursor) del(id uint64) error {
	if cc.fetched != nil {
		cc.fetched[id] = nil
	}
	return cc.b.Delete(chunkKey(id))
}

func chunkName(id uint64) string { return strconv.FormatUint(id, 16) }

// chunkFolded returns the folded count of chunk id (0 when absent).
func chunkFolded(tx kv.Tx, id uint64) (int64, error) {
	k := chunkKey(id)
	return decodeCountIn(BucketChunkRefs, k, bucket(tx, BucketChunkRefs).Get(k))
}

// addChunkRef adds delta to the folded count of chunk id, deleting the
// count when it reaches 0 (the chunk itself is the caller's business).
func addChunkRef(tx kv.Tx, id uint64, delta int64) error {
	old, err := chunkFolded(tx, id)
	if err != nil {
		return err
	}
	k := chunkKey(id)
	if n := old + delta; n > 0 {
		return put(tx, BucketChunkRefs, k, binary.AppendUvarint(nil, uint64(n)))
	}
	return bucket(tx, BucketChunkRefs).Delete(k)
}

// addChunkRefs adds each count to the folded count of its chunk, in id
// order (neighbouring ids share leaf pages).
func addChunkRefs(tx kv.Tx, counts map[uint64]int64) error {
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		if err := addChunkRef(tx, id, counts[id]); err != nil {
			return err
		}
	}
	return nil
}

// pendingChunkUses counts, for each chunk, the pending checkpoints using
// it. A damaged record is an error when strict, else skipped (Check
// reports it on its own).
func pendingChunkUses(tx kv.Tx, strict bool) (map[uint64]int64, error) {
	return chunkUses(tx, BucketPendingRefs, strict)
}

// chunkUses counts, for each chunk, the checkpoints named by the keys of
// bucket over (checkpoints, or refs_pending) that use it.
func chunkUses(tx kv.Tx, over []byte, strict bool) (map[uint64]int64, error) {
	uses := map[uint64]int64{}
	chunks := newChunkCursor(tx)
	err := bucket(tx, over).ForEach(func(k, v []byte) error {
		var r *storedRecord
		var err error
		if string(over) == string(BucketPendingRefs) {
			r, err = loadPending(tx, k, v)
		} else if r, err = loadRecord(tx, string(k)); err == nil && r == nil {
			err = corrupt(over, k, "names a missing checkpoint")
		}
		var ids []uint64
		if err == nil {
			ids, err = r.chunkIDs(chunks)
		}
		if err != nil {
			if strict {
				return err
			}
			return nil
		}
		for _, c := range ids {
			uses[c]++
		}
		return nil
	})
	return uses, err
}

// pendingUse reports which of chunks (sorted) a pending checkpoint uses.
// Pending checkpoints share most of their index chunks, so each distinct
// index chunk is read once: 44 pending checkpoints of 20,000 files name
// about 26,000 index chunks, 8,000 of them distinct.
func pendingUse(tx kv.Tx, chunks []uint64) (map[uint64]bool, error) {
	used := make(map[uint64]bool, len(chunks))
	for _, c := range chunks {
		used[c] = false
	}
	mark := func(id uint64) {
		if _, ok := used[id]; ok {
			used[id] = true
		}
	}
	cc := newChunkCursor(tx)
	indexes := map[uint64]bool{} // index chunks read
	err := bucket(tx, BucketPendingRefs).ForEach(func(k, v []byte) error {
		r, err := loadPending(tx, k, v)
		if err != nil {
			return err
		}
		for i := range r.messages.len() {
			mark(r.messages.at(i))
		}
		for g := range r.groups.len() / 2 {
			mark(r.groups.at(2 * g))
			index := r.groups.at(2*g + 1)
			mark(index)
			if indexes[index] {
				continue
			}
			indexes[index] = true
			content, err := r.contentIDs(cc, g)
			if err != nil {
				return err
			}
			for i := range content.len() {
				mark(content.at(i))
			}
		}
		return nil
	})
	return used, err
}
