package meta

import (
	"slices"

	"github.com/sbxdb/sbxdb/internal/kv"
)

// pendingCounts sums the distinct keys of the pending checkpoints (a
// PendingCache used once).
func pendingCounts(tx kv.Tx) (map[string]int64, error) {
	var pc PendingCache
	err := pc.load(tx)
	return pc.counts, err
}

// FoldRefs adds the blob and chunk references of every pending checkpoint
// to the folded counts, one write per distinct key or chunk in key order,
// and empties the pending set. Counts read before and after are the same.
func FoldRefs(tx kv.Tx) error {
	var pc PendingCache
	if err := pc.load(tx); err != nil {
		return err
	}
	keys := make([]string, 0, len(pc.counts))
	for k := range pc.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys) // neighbouring keys share leaf pages
	for _, k := range keys {
		if err := AddRef(tx, k, pc.counts[k]); err != nil {
			return err
		}
	}
	chunks := map[uint64]int64{}
	for _, p := range pc.pending {
		for _, c := range p.chunks {
			chunks[c]++
		}
	}
	if err := addChunkRefs(tx, chunks); err != nil {
		return err
	}
	if kv.BoltTx(tx) != nil {
		// One writer at a time: the set is what pc loaded.
		if err := tx.DeleteBucket(BucketPendingRefs); err != nil {
			return err
		}
		_, err := tx.CreateBucket(BucketPendingRefs)
		return err
	}
	// Shared metadata: appends may add to the set while this runs. Delete
	// the entries folded, the ones this transaction sees, and set the
	// weight of those to 0: an entry or weight added concurrently stays,
	// and the transaction serializes before the one that added it (a
	// bucket's deletion would drop it, and conflict with every append).
	b := bucket(tx, BucketPendingRefs)
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return b.SetSequence(0)
}
