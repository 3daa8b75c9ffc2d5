package meta

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Blob reference counts, folded lazily.
//
// The contract counts, for each blob key, the checkpoints that use it. An
// append adds one to every distinct key of its checkpoint, and consecutive
// checkpoints share almost all their keys; written eagerly, each append
// rewrites one count per key on pages scattered over the refs bucket (the
// benchmarks measured this as most of an append's cost). So an append only
// records its checkpoint as pending, and FoldRefs later sums the
// increments of all pending checkpoints per key and writes each once. When
// to fold is the caller's policy (the engine folds at the end of a commit
// once enough is pending); PendingWeight tells how much is.
//
// The pending set is weighed, not counted, because what it costs grows
// with the manifests: a fold writes each distinct key once, and readers
// decode every pending checkpoint. A pending checkpoint weighs
// CheckpointWeight(entries): 1, plus 1 per pendingEntriesPerWeight manifest
// entries. So a bound on the weight lets a thread of small checkpoints
// (each sharing most keys with the last) run many appends between folds,
// and keeps a few huge manifests from piling up.
//
// Invariant: the count of key k is
//
//	refs[k] + the number of pending checkpoints whose distinct keys include k
//
// and every reader goes through RefCounter, which applies it. A pending
// checkpoint that is deleted before folding simply stops being pending.

// RefCounter reads reference counts in a transaction. Build it once per
// transaction: it decodes the pending checkpoints at most once, and only
// when a folded count cannot answer the question alone.
type RefCounter struct {
	tx      kv.Tx
	pending map[string]int64 // nil until needed
}

// NewRefCounter returns a counter for tx.
func NewRefCounter(tx kv.Tx) *RefCounter { return &RefCounter{tx: tx} }

func (rc *RefCounter) loadPending() error {
	if rc.pending != nil {
		return nil
	}
	p, err := pendingCounts(rc.tx)
	rc.pending = p
	return err
}

func (rc *RefCounter) folded(key string) (int64, error) {
	return decodeCountIn(BucketRefs, []byte(key), bucket(rc.tx, BucketRefs).Get([]byte(key)))
}

// Count returns the number of checkpoints using key.
func (rc *RefCounter) Count(key string) (int64, error) {
	n, err := rc.folded(key)
	if err == nil {
		err = rc.loadPending()
	}
	return n + rc.pending[key], err
}

// Referenced reports whether any checkpoint uses key. A folded count above
// 0 answers it without decoding pending checkpoints.
func (rc *RefCounter) Referenced(key string) (bool, error) {
	n, err := rc.folded(key)
	if n > 0 || err != nil {
		return n > 0, err
	}
	if err := rc.loadPending(); err != nil {
		return false, err
	}
	return n+rc.pending[key] > 0, nil
}

// All returns every key with a count above 0, in UTF-8 byte order. It
// merges the folded counts (a cursor scan, already in key order) with the
// sorted pending ones, so its cost is one pass over each.
func (rc *RefCounter) All() ([]chain.BlobRef, error) {
	if err := rc.loadPending(); err != nil {
		return nil, err
	}
	pending := make([]string, 0, len(rc.pending))
	for k := range rc.pending {
		pending = append(pending, k)
	}
	slices.Sort(pending)
	b := bucket(rc.tx, BucketRefs)
	// The bucket's sequence counts its keys (AddRef keeps it): a capacity
	// hint that spares a million-key scan its slice regrowths.
	// No checksum covers the sequence, so it is bounded by what the file
	// can hold: a key and its count take at least 85 bytes (found by
	// FuzzDatabasePage: a damaged sequence made this allocate gigabytes).
	// Another backend has no file size to bound it by: a hint of a million
	// keys at most.
	limit := uint64(1 << 20)
	if btx := kv.BoltTx(rc.tx); btx != nil {
		limit = min(1<<26, uint64(btx.Size())/85)
	}
	hint := min(b.Sequence(), limit)
	refs := make([]chain.BlobRef, 0, hint+uint64(len(pending)))
	// The folded keys are copied into one arena string rather than one
	// allocation each (a million of them is most of the scan's cost); a
	// folded entry's Key is set from its span once the arena is final.
	var arena strings.Builder
	arena.Grow(int(hint) * 88) // a blob key is 85 or 89 bytes
	spans := make([]int, 0, 2*hint)
	j := 0
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		n, err := decodeCountIn(BucketRefs, k, v)
		if err != nil {
			return nil, err
		}
		for ; j < len(pending) && pending[j] < string(k); j++ {
			refs = append(refs, chain.BlobRef{Key: pending[j], References: rc.pending[pending[j]]})
		}
		if j < len(pending) && pending[j] == string(k) {
			n += rc.pending[pending[j]]
			j++
		}
		spans = append(spans, len(refs), arena.Len())
		arena.Write(k)
		refs = append(refs, chain.BlobRef{References: n})
	}
	for ; j < len(pending); j++ {
		refs = append(refs, chain.BlobRef{Key: pending[j], References: rc.pending[pending[j]]})
	}
	keys := arena.String()
	for i := 0; i < len(spans); i += 2 {
		end := len(keys)
		if i+3 < len(spans) {
			end = spans[i+3]
		}
		refs[spans[i]].Key = keys[spans[i+1]:end]
	}
	return refs, nil
}

// References returns every blob key with a count above 0, in UTF-8 byte
// order.
func References(tx kv.Tx) ([]chain.BlobRef, error) { return NewRefCounter(tx).All() }

// RefCount returns the number of checkpoints using key. To read several
// keys, use one RefCounter.
func RefCount(tx kv.Tx, key string) (int64, error) { return NewRefCounter(tx).Count(key) }

// AddRef adds delta to the folded count of key, deleting the key when it
// reaches 0. It does not look at pending checkpoints. The bucket's sequence
// counts its keys, as a capacity hint for All (a hint only: stores written
// before it was kept start at 0).
func AddRef(tx kv.Tx, key string, delta int64) error {
	b := bucket(tx, BucketRefs)
	old, err := decodeCountIn(BucketRefs, []byte(key), b.Get([]byte(key)))
	if err != nil {
		return err
	}
	n := old + delta
	if n <= 0 {
		if old > 0 && b.Sequence() > 0 {
			if err := b.SetSequence(b.Sequence() - 1); err != nil {
				return err
			}
		}
		return b.Delete([]byte(key))
	}
	if old == 0 {
		if err := b.SetSequence(b.Sequence() + 1); err != nil {
			return err
		}
	}
	return put(tx, BucketRefs, []byte(key), binary.AppendUvarint(nil, uint64(n)))
}

// decodeCountIn unseals and decodes a stored count of bucket name (0 when
// absent).
func decodeCountIn(name, key, v []byte) (int64, error) {
	if v == nil {
		return 0, nil
	}
	p, err := Unseal(name, key, v)
	if err != nil {
		return 0, err
	}
	n, w := binary.Uvarint(p)
	if w != len(p) {
		return 0, corrupt(name, key, "bad count")
	}
	return int64(n), nil
}
