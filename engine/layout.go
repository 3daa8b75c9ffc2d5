package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
	bolt "go.etcd.io/bbolt"
)

// The bbolt layout, format version 1. This comment and docs/ARCHITECTURE.md
// are the one place it is written down; chain and lease declare their own
// bucket names but not the layout as a whole.
//
//	meta          "format" → uvarint format version (FormatVersion)
//	              "recovered" → text: when and why the file last opened on
//	              its older meta page (verifyPages); Check warns of it until
//	              a repair clears it
//	checkpoints   checkpoint id → checkpoint record (chain/codec.go)
//	thread_index  threadId 0x00 be64(createdAt xor 1<<63) checkpoint id → ∅
//	              (List is one range scan in createdAt, id-bytes order)
//	heads         threadId → head checkpoint id
//	refs          blob key → uvarint folded reference count, always > 0
//	refs_pending  checkpoint id → ∅ for each checkpoint whose references are
//	              not folded into refs yet (Options.RefFoldAfter); bucket
//	              sequence = key count
//	              (count(k) = refs[k] + pending checkpoints using k: chain/refs.go)
//	transcripts   threadId → message list (present, even empty, blocks a fork)
//	writers       threadId → writer state: last fence, live lease if any
//	instances     sha256(key) → instance record holding the full key (admits
//	              the empty key and keys past bbolt's 32 KiB limit)
//	cas_meta, cas_index, cas_packs
//	              the blob store's index, laid out in cas/format.go
//
// Every value is sealed (chain.Seal): a record-version byte, the payload, and
// an xxhash64 of bucket, key and payload, checked on every read. Identifiers
// never contain NUL, so threadId 0x00 is an exact prefix in thread_index.
var (
	bucketMeta      = []byte("meta")
	bucketInstances = []byte("instances")
	keyFormat       = []byte("format")
	keyRecovered    = []byte("recovered")
)

// FormatVersion is the bbolt layout this build reads and writes.
const FormatVersion = 1

func allBuckets() [][]byte {
	return append([][]byte{bucketMeta, lease.BucketWriters, bucketInstances}, chain.Buckets...)
}

// initLayout creates the buckets of a new store and stamps its format, or
// checks the format of an existing one.
func initLayout(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		if !tx.Writable() {
			return fmt.Errorf("%w: the database holds no sbxdb store", ErrFormat)
		}
		for _, name := range allBuckets() {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		v := binary.AppendUvarint(nil, FormatVersion)
		return tx.Bucket(bucketMeta).Put(keyFormat, chain.Seal(bucketMeta, keyFormat, v))
	}
	v, err := formatOf(meta)
	if err != nil {
		return err
	}
	if v != FormatVersion {
		return fmt.Errorf("%w: store has format %d, this build reads format %d", ErrFormat, v, FormatVersion)
	}
	for _, name := range allBuckets() {
		if tx.Bucket(name) == nil {
			return fmt.Errorf("%w: bucket %s is missing", chain.ErrCorrupt, name)
		}
	}
	return nil
}

func formatOf(meta *bolt.Bucket) (uint64, error) {
	raw := meta.Get(keyFormat)
	if raw == nil {
		return 0, fmt.Errorf("%w: meta/format is missing", chain.ErrCorrupt)
	}
	p, err := chain.Unseal(bucketMeta, keyFormat, raw)
	if err != nil {
		return 0, err
	}
	v, n := binary.Uvarint(p)
	if n != len(p) {
		return 0, fmt.Errorf("%w: meta/format is malformed", chain.ErrCorrupt)
	}
	return v, nil
}
