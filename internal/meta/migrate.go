package meta

import (
	"github.com/sbxdb/sbxdb/internal/kv"
)

// UpgradePending rewrites the pending set of a format-1 or format-2 store,
// keyed by checkpoint id with empty values, as format 3 keeps it: keyed by
// pendingKey, each naming its thread, the sequence its weight. An entry
// whose record is missing or damaged is kept (keyed with createdAt 0, and
// weighing 1): the upgrade runs in a writable Open, and must not lock out
// the check and repair that report and fix it.
func UpgradePending(tx kv.Tx) error {
	b := bucket(tx, BucketPendingRefs)
	var ids []string
	if err := b.ForEach(func(k, _ []byte) error { ids = append(ids, string(k)); return nil }); err != nil {
		return err
	}
	for _, id := range ids { // all deleted before any is put back
		if err := b.Delete([]byte(id)); err != nil {
			return err
		}
	}
	for _, id := range ids {
		var createdAt int64
		var thread string
		if r, err := loadRecord(tx, id); err == nil && r != nil {
			createdAt, thread = r.createdAt, r.threadID
		}
		k := pendingKey(createdAt, id)
		if err := b.Put(k, Seal(BucketPendingRefs, k, []byte(thread))); err != nil {
			return err
		}
	}
	return WeighPending(tx)
}

// MigrateRecords rewrites every checkpoint record of a format-1 store
// (whole checkpoints, EncodeCheckpoint) as the record this build writes and
// its chunks, or with its manifest inline (record.go), in tx. Chunk counts
// start as the blob counts stand: a checkpoint whose references are pending
// keeps its chunks pending too, the others are folded. The caller creates
// the chunk buckets first.
func MigrateRecords(tx kv.Tx) error {
	var ids []string
	if err := bucket(tx, BucketCheckpoints).ForEach(func(k, _ []byte) error {
		ids = append(ids, string(k))
		return nil
	}); err != nil {
		return err
	}
	folded := map[uint64]int64{}
	for _, id := range ids {
		p, err := get(tx, BucketCheckpoints, []byte(id))
		if err != nil {
			return err
		}
		cp, err := DecodeCheckpoint(p)
		if err == nil && cp.ID != id {
			err = corrupt(BucketCheckpoints, []byte(id), "record holds checkpoint "+cp.ID)
		}
		if err == nil {
			err = validateStored(cp)
		}
		if err != nil {
			return corrupt(BucketCheckpoints, []byte(id), "format-1 record: "+err.Error())
		}
		prepared := Prepare(cp)
		if err := putRecord(tx, prepared); err != nil {
			return err
		}
		if bucket(tx, BucketPendingRefs).Get([]byte(id)) == nil { // format 1's key: the id (UpgradePending rekeys it)
			r, err := loadRecord(tx, id)
			if err != nil {
				return err
			}
			ids, err := r.chunkIDs(newChunkCursor(tx))
			if err != nil {
				return err
			}
			for _, c := range ids {
				folded[c]++
			}
		}
	}
	return addChunkRefs(tx, folded)
}
