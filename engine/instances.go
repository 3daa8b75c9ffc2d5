package engine

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// Instances returns the instance store kept in the same file.
func (db *DB) Instances() sbxdb.InstanceStore { return instanceStore{db} }

type instanceStore struct{ db *DB }

// instanceKey is the bucket key of an instance record: the SHA-256 of the
// instance key. The contract admits any key, including the empty one (which
// bbolt cannot store) and ones longer than bbolt's 32 KiB key limit; the
// record holds the full key and Get compares it, so even a collision could
// never return another key's record.
func instanceKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

func encodeInstance(r *sbxdb.InstanceRecord) []byte {
	e := &meta.Encoder{}
	for _, s := range []string{r.Key, r.Provider, r.ProviderSandboxID, r.LatestSnapshotID, r.ThreadID, r.LatestRunID} {
		e.String(s)
	}
	e.Varint(r.UpdatedAt)
	return e.Bytes()
}

func decodeInstance(p []byte) (*sbxdb.InstanceRecord, error) {
	d := meta.NewDecoder(p)
	r := &sbxdb.InstanceRecord{}
	r.Key, r.Provider, r.ProviderSandboxID = d.String(), d.String(), d.String()
	r.LatestSnapshotID, r.ThreadID, r.LatestRunID = d.String(), d.String(), d.String()
	r.UpdatedAt = d.Varint()
	return r, d.Err()
}

func (s instanceStore) Get(ctx context.Context, key string) (*sbxdb.InstanceRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec *sbxdb.InstanceRecord
	err := s.db.viewCtx(ctx, func(tx kv.Tx) error {
		k := instanceKey(key)
		v := tx.Bucket(meta.BucketInstances).Get(k)
		if v == nil {
			return nil
		}
		p, err := meta.Unseal(meta.BucketInstances, k, v)
		if err != nil {
			return err
		}
		if rec, err = decodeInstance(p); err != nil {
			rec = nil
			return fmt.Errorf("%w: %s/%x: malformed instance record", chain.ErrCorrupt, meta.BucketInstances, k)
		}
		if rec.Key != key {
			rec = nil // another key with the same hash: not this record
		}
		return nil
	})
	return rec, err
}

func (s instanceStore) Upsert(ctx context.Context, rec sbxdb.InstanceRecord) error {
	k := instanceKey(rec.Key)
	v := meta.Seal(meta.BucketInstances, k, encodeInstance(&rec))
	return s.db.write(ctx, func(tx kv.Tx) error { return tx.Bucket(meta.BucketInstances).Put(k, v) })
}

func (s instanceStore) Delete(ctx context.Context, key string) error {
	return s.db.write(ctx, func(tx kv.Tx) error { return tx.Bucket(meta.BucketInstances).Delete(instanceKey(key)) })
}
