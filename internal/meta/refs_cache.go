package meta

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"slices"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// PendingCache remembers what the pending checkpoints reference, across
// transactions, for a caller that runs many in a row (the sweep deletes in
// groups, one transaction each, and must count references in each).
// Without it, every transaction would decode every pending checkpoint
// again; folding them instead would make the first group pay for all the
// folding appends would otherwise do. A checkpoint is known by its
// pending-set key and the checksum of its stored record, so an id deleted
// and reused is read again. Not safe for concurrent use.
//
// Pending checkpoints share almost all their content chunks, so the blob
// keys are read per chunk, once, not per checkpoint: 64 pending checkpoints
// of 20,000 files each read about 17,000 chunks, not 320,000, and count
// 100,000 digests, not 1.3 million (a fold took a second before).
type PendingCache struct {
	pending map[string]pendingRecord // by pending-set key
	digests map[chunkRef][][32]byte  // distinct file digests of a content chunk
	counts  map[string]int64         // the pending counts, for the set in pending
}

// chunkRef names a chunk as stored: its id and its seal checksum (an id may
// be deleted and, rarely, reused for other bytes).
type chunkRef struct{ id, sum uint64 }

type pendingRecord struct {
	sum       uint64     // the record's seal checksum
	content   []chunkRef // distinct content chunks, sorted
	inline    [][32]byte // or the distinct digests of an inline manifest
	artifacts []string   // distinct artifact keys
	chunks    []uint64   // distinct chunk ids of every list (chunk counts)
}

// Counter returns a RefCounter for tx that takes the pending counts from
// the cache, reading only checkpoints and chunks it has not seen.
func (pc *PendingCache) Counter(tx kv.Tx) (*RefCounter, error) {
	if err := pc.load(tx); err != nil {
		return nil, err
	}
	return &RefCounter{tx: tx, pending: pc.counts}, nil
}

// load brings the cache up to date with tx's pending set.
func (pc *PendingCache) load(tx kv.Tx) error {
	if pc.pending == nil {
		pc.pending, pc.digests = map[string]pendingRecord{}, map[chunkRef][][32]byte{}
	}
	changed := false
	seen := 0
	chunks := newChunkCursor(tx)
	looked := map[uint64]chunkRef{} // chunks looked up in tx: ids are stable within it
	err := bucket(tx, BucketPendingRefs).ForEach(func(k, v []byte) error {
		if _, err := Unseal(BucketPendingRefs, k, v); err != nil {
			return err
		}
		seen++
		id, err := pendingID(k)
		if err != nil {
			return err
		}
		rec := bucket(tx, BucketCheckpoints).Get([]byte(id))
		if len(rec) < sealSize {
			return corrupt(BucketPendingRefs, k, "names a missing checkpoint")
		}
		s := binary.LittleEndian.Uint64(rec[len(rec)-8:])
		if c, ok := pc.pending[string(k)]; ok && c.sum == s {
			return nil
		}
		r, err := loadPending(tx, k, v)
		if err != nil {
			return err
		}
		p, err := pc.read(chunks, looked, r)
		if err != nil {
			return err
		}
		p.sum = s
		pc.pending[string(k)] = p
		changed = true
		return nil
	})
	if err != nil {
		// Some records may be in pending and the counts not recomputed:
		// make the next load recount whatever it finds.
		pc.counts = nil
		return err
	}
	if seen != len(pc.pending) { // some are pending no more
		for k := range pc.pending {
			if bucket(tx, BucketPendingRefs).Get([]byte(k)) == nil {
				delete(pc.pending, k)
			}
		}
		changed = true
	}
	if changed || pc.counts == nil {
		pc.recount()
	}
	return nil
}

