package meta

import (
	"bytes"
	"encoding/binary"
	"slices"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

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

// ForEachInThread calls fn with the id of each checkpoint of the thread in
// List order (createdAt, then id bytes), verifying each index key's seal.
func ForEachInThread(tx kv.Tx, threadID string, fn func(id string) error) error {
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

// ThreadSummary returns the number of the thread's checkpoints and the
// newest createdAt among them (ok false when it has none) from the thread
// index alone, verifying each key's seal as ForEachInThread does: no
// checkpoint record is read. The keys are in List order, so the last one
// holds the newest createdAt.
func ThreadSummary(tx kv.Tx, threadID string) (count int, latest int64, ok bool, err error) {
	prefix := threadPrefix(threadID)
	var last []byte
	c := bucket(tx, BucketThreadIndex).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if _, err := Unseal(BucketThreadIndex, k, v); err != nil {
			return 0, 0, false, err
		}
		if len(k) < len(prefix)+8+1 {
			return 0, 0, false, corrupt(BucketThreadIndex, k, "short index key")
		}
		count++
		last = k
	}
	if last == nil {
		return 0, 0, false, nil
	}
	return count, int64(binary.BigEndian.Uint64(last[len(prefix):]) ^ 1<<63), true, nil
}

// ListThread returns the thread's checkpoints in List order.
func ListThread(tx kv.Tx, threadID string) ([]*chain.Checkpoint, error) {
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
func ThreadHasCheckpoints(tx kv.Tx, threadID string) bool {
	prefix := threadPrefix(threadID)
	k, _ := bucket(tx, BucketThreadIndex).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// Threads returns every thread id that has a head, a checkpoint or a
// transcript, in UTF-8 byte order.
func Threads(tx kv.Tx) ([]string, error) {
	// Every key is checked by its value's seal: a damaged key must not
	// show up as a thread that never existed.
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

// ForEachIndexed calls fn with the thread, createdAt and id of every key of
// the thread index, verifying each key's seal; a damaged key is an error.
func ForEachIndexed(tx kv.Tx, fn func(threadID string, createdAt int64, id string) error) error {
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
