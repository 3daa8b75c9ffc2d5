package meta

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/sbxdb/sbxdb/internal/kv"
)

// Integrity checks over the checkpoint buckets, for sbxdb check. They read
// everything, so they are for tools, never for a hot path.

// CheckPending compares the pending set's weight and its entries' threads
// with what the records give, and describes each difference. They decide
// only when folds run, never a count; WeighPending sets them right.
func CheckPending(tx kv.Tx) ([]string, error) {
	w, threads, err := weighPending(tx)
	if err != nil {
		return nil, err
	}
	var out []string
	if have := PendingWeight(tx); have != w {
		out = append(out, fmt.Sprintf("pending set weighs %d, its checkpoints %d", have, w))
	}
	err = bucket(tx, BucketPendingRefs).ForEach(func(k, v []byte) error {
		thread, err := Unseal(BucketPendingRefs, k, v)
		if want, ok := threads[string(k)]; ok && (err != nil || string(thread) != want) {
			out = append(out, fmt.Sprintf("pending entry %q names thread %q, its checkpoint %q", k, thread, want))
		}
		return nil
	})
	return out, err
}

// RebuildRefs replaces every stored reference count (folded and pending)
// with counts, which must hold each key's number of checkpoints (> 0).
func RebuildRefs(tx kv.Tx, counts map[string]int64) error {
	for _, name := range [][]byte{BucketRefs, BucketPendingRefs} {
		if err := tx.DeleteBucket(name); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}
	keys := make([]string, 0, len(counts))
	for k, n := range counts {
		if n > 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := AddRef(tx, k, counts[k]); err != nil {
			return err
		}
	}
	return nil
}

// ChunkUses recounts, from the records, how many checkpoints use each
// chunk. A record that cannot be decoded is an error when strict; otherwise
// it is skipped (Check reports it on its own).
func ChunkUses(tx kv.Tx, strict bool) (map[uint64]int64, error) {
	return chunkUses(tx, BucketCheckpoints, strict)
}

// ChunkProblem is a chunk whose stored state disagrees with the records.
type ChunkProblem struct {
	Chunk  string // the id in hex
	Detail string
}

// CheckChunks compares the stored chunks and their counts (folded plus
// pending) with uses, the recount: every used chunk is stored, intact and
// counted right, and no other chunk or count is stored. Problems come in
// chunk id order.
func CheckChunks(tx kv.Tx, uses map[uint64]int64) ([]ChunkProblem, error) {
	pending, err := pendingChunkUses(tx, false)
	if err != nil {
		return nil, err
	}
	var out []ChunkProblem
	bad := func(id uint64, format string, args ...any) {
		out = append(out, ChunkProblem{chunkName(id), fmt.Sprintf(format, args...)})
	}
	stored := map[uint64]bool{}
	err = bucket(tx, BucketChunks).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			out = append(out, ChunkProblem{fmt.Sprintf("%x", k), "malformed chunk key"})
			return nil
		}
		id := binary.BigEndian.Uint64(k)
		stored[id] = true
		if _, err := Unseal(BucketChunks, k, v); err != nil {
			bad(id, "damaged: %v", err)
		}
		if uses[id] == 0 {
			bad(id, "stored, but no checkpoint uses it")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	counted := map[uint64]bool{}
	err = bucket(tx, BucketChunkRefs).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			out = append(out, ChunkProblem{fmt.Sprintf("%x", k), "malformed count key"})
			return nil
		}
		id := binary.BigEndian.Uint64(k)
		counted[id] = true
		n, err := decodeCountIn(BucketChunkRefs, k, v)
		if err != nil {
			bad(id, "count unreadable: %v", err)
		} else if n+pending[id] != uses[id] {
			bad(id, "counted %d, checkpoints use it %d times", n+pending[id], uses[id])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for id, n := range uses {
		if !stored[id] {
			bad(id, "missing, used by %d checkpoints", n)
		}
		if !counted[id] && pending[id] != n {
			bad(id, "counted %d, checkpoints use it %d times", pending[id], n)
		}
	}
	slices.SortFunc(out, func(a, b ChunkProblem) int { return cmp.Compare(a.Chunk, b.Chunk) })
	return out, nil
}

// RebuildChunkRefs replaces every chunk count with uses, the recount, and
// deletes the chunks no checkpoint uses. It runs after RebuildRefs, which
// empties the pending set: every count is folded then.
func RebuildChunkRefs(tx kv.Tx, uses map[uint64]int64) error {
	if err := tx.DeleteBucket(BucketChunkRefs); err != nil {
		return err
	}
	if _, err := tx.CreateBucket(BucketChunkRefs); err != nil {
		return err
	}
	if err := addChunkRefs(tx, uses); err != nil {
		return err
	}
	var unused [][]byte
	if err := bucket(tx, BucketChunks).ForEach(func(k, _ []byte) error {
		if len(k) != 8 || uses[binary.BigEndian.Uint64(k)] == 0 {
			unused = append(unused, slices.Clone(k))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range unused {
		if err := bucket(tx, BucketChunks).Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// MetadataUsage sums the checkpoint metadata: the number of records and
// chunks, the bytes the checkpoints would take stored whole (logical, as
// format 1 stored them: chain.RecordSize plus a seal each), and the bytes the
// records and chunks take as stored (physical, seals included).
func MetadataUsage(tx kv.Tx) (records, chunks int, logical, physical int64, err error) {
	err = bucket(tx, BucketCheckpoints).ForEach(func(k, v []byte) error {
		r, err := loadRecord(tx, string(k))
		if err != nil {
			return err
		}
		records++
		logical += int64(r.fullSize) + sealSize
		physical += int64(len(v))
		return nil
	})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	err = bucket(tx, BucketChunks).ForEach(func(_, v []byte) error {
		chunks++
		physical += int64(len(v))
		return nil
	})
	return records, chunks, logical, physical, err
}
