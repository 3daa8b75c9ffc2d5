package meta

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/sbxdb/sbxdb/chain"
	bolt "go.etcd.io/bbolt"
)

// Bucket names of the chain buckets. The whole bbolt layout, with the lease
// and engine buckets, is documented in docs/ARCHITECTURE.md.
var (
	// BucketCheckpoints maps checkpoint id → sealed checkpoint record
	// (record.go).
	BucketCheckpoints = []byte("checkpoints")
	// BucketThreadIndex holds one key per checkpoint:
	// threadId 0x00 be64(createdAt xor 1<<63) id → sealed empty payload,
	// so a thread's checkpoints are one range scan in List order.
	BucketThreadIndex = []byte("thread_index")
	// BucketHeads maps threadId → sealed head checkpoint id.
	BucketHeads = []byte("heads")
	// BucketRefs maps blob key → sealed uvarint folded reference count
	// (> 0); see refs.go for the pending part of a count.
	BucketRefs = []byte("refs")
	// BucketPendingRefs holds, for each checkpoint whose references are
	// not yet folded into BucketRefs, be64(createdAt xor 2^63) ‖ its id
	// (→ sealed threadId). Formats 1 and 2 keyed it by id with an empty
	// value. Its bucket sequence is their weight (refs.go).
	BucketPendingRefs = []byte("refs_pending")
	// BucketTranscripts maps threadId → sealed message list.
	BucketTranscripts = []byte("transcripts")
)

// Buckets lists the chain buckets, for the engine to create at Open.
var Buckets = [][]byte{BucketCheckpoints, BucketChunks, BucketChunkRefs, BucketThreadIndex, BucketHeads, BucketRefs, BucketPendingRefs, BucketTranscripts}

func bucket(tx *bolt.Tx, name []byte) *bolt.Bucket {
	b := tx.Bucket(name)
	if b == nil {
		// Open creates every bucket; a missing one means a damaged file.
		panic(fmt.Sprintf("sbxdb: bucket %s missing", name))
	}
	return b
}

func get(tx *bolt.Tx, name, key []byte) ([]byte, error) {
	v := bucket(tx, name).Get(key)
	if v == nil {
		return nil, nil
	}
	return Unseal(name, key, v)
}

func put(tx *bolt.Tx, name, key, payload []byte) error {
	return bucket(tx, name).Put(key, Seal(name, key, payload))
}

