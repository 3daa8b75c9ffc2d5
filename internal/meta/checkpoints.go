package meta

import (
	"bytes"
	"encoding/binary"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// CheckpointExists reports whether id is stored, without decoding it.
func CheckpointExists(tx kv.Tx, id string) bool {
	return bucket(tx, BucketCheckpoints).Get([]byte(id)) != nil
}

// CheckpointsWithPrefix returns the first limit ids, in byte order, of the
// stored checkpoints whose id starts with prefix, and how many ids start
// with it: one seek on the checkpoints bucket, keyed by id.
func CheckpointsWithPrefix(tx kv.Tx, prefix string, limit int) (ids []string, n int) {
	p := []byte(prefix)
	c := bucket(tx, BucketCheckpoints).Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		if n < limit {
			ids = append(ids, string(k))
		}
		n++
	}
	return ids, n
}

// GetCheckpoint returns the checkpoint id, or nil when it is not stored.
func GetCheckpoint(tx kv.Tx, id string) (*chain.Checkpoint, error) {
	r, err := loadRecord(tx, id)
	if r == nil || err != nil {
		return nil, err
	}
	cp, err := r.checkpoint(newChunkCursor(tx))
	if err != nil {
		return nil, err
	}
	// A record that decodes is not yet a valid checkpoint: one sealed with
	// a forged checksum may hold a path like "../x" or a message that is
	// not JSON (both found by FuzzRecord). Everything append checks is
	// checked again.
	if err := validateStored(cp); err != nil {
		return nil, corrupt(BucketCheckpoints, []byte(id), "record is not a valid checkpoint: "+err.Error())
	}
	return cp, nil
}

// CheckpointHeader returns the thread and parent of checkpoint id, ok false
// when it is not stored, reading only the start of its record (the seal is
// still checked over all of it). For walking chains: a full decode costs
// several times the record.
func CheckpointHeader(tx kv.Tx, id string) (threadID, parentID string, ok bool, err error) {
	p, err := get(tx, BucketCheckpoints, []byte(id))
	if p == nil || err != nil {
		return "", "", false, err
	}
	d := NewDecoder(p)
	got, threadID, parentID := d.String(), d.String(), d.String()
	if d.err != nil || got != id || chain.CheckID("threadId", threadID) != nil || (parentID != "" && chain.CheckID("parentCheckpointId", parentID) != nil) {
		return "", "", false, corrupt(BucketCheckpoints, []byte(id), "bad record header")
	}
	return threadID, parentID, true, nil
}

// PutPrepared stores a checkpoint prepared earlier (Prepare), indexes it
// under its thread and adds one reference to each of its distinct blob
// keys: its references are added as pending (refs_pending.go), folded later
// with others. The caller has checked that the id is free.
func PutPrepared(tx kv.Tx, p *Prepared) error {
	if err := putRecord(tx, p); err != nil {
		return err
	}
	return addPending(tx, p.ID, p.cp.ThreadID, p.cp.CreatedAt, uint64(len(p.cp.Files)))
}

// putCheckpoint prepares and stores cp (PutPrepared).
func putCheckpoint(tx kv.Tx, cp *chain.Checkpoint) error { return PutPrepared(tx, Prepare(cp)) }

// PutRecord stores cp's record and index key only, leaving reference counts
// alone (PutPrepared is PutRecord plus references). Tests use it to
// fabricate states the contract cannot reach.
func PutRecord(tx kv.Tx, cp *chain.Checkpoint) error { return putRecord(tx, Prepare(cp)) }

