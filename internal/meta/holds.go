package meta

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Blob holds: how many plain objects and artifact records name each blob.
//
// A checkpoint's references are the contract's (refs, listBlobReferences);
// objects and artifact records keep their blobs alive too, but must not
// show up in the contract's listing, so they count in a bucket of their
// own. Invariant, kept by every write of an object or artifact record in
// the transaction that writes it:
//
//	blob_holds[k] = the objects whose record names k
//	              + the artifact records whose blobKey is k
//
// and a key is absent when that is 0. A sweep keeps every held blob.

// AddHold adds delta to the hold count of key, deleting the key at 0.
func AddHold(tx kv.Tx, key string, delta int64) error {
	if delta == 0 {
		return nil
	}
	b := bucket(tx, BucketBlobHolds)
	old, err := decodeCountIn(BucketBlobHolds, []byte(key), b.Get([]byte(key)))
	if err != nil {
		return err
	}
	if n := old + delta; n > 0 {
		return put(tx, BucketBlobHolds, []byte(key), binary.AppendUvarint(nil, uint64(n)))
	}
	return b.Delete([]byte(key))
}

// HoldCount returns how many objects and artifact records name key.
func HoldCount(tx kv.Tx, key string) (int64, error) {
	return decodeCountIn(BucketBlobHolds, []byte(key), bucket(tx, BucketBlobHolds).Get([]byte(key)))
}

// Holds returns every held blob key with its count, in UTF-8 byte order.
func Holds(tx kv.Tx) ([]chain.BlobRef, error) {
	var out []chain.BlobRef
	err := bucket(tx, BucketBlobHolds).ForEach(func(k, v []byte) error {
		n, err := decodeCountIn(BucketBlobHolds, k, v)
		if err != nil {
			return err
		}
		out = append(out, chain.BlobRef{Key: string(k), References: n})
		return nil
	})
	return out, err
}

// CountHolds recounts the holds from the records: how many plain objects
// and how many artifact records name each blob key (a key's hold count is
// the sum). A record that cannot be decoded is an error when strict;
// otherwise it is skipped and described in damaged (check reports it).
func CountHolds(tx kv.Tx, strict bool) (objects, records map[string]int64, damaged []RecordProblem, err error) {
	objects, records = map[string]int64{}, map[string]int64{}
	err = ForEachObject(tx, "", "", func(key string, o *Object, err error) (bool, error) {
		if err != nil {
			if strict {
				return false, err
			}
			damaged = append(damaged, RecordProblem{Bucket: string(BucketObjects), Key: key, Detail: err.Error()})
			return true, nil
		}
		objects[o.BlobKey]++
		return true, nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	err = ForEachArtifactRecord(tx, func(id string, r *ArtifactRecord, err error) error {
		if err != nil {
			if strict {
				return err
			}
			damaged = append(damaged, RecordProblem{Bucket: string(BucketArtifactRecords), Key: id, Detail: err.Error()})
			return nil
		}
		if k := r.HeldKey(); k != "" {
			records[k]++
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return objects, records, damaged, nil
}

// RebuildHolds replaces every hold count with the sum of the counts given
// (CountHolds's); keys at 0 are left out.
func RebuildHolds(tx kv.Tx, counts ...map[string]int64) error {
	if err := tx.DeleteBucket(BucketBlobHolds); err != nil {
		return err
	}
	if _, err := tx.CreateBucket(BucketBlobHolds); err != nil {
		return err
	}
	sum := map[string]int64{}
	for _, c := range counts {
		for k, n := range c {
			sum[k] += n
		}
	}
	for _, k := range slices.Sorted(maps.Keys(sum)) {
		if err := AddHold(tx, k, sum[k]); err != nil {
			return err
		}
	}
	return nil
}

// RecordProblem is a damaged record or index key an integrity check found.
type RecordProblem struct {
	Bucket, Key string
	Detail      string
}
