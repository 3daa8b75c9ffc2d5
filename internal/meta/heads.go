package meta

import (
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Head returns the head checkpoint id of a thread, or "" when it has none.
func Head(tx kv.Tx, threadID string) (string, error) {
	p, err := get(tx, BucketHeads, []byte(threadID))
	return string(p), err
}

// SetHead moves the head of a thread; id "" removes it.
func SetHead(tx kv.Tx, threadID, id string) error {
	if id == "" {
		return bucket(tx, BucketHeads).Delete([]byte(threadID))
	}
	return put(tx, BucketHeads, []byte(threadID), []byte(id))
}

// ForEachHead calls fn with every thread's head.
func ForEachHead(tx kv.Tx, fn func(threadID, id string) error) error {
	return bucket(tx, BucketHeads).ForEach(func(k, v []byte) error {
		p, err := Unseal(BucketHeads, k, v)
		if err != nil {
			return err
		}
		return fn(string(k), string(p))
	})
}