// read returns what record r references, reading the digests of each
// content chunk the cache does not hold.
func (pc *PendingCache) read(chunks *chunkCursor, looked map[uint64]chunkRef, r *storedRecord) (pendingRecord, error) {
	var err error
	p := pendingRecord{}
	if p.chunks, err = r.chunkIDs(chunks); err != nil {
		return p, err
	}
	if r.inline {
		ds, err := contentDigests(r.content)
		if err != nil {
			return p, corrupt(BucketCheckpoints, []byte(r.id), "inline content: "+err.Error())
		}
		p.inline = ds
	}
	lists, err := r.contentLists(chunks)
	if err != nil {
		return p, err
	}
	var content []uint64
	for _, ids := range lists {
		for i := range ids.len() {
			content = append(content, ids.at(i))
		}
	}
	for _, id := range content {
		if ref, ok := looked[id]; ok { // looked up in this transaction already
			p.content = append(p.content, ref)
			continue
		}
		v := chunks.get(id)
		if len(v) < sealSize {
			_, err := chunks.read(id, r.id) // names the missing chunk
			return p, err
		}
		ref := chunkRef{id, binary.LittleEndian.Uint64(v[len(v)-8:])}
		p.content = append(p.content, ref)
		looked[id] = ref
		if _, ok := pc.digests[ref]; ok {
			continue
		}
		data, err := Unseal(BucketChunks, chunkKey(id), v) // v is the chunk: no second lookup
		if err != nil {
			return p, corrupt(BucketCheckpoints, []byte(r.id), "chunk "+chunkName(id)+" is damaged")
		}
		ds, err := contentDigests(data)
		if err != nil {
			return p, corrupt(BucketCheckpoints, []byte(r.id), "content chunk: "+err.Error())
		}
		pc.digests[ref] = ds
	}
	slices.SortFunc(p.content, compareChunkRefs)
	p.content = slices.Compact(p.content)
	for _, a := range r.artifacts {
		p.artifacts = append(p.artifacts, a.BlobKey)
	}
	slices.Sort(p.artifacts)
	p.artifacts = slices.Compact(p.artifacts)
	return p, nil
}

// contentDigests returns the distinct file digests of content bytes (a
// content chunk, or an inline manifest's content), sorted.
func contentDigests(data []byte) ([][32]byte, error) {
	var ds [][32]byte
	d := Decoder{b: data}
	for len(d.b) > 0 {
		var sum [32]byte
		copy(sum[:], d.Fixed(32))
		d.Uvarint()
		ds = append(ds, sum)
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(ds, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(ds), nil
}

func compareChunkRefs(a, b chunkRef) int {
	if c := cmp.Compare(a.id, b.id); c != 0 {
		return c
	}
	return cmp.Compare(a.sum, b.sum)
}

// recount sums the pending counts from the chunks: the count of key k is
// the number of pending checkpoints with k among their distinct keys. The
// sum over chunks counts a checkpoint once per chunk of it holding k, so
// for the few keys held by more than one chunk (duplicate files) each
// checkpoint's surplus is taken off again.
func (pc *PendingCache) recount() {
	use := map[chunkRef]int64{}
	for _, p := range pc.pending {
		for _, c := range p.content {
			use[c]++
		}
	}
	for ref := range pc.digests { // forget chunks no pending checkpoint uses
		if use[ref] == 0 {
			delete(pc.digests, ref)
		}
	}
	// Per key: the checkpoints counted (once per chunk of theirs holding
	// it), and how many distinct chunks hold it.
	type tally struct {
		n      int64
		chunks int32
	}
	size := 0
	for ref := range use {
		size += len(pc.digests[ref])
	}
	for _, p := range pc.pending {
		size += len(p.inline)
	}
	tallies := make(map[[32]byte]tally, size)
	for ref, n := range use {
		for _, d := range pc.digests[ref] {
			t := tallies[d]
			t.n, t.chunks = t.n+n, t.chunks+1
			tallies[d] = t
		}
	}
	// An inline manifest's digests are distinct and held by no chunk: each
	// counts its checkpoint once.
	for _, p := range pc.pending {
		for _, d := range p.inline {
			t := tallies[d]
			t.n++
			tallies[d] = t
		}
	}
	multi := map[[32]byte]struct{}{} // keys held by more than one chunk
	for d, t := range tallies {
		if t.chunks > 1 {
			multi[d] = struct{}{}
		}
	}
	// Most such keys are one file's key in two versions of its chunk (a
	// neighbour changed), never both in one checkpoint; only a checkpoint
	// holding a key in m > 1 of its chunks (duplicate files) is counted
	// m-1 times too often. One pass over each checkpoint's digests finds
	// them, with a map lookup each.
	if len(multi) > 0 {
		for _, p := range pc.pending {
			var in map[[32]byte]int64
			for _, ref := range p.content {
				for _, d := range pc.digests[ref] {
					if _, ok := multi[d]; ok {
						if in == nil {
							in = map[[32]byte]int64{}
						}
						in[d]++
					}
				}
			}
			for d, m := range in {
				if m > 1 {
					t := tallies[d]
					t.n -= m - 1
					tallies[d] = t
				}
			}
		}
	}
	pc.counts = make(map[string]int64, len(tallies))
	for d, t := range tallies {
		pc.counts[chain.FilePrefix+hex.EncodeToString(d[:])] = t.n
	}
	for _, p := range pc.pending {
		for _, k := range p.artifacts {
			pc.counts[k]++
		}
	}
}
