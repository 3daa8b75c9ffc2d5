package meta

import (
	"encoding/binary"

	"github.com/sbxdb/sbxdb/internal/kv"
)

// pendingEntriesPerWeight is how many manifest entries add 1 to the
// weight of a pending checkpoint.
const pendingEntriesPerWeight = 256

// CheckpointWeight is the weight in the pending set of a checkpoint whose
// manifest has entries entries (Options.RefFoldAfter is in this unit).
func CheckpointWeight(entries uint64) uint64 { return 1 + entries/pendingEntriesPerWeight }

// pendingKey is the refs_pending key of checkpoint id created at createdAt:
// the time first (as in the thread index, xor 2^63 so that the bytes sort
// as the numbers), then the id. The appends of one commit, made at about
// the same time whatever their threads, then land on the bucket's last
// leaf; keyed by id, 30 appends of 30 threads wrote about ten of its leaves.
func pendingKey(createdAt int64, id string) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(id)), uint64(createdAt)^1<<63)
	return append(k, id...)
}

// PendingKey is the refs_pending key of a checkpoint, for tests that forge
// a pending set.
func PendingKey(createdAt int64, id string) []byte { return pendingKey(createdAt, id) }

// pendingID returns the checkpoint id that pending key k names.
func pendingID(k []byte) (string, error) {
	if len(k) <= 8 {
		return "", corrupt(BucketPendingRefs, k, "is not a pending-set key")
	}
	return string(k[8:]), nil
}

// addPending adds a checkpoint (its id, thread, createdAt and number of
// manifest entries) to the pending set; the bucket's sequence is the set's
// weight. Every append calls it, so it reads nothing: it adds to the
// weight blindly (kv.AddSequence), and writes a key no other append
// writes, so that appends of different threads running at once on shared
// metadata do not conflict here.
func addPending(tx kv.Tx, id, thread string, createdAt int64, entries uint64) error {
	b := bucket(tx, BucketPendingRefs)
	k := pendingKey(createdAt, id)
	if err := b.Put(k, Seal(BucketPendingRefs, k, []byte(thread))); err != nil {
		return err
	}
	return kv.AddSequence(b, int64(CheckpointWeight(entries)))
}

// PendingWeight returns the weight of the checkpoints whose references are
// not folded yet: 1 for each, plus 1 for each 256 entries of its manifest.
// (Formats 1 and 2 kept their number: a store they wrote weighs its
// pending set once, when it is upgraded.)
func PendingWeight(tx kv.Tx) uint64 { return bucket(tx, BucketPendingRefs).Sequence() }

// PendingPerThread reports whether the pending checkpoints number at least
// per for each thread they belong to. It stops reading once the threads
// seen make that impossible: the checkpoints are no more than their
// weight.
func PendingPerThread(tx kv.Tx, per int) (bool, error) {
	limit := PendingWeight(tx)
	n := 0
	seen := map[string]bool{}
	c := bucket(tx, BucketPendingRefs).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		thread, err := Unseal(BucketPendingRefs, k, v)
		if err != nil {
			return false, err
		}
		n++
		if !seen[string(thread)] { // the lookup does not allocate
			seen[string(thread)] = true
			if uint64(per*len(seen)) > limit {
				return false, nil
			}
		}
	}
	return n >= per*len(seen), nil
}

// loadPending returns the record of the checkpoint that the pending entry
// k, v names, checking the entry's seal; a missing record is ErrCorrupt.
func loadPending(tx kv.Tx, k, v []byte) (*storedRecord, error) {
	if _, err := Unseal(BucketPendingRefs, k, v); err != nil {
		return nil, err
	}
	id, err := pendingID(k)
	if err != nil {
		return nil, err
	}
	r, err := loadRecord(tx, id)
	switch {
	case err != nil:
	case r == nil:
		err = corrupt(BucketPendingRefs, k, "names a missing checkpoint")
	case r.createdAt != pendingCreatedAt(k):
		// Else the readers would count it and a delete, which looks it up
		// by the record's time, would not find it.
		err = corrupt(BucketPendingRefs, k, "does not carry its checkpoint's createdAt")
	}
	return r, err
}

// isPending reports whether stored checkpoint r is in the pending set.
func isPending(tx kv.Tx, r *storedRecord) bool {
	return bucket(tx, BucketPendingRefs).Get(pendingKey(r.createdAt, r.id)) != nil
}

// dropPending removes stored checkpoint r from the pending set, reporting
// whether it was there.
func dropPending(tx kv.Tx, r *storedRecord) (bool, error) {
	b := bucket(tx, BucketPendingRefs)
	k := pendingKey(r.createdAt, r.id)
	if b.Get(k) == nil {
		return false, nil
	}
	if err := b.Delete(k); err != nil {
		return false, err
	}
	return true, b.SetSequence(b.Sequence() - min(b.Sequence(), CheckpointWeight(r.entries)))
}

// WeighPending sets the pending set's weight, and each entry's thread,
// from the checkpoints' records. An entry whose record is missing or
// damaged weighs 1 and is left as it is.
func WeighPending(tx kv.Tx) error {
	w, threads, err := weighPending(tx)
	if err != nil {
		return err
	}
	b := bucket(tx, BucketPendingRefs)
	for k, thread := range threads {
		if err := b.Put([]byte(k), Seal(BucketPendingRefs, []byte(k), []byte(thread))); err != nil {
			return err
		}
	}
	return b.SetSequence(w)
}

// weighPending returns the weight of the pending set as its records give
// it, and the thread of each entry (by key) that has a record.
func weighPending(tx kv.Tx) (uint64, map[string]string, error) {
	w := uint64(0)
	threads := map[string]string{}
	err := bucket(tx, BucketPendingRefs).ForEach(func(k, _ []byte) error {
		id, err := pendingID(k)
		var r *storedRecord
		if err == nil {
			r, err = loadRecord(tx, id)
		}
		if err != nil || r == nil || r.createdAt != pendingCreatedAt(k) {
			w++
			return nil
		}
		w += CheckpointWeight(r.entries)
		threads[string(k)] = r.threadID
		return nil
	})
	return w, threads, err
}

// pendingCreatedAt returns the createdAt of a pending key (at least 8 bytes).
func pendingCreatedAt(k []byte) int64 { return int64(binary.BigEndian.Uint64(k) ^ 1<<63) }
