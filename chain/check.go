package chain

import (
	"bytes"
	"encoding/binary"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Integrity checks over the chain buckets, for sbxdb check. They read
// everything, so they are for tools, never for a hot path.

// ForEachCheckpoint calls fn with every stored checkpoint in id order. A
// record that cannot be decoded is passed as cp == nil with its error, and
// the walk goes on; an error returned by fn stops it.
func ForEachCheckpoint(tx *bolt.Tx, fn func(id string, cp *Checkpoint, err error) error) error {
	return bucket(tx, BucketCheckpoints).ForEach(func(k, _ []byte) error {
		cp, err := GetCheckpoint(tx, string(k))
		return fn(string(k), cp, err)
	})
}

// ForEachIndexed calls fn with the thread, createdAt and id of every key of
// the thread index, verifying each key's seal; a damaged key is an error.
func ForEachIndexed(tx *bolt.Tx, fn func(threadID string, createdAt int64, id string) error) error {
	c := bucket(tx, BucketThreadIndex).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if _, err := Unseal(BucketThreadIndex, k, v); err != nil {
			return err
		}
		i := bytes.IndexByte(k, 0)
		if i <= 0 || len(k) < i+1+8+1 {
			return corrupt(BucketThreadIndex, k, "malformed index key")
		}
		createdAt := int64(binary.BigEndian.Uint64(k[i+1:i+9]) ^ 1<<63)
		if err := fn(string(k[:i]), createdAt, string(k[i+9:])); err != nil {
			return err
		}
	}
	return nil
}

// ForEachHead calls fn with every thread's head.
func ForEachHead(tx *bolt.Tx, fn func(threadID, id string) error) error {
	return bucket(tx, BucketHeads).ForEach(func(k, v []byte) error {
		p, err := Unseal(BucketHeads, k, v)
		if err != nil {
			return err
		}
		return fn(string(k), string(p))
	})
}

// RebuildRefs replaces every stored reference count (folded and pending)
// with counts, which must hold each key's number of checkpoints (> 0).
func RebuildRefs(tx *bolt.Tx, counts map[string]int64) error {
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
