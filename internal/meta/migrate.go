package meta

import (
	bolt "go.etcd.io/bbolt"
)

// MigrateRecords rewrites every checkpoint record of a format-1 store
// (whole checkpoints, EncodeCheckpoint) as the record this build writes and
// its chunks, or with its manifest inline (record.go), in tx. Chunk counts start as the blob counts stand: a
// checkpoint whose references are pending keeps its chunks pending too, the
// others are folded. The caller creates the chunk buckets first.
func MigrateRecords(tx *bolt.Tx) error {
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
