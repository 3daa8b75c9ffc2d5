package cas

import (
	"encoding/binary"
	"fmt"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// The deletion count lets a writer in another process know whether a blob
// it found stored may have gone since.
//
// Within one process, pins (pins.go) keep a sweep away from the keys a
// batch relies on. Processes sharing one index (metadata in a shared
// database) cannot see each other's pins. So every transaction that
// deletes index entries also increments cas_meta/deletions, and a writer
// reads the count (Deletions) before its first lookup: if the count is
// the same in the transaction that commits what it wrote, no entry has
// been deleted since, and every key it found is still stored. If it
// differs, the writer re-checks the keys it names (MissingIn) in that
// transaction, which every deleting transaction is serialized with.

// noteDeletions increments the deletion count in tx, a transaction that
// deletes index entries.
func noteDeletions(tx kv.Tx) error {
	meta := tx.Bucket(bucketMeta)
	n, err := deletionsOf(meta)
	if err != nil {
		n = 0 // damaged: rewritten; a writer that read it re-checks anyway
	}
	return meta.Put(keyDeletions, binary.AppendUvarint(nil, n+1))
}

func deletionsOf(meta kv.Bucket) (uint64, error) {
	if meta == nil {
		return 0, nil
	}
	v := meta.Get(keyDeletions)
	if v == nil {
		return 0, nil
	}
	n, k := binary.Uvarint(v)
	if k != len(v) {
		return 0, fmt.Errorf("%w: cas_meta/deletions is malformed", sbxdb.ErrBlobCorrupt)
	}
	return n, nil
}

// DeletionsIn returns the deletion count as tx sees it.
func DeletionsIn(tx kv.Tx) (uint64, error) { return deletionsOf(tx.Bucket(bucketMeta)) }

// Deletions returns the deletion count: read it before a batch's first
// lookup, and compare it with DeletionsIn in the transaction that commits.
func (s *Store) Deletions() (n uint64, err error) {
	err = s.db.View(func(tx kv.Tx) error {
		n, err = DeletionsIn(tx)
		return err
	})
	return n, err
}

// MissingIn returns the first of keys that neither the batch adds nor tx's
// index holds, or "" when every one is stored. keys may repeat. It is for
// the function CommitWith runs in its transaction, which holds the batch.
func (b *Batch) MissingIn(tx kv.Tx, keys []string) string {
	idx := tx.Bucket(bucketIndex)
	for _, k := range keys {
		if _, ok := b.added[k]; ok {
			continue
		}
		if idx == nil || idx.Get([]byte(k)) == nil {
			return k
		}
	}
	return ""
}