func putRecord(tx kv.Tx, p *Prepared) error {
	chunks := newChunkCursor(tx)
	hashes := make([]uint64, len(p.chunks))
	for i := range p.chunks {
		hashes[i] = p.chunks[i].hash
	}
	chunks.prefetch(hashes) // where each chunk would go, in one request
	ids := make([]uint64, len(p.chunks))
	var moved map[int32][]byte // index chunks whose data name a moved id
	var created map[int32]bool // of those, the ones this put stored
	for _, i := range p.order {
		c := &p.chunks[i]
		id, isNew, err := chunks.store(c)
		if err != nil {
			return err
		}
		ids[i] = id
		if c.index && isNew {
			if created == nil {
				created = map[int32]bool{}
			}
			created[i] = true
		}
		if id == c.hash || c.in < 0 {
			continue
		}
		// A collision moved a content chunk: its index chunk must name
		// where. (p may be stored again, by a retried commit: copy, not
		// patch.)
		if moved == nil {
			moved = map[int32][]byte{}
		}
		if _, ok := moved[c.in]; !ok {
			moved[c.in] = slices.Clone(p.chunks[c.in].data)
		}
		binary.BigEndian.PutUint64(moved[c.in][c.slot:], id)
	}
	// Collisions are rare enough to fix afterwards: an index chunk naming
	// a moved chunk is stored again with the right ids. The copy stored
	// above with the wrong ones is removed if this put stored it and
	// nothing of this put names it still: two groups can have the same
	// index bytes before the fix, and only one of them names the moved
	// chunk (deleting it unconditionally would lose a chunk the other group
	// needs).
	var stale []uint64
	for i, data := range moved {
		c := p.chunks[i]
		if created[i] {
			stale = append(stale, ids[i])
		}
		c.data, c.hash = data, xxhash.Sum64(data)
		c.sum = sum(BucketChunks, chunkKey(c.hash), data)
		id, _, err := chunks.store(&c)
		if err != nil {
			return err
		}
		ids[i] = id
	}
	for _, old := range stale {
		if !slices.Contains(ids, old) {
			if err := chunks.del(old); err != nil {
				return err
			}
		}
	}
	record, copied := p.record, false
	for i := range p.chunks {
		c := &p.chunks[i]
		if c.in < 0 && ids[i] != c.hash {
			if !copied {
				record, copied = slices.Clone(record), true
			}
			binary.BigEndian.PutUint64(record[c.slot:], ids[i])
		}
	}
	if err := bucket(tx, BucketCheckpoints).Put([]byte(p.ID), Seal(BucketCheckpoints, []byte(p.ID), record)); err != nil {
		return err
	}
	return bucket(tx, BucketThreadIndex).Put(p.index, p.indexVal)
}

// validateStored checks a decoded record as append checked it (see
// GetCheckpoint).
func validateStored(cp *chain.Checkpoint) error {
	if err := chain.CheckIDs("checkpoint id", cp.ID, "checkpoint threadId", cp.ThreadID); err != nil {
		return err
	}
	if cp.ParentID != "" {
		if err := chain.CheckID("parentCheckpointId", cp.ParentID); err != nil {
			return err
		}
	}
	return chain.ValidateContent(cp)
}

// DeleteCheckpoints removes the stored checkpoints ids: their records,
// index keys and references, and every chunk no checkpoint uses any more.
// An id that is not stored is ErrCorrupt: callers delete what they found.
func DeleteCheckpoints(tx kv.Tx, ids []string) error {
	var freed []uint64 // chunks that may have lost their last user
	for _, id := range ids {
		r, err := loadRecord(tx, id)
		if err == nil && r == nil {
			err = corrupt(BucketCheckpoints, []byte(id), "is not stored")
		}
		if err != nil {
			return err
		}
		// Read all that is needed before deleting: r aliases the record.
		chunks, err := r.chunkIDs(newChunkCursor(tx))
		if err != nil {
			return err
		}
		pending := isPending(tx, r)
		var keys []string
		if !pending {
			if keys, err = r.blobKeys(newChunkCursor(tx)); err != nil {
				return err
			}
		}
		index := indexKey(r.threadID, r.createdAt, id)
		if err := bucket(tx, BucketCheckpoints).Delete([]byte(id)); err != nil {
			return err
		}
		if err := bucket(tx, BucketThreadIndex).Delete(index); err != nil {
			return err
		}
		if pending {
			// Its references were never folded in: nothing to subtract.
			if _, err := dropPending(tx, r); err != nil {
				return err
			}
		} else {
			for _, k := range keys {
				if err := AddRef(tx, k, -1); err != nil {
					return err
				}
			}
			for _, c := range chunks {
				if err := addChunkRef(tx, c, -1); err != nil {
					return err
				}
			}
		}
		freed = append(freed, chunks...)
	}
	// Only a chunk whose folded count is gone may have lost its last user;
	// the pending checkpoints (at most RefFoldAfter of them) are read only
	// when there is such a chunk.
	slices.Sort(freed)
	var unfolded []uint64
	for _, c := range slices.Compact(freed) {
		n, err := chunkFolded(tx, c)
		if err != nil {
			return err
		}
		if n == 0 {
			unfolded = append(unfolded, c)
		}
	}
	if len(unfolded) == 0 {
		return nil
	}
	used, err := pendingUse(tx, unfolded)
	if err != nil {
		return err
	}
	for _, c := range unfolded {
		if !used[c] {
			if err := bucket(tx, BucketChunks).Delete(chunkKey(c)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ForEachCheckpoint calls fn with every stored checkpoint in id order. A
// record that cannot be decoded is passed as cp == nil with its error, and
// the walk goes on; an error returned by fn stops it.
func ForEachCheckpoint(tx kv.Tx, fn func(id string, cp *chain.Checkpoint, err error) error) error {
	return bucket(tx, BucketCheckpoints).ForEach(func(k, _ []byte) error {
		cp, err := GetCheckpoint(tx, string(k))
		return fn(string(k), cp, err)
	})
}