// indexKey is the thread-index key of a checkpoint. Identifiers never
// contain NUL, so threadId+0x00 is an exact prefix of one thread's keys.
func indexKey(threadID string, createdAt int64, id string) []byte {
	k := make([]byte, 0, len(threadID)+9+len(id))
	k = append(k, threadID...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint64(k, uint64(createdAt)^1<<63)
	return append(k, id...)
}

func threadPrefix(threadID string) []byte { return append([]byte(threadID), 0) }

// CheckpointExists reports whether id is stored, without decoding it.
func CheckpointExists(tx *bolt.Tx, id string) bool {
	return bucket(tx, BucketCheckpoints).Get([]byte(id)) != nil
}

// GetCheckpoint returns the checkpoint id, or nil when it is not stored.
func GetCheckpoint(tx *bolt.Tx, id string) (*chain.Checkpoint, error) {
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
func CheckpointHeader(tx *bolt.Tx, id string) (threadID, parentID string, ok bool, err error) {
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

// PutCheckpoint stores cp, indexes it under its thread and adds one
// reference to each of its distinct blob keys. The caller has checked that
// the id is free.
func PutCheckpoint(tx *bolt.Tx, cp *chain.Checkpoint) error { return PutPrepared(tx, Prepare(cp)) }

// PutPrepared is PutCheckpoint for a checkpoint prepared earlier. Its
// references are added as pending (refs.go), folded later with others.
func PutPrepared(tx *bolt.Tx, p *Prepared) error {
	if err := putRecord(tx, p); err != nil {
		return err
	}
	return addPending(tx, p.ID, p.cp.ThreadID, p.cp.CreatedAt, uint64(len(p.cp.Files)))
}

// PutRecord stores cp's record and index key only, leaving reference counts
// alone (PutCheckpoint is PutRecord plus references). Tests use it to
// fabricate states the contract cannot reach.
func PutRecord(tx *bolt.Tx, cp *chain.Checkpoint) error { return putRecord(tx, Prepare(cp)) }

func putRecord(tx *bolt.Tx, p *Prepared) error {
	chunks := newChunkCursor(tx)
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
	// chunk (found by review: deleting it unconditionally lost a chunk the
	// other group needed).
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
			if err := chunks.b.Delete(chunkKey(old)); err != nil {
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

// Head returns the head checkpoint id of a thread, or "" when it has none.
func Head(tx *bolt.Tx, threadID string) (string, error) {
	p, err := get(tx, BucketHeads, []byte(threadID))
	return string(p), err
}

// SetHead moves the head of a thread; id "" removes it.
func SetHead(tx *bolt.Tx, threadID, id string) error {
	if id == "" {
		return bucket(tx, BucketHeads).Delete([]byte(threadID))
	}
	return put(tx, BucketHeads, []byte(threadID), []byte(id))
}

// ForEachInThread calls fn with the id of each checkpoint of the thread in
// List order (createdAt, then id bytes), verifying each index key's seal.
func ForEachInThread(tx *bolt.Tx, threadID string, fn func(id string) error) error {
	prefix := threadPrefix(threadID)
	c := bucket(tx, BucketThreadIndex).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if _, err := Unseal(BucketThreadIndex, k, v); err != nil {
			return err
		}
		if len(k) < len(prefix)+8+1 {
			return corrupt(BucketThreadIndex, k, "short index key")
		}
		if err := fn(string(k[len(prefix)+8:])); err != nil {
			return err
		}
	}
	return nil
}

// ListThread returns the thread's checkpoints in List order.
func ListThread(tx *bolt.Tx, threadID string) ([]*chain.Checkpoint, error) {
	out := []*chain.Checkpoint{}
	err := ForEachInThread(tx, threadID, func(id string) error {
		cp, err := GetCheckpoint(tx, id)
		if err == nil && cp == nil {
			err = corrupt(BucketThreadIndex, []byte(threadID), "index names missing checkpoint "+id)
		}
		if err == nil && cp.ThreadID != threadID {
			err = corrupt(BucketThreadIndex, []byte(threadID), "index names checkpoint "+id+" of thread "+cp.ThreadID)
		}
		if err != nil {
			return err
		}
		out = append(out, cp)
		return nil
	})
	return out, err
}

// ThreadHasCheckpoints reports whether any checkpoint belongs to the thread.
func ThreadHasCheckpoints(tx *bolt.Tx, threadID string) bool {
	prefix := threadPrefix(threadID)
	k, _ := bucket(tx, BucketThreadIndex).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// Threads returns every thread id that has a head, a checkpoint or a
// transcript, in UTF-8 byte order.
func Threads(tx *bolt.Tx) ([]string, error) {
	// Every key is checked by its value's seal: a damaged key must not
	// show up as a thread that never existed (found by FuzzDatabasePage).
	set := map[string]struct{}{}
	for _, name := range [][]byte{BucketHeads, BucketTranscripts} {
		if err := bucket(tx, name).ForEach(func(k, v []byte) error {
			if _, err := Unseal(name, k, v); err != nil {
				return err
			}
			set[string(k)] = struct{}{}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if err := bucket(tx, BucketThreadIndex).ForEach(func(k, v []byte) error {
		if _, err := Unseal(BucketThreadIndex, k, v); err != nil {
			return err
		}
		if i := bytes.IndexByte(k, 0); i > 0 {
			set[string(k[:i])] = struct{}{}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// LoadTranscript returns a thread's saved transcript; present is false when
// none was ever saved.
func LoadTranscript(tx *bolt.Tx, threadID string) (msgs []json.RawMessage, present bool, err error) {
	p, err := get(tx, BucketTranscripts, []byte(threadID))
	if err != nil {
		return nil, false, err
	}
	if p == nil {
		return []json.RawMessage{}, false, nil
	}
	msgs, err = DecodeMessages(p)
	if err != nil {
		return nil, false, corrupt(BucketTranscripts, []byte(threadID), err.Error())
	}
	return msgs, true, nil
}

// SaveTranscript replaces a thread's transcript.
func SaveTranscript(tx *bolt.Tx, threadID string, msgs []json.RawMessage) error {
	return SaveTranscriptPayload(tx, threadID, EncodeMessages(msgs))
}

// SaveTranscriptPayload replaces a thread's transcript with a payload made by
// EncodeMessages (so callers can encode outside the write transaction).
func SaveTranscriptPayload(tx *bolt.Tx, threadID string, payload []byte) error {
	return put(tx, BucketTranscripts, []byte(threadID), payload)
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
