package meta

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Every value sbxdb stores in its metadata is sealed: a format byte, the payload,
// and an xxhash64 of (bucket, key, payload). bbolt checksums its meta pages
// but not values, so without the seal a flipped bit in a data page would be
// returned as valid data. Hashing the bucket and key too catches a value that
// ended up under the wrong key.

const (
	recordVersion = 1
	sealSize      = 1 + 8
)

func sum(bucket, key, payload []byte) uint64 {
	var d xxhash.Digest // on the stack: this runs once per value read
	d.Reset()
	d.Write(bucket)
	d.Write([]byte{0})
	d.Write(key)
	d.Write([]byte{0})
	d.Write(payload)
	return d.Sum64()
}

// Seal returns the stored form of payload under bucket/key.
func Seal(bucket, key, payload []byte) []byte {
	out := make([]byte, 0, len(payload)+sealSize)
	out = append(out, recordVersion)
	out = append(out, payload...)
	return binary.LittleEndian.AppendUint64(out, sum(bucket, key, payload))
}

// Unseal verifies a stored value and returns its payload, which aliases
// value (and so is valid only inside the transaction that read it). A damaged
// value is an ErrCorrupt error naming the bucket and key.
func Unseal(bucket, key, value []byte) ([]byte, error) {
	if len(value) < sealSize || value[0] != recordVersion {
		return nil, corrupt(bucket, key, "bad record header")
	}
	payload := value[1 : len(value)-8]
	if binary.LittleEndian.Uint64(value[len(value)-8:]) != sum(bucket, key, payload) {
		return nil, corrupt(bucket, key, "checksum mismatch")
	}
	return payload, nil
}

// corrupt returns an ErrCorrupt error naming the bucket and key.
func corrupt(bucket, key []byte, why string) error {
	return fmt.Errorf("%w: %s/%q: %s", chain.ErrCorrupt, bucket, key, why)
}

// bucket returns the named bucket of tx, which Open created.
func bucket(tx kv.Tx, name []byte) kv.Bucket {
	b := tx.Bucket(name)
	if b == nil {
		// Open creates every bucket; a missing one means a damaged file.
		panic(fmt.Sprintf("sbxdb: bucket %s missing", name))
	}
	return b
}

// get returns the payload of name/key, nil when it is absent, checking
// its seal.
func get(tx kv.Tx, name, key []byte) ([]byte, error) {
	v := bucket(tx, name).Get(key)
	if v == nil {
		return nil, nil
	}
	return Unseal(name, key, v)
}

// put stores payload sealed under name/key.
func put(tx kv.Tx, name, key, payload []byte) error {
	return bucket(tx, name).Put(key, Seal(name, key, payload))
}
