package chain

import (
	"encoding/binary"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Blob reference counts, folded lazily.
//
// The contract counts, for each blob key, the checkpoints that use it. An
// append adds one to every distinct key of its checkpoint, and consecutive
// checkpoints share almost all their keys; written eagerly, each append
// rewrites one count per key on pages scattered over the refs bucket (the
// benchmarks measured this as most of an append's cost). So an append only
// records its checkpoint id as pending, and FoldRefs later sums the
// increments of all pending checkpoints per key and writes each once. When
// to fold is the caller's policy (the engine folds at the end of a commit
// once enough checkpoints are pending); PendingRefs tells how many are.
//
// Invariant: the count of key k is
//
//	refs[k] + the number of pending checkpoints whose distinct keys include k
//
// and every reader goes through RefCounter, which applies it. A pending
// checkpoint that is deleted before folding simply stops being pending.

func addPending(tx *bolt.Tx, id string) error {
	b := bucket(tx, BucketPendingRefs)
	if err := b.Put([]byte(id), Seal(BucketPendingRefs, []byte(id), nil)); err != nil {
		return err
	}
	return b.SetSequence(b.Sequence() + 1)
}

// PendingRefs returns how many checkpoints' references are not folded yet.
func PendingRefs(tx *bolt.Tx) uint64 { return bucket(tx, BucketPendingRefs).Sequence() }

// dropPending removes id from the pending set, reporting whether it was
// there.
func dropPending(tx *bolt.Tx, id string) (bool, error) {
	b := bucket(tx, BucketPendingRefs)
	if b.Get([]byte(id)) == nil {
		return false, nil
	}
	if err := b.Delete([]byte(id)); err != nil {
		return false, err
	}
	if n := b.Sequence(); n > 0 {
		return true, b.SetSequence(n - 1)
	}
	return true, nil
}

// pendingCounts sums the distinct keys of the pending checkpoints (a
// PendingCache used once).
func pendingCounts(tx *bolt.Tx) (map[string]int64, error) {
	var pc PendingCache
	err := pc.load(tx)
	return pc.counts, err
}

// FoldRefs adds the blob and chunk references of every pending checkpoint
// to the folded counts, one write per distinct key or chunk in key order,
// and empties the pending set. Counts read before and after are the same.
func FoldRefs(tx *bolt.Tx) error {
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
	for _, p := range pc.keys {
		for _, c := range p.chunks {
			chunks[c]++
		}
	}
	ids := make([]uint64, 0, len(chunks))
	for c := range chunks {
		ids = append(ids, c)
	}
	slices.Sort(ids)
	for _, c := range ids {
		if err := addChunkRef(tx, c, chunks[c]); err != nil {
			return err
		}
	}
	if err := tx.DeleteBucket(BucketPendingRefs); err != nil {
		return err
	}
	_, err := tx.CreateBucket(BucketPendingRefs)
	return err
}

// RefCounter reads reference counts in a transaction. Build it once per
// transaction: it decodes the pending checkpoints at most once, and only
// when a folded count cannot answer the question alone.
type RefCounter struct {
	tx      *bolt.Tx
	pending map[string]int64 // nil until needed
}

// NewRefCounter returns a counter for tx.
func NewRefCounter(tx *bolt.Tx) *RefCounter { return &RefCounter{tx: tx} }

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
	if n, err := rc.folded(key); n > 0 || err != nil {
		return n > 0, err
	}
	n, err := rc.Count(key)
	return n > 0, err
}

// All returns every key with a count above 0, in UTF-8 byte order. It
// merges the folded counts (a cursor scan, already in key order) with the
// sorted pending ones, so its cost is one pass over each.
func (rc *RefCounter) All() ([]BlobRef, error) {
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
	hint := min(b.Sequence(), 1<<26, uint64(rc.tx.Size())/85)
	refs := make([]BlobRef, 0, hint+uint64(len(pending)))
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
			refs = append(refs, BlobRef{Key: pending[j], References: rc.pending[pending[j]]})
		}
		if j < len(pending) && pending[j] == string(k) {
			n += rc.pending[pending[j]]
			j++
		}
		spans = append(spans, len(refs), arena.Len())
		arena.Write(k)
		refs = append(refs, BlobRef{References: n})
	}
	for ; j < len(pending); j++ {
		refs = append(refs, BlobRef{Key: pending[j], References: rc.pending[pending[j]]})
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
func References(tx *bolt.Tx) ([]BlobRef, error) { return NewRefCounter(tx).All() }

// RefCount returns the number of checkpoints using key. To read several
// keys, use one RefCounter.
func RefCount(tx *bolt.Tx, key string) (int64, error) { return NewRefCounter(tx).Count(key) }

// AddRef adds delta to the folded count of key, deleting the key when it
// reaches 0. It does not look at pending checkpoints. The bucket's sequence
// counts its keys, as a capacity hint for All (a hint only: stores written
// before it was kept start at 0).
func AddRef(tx *bolt.Tx, key string, delta int64) error {
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

// PendingCache remembers the distinct blob keys of pending checkpoints
// across transactions, for a caller that runs many in a row (the sweep
// deletes in groups, one transaction each, and must count references in
// each). Without it, every transaction would decode every pending
// checkpoint again; folding them instead would make the first group pay
// for all the folding appends would otherwise do. A checkpoint is known by
// its id and the checksum of its stored record, so an id deleted and reused
// is decoded again. Not safe for concurrent use.
type PendingCache struct {
	keys   map[string]pendingKeys // by checkpoint id
	counts map[string]int64       // summed over keys, for the set in keys
}

type pendingKeys struct {
	sum    uint64 // the record's seal checksum
	keys   []string
	chunks []uint64 // distinct
}

// Counter returns a RefCounter for tx that takes the pending counts from
// the cache, decoding only checkpoints it has not seen.
func (pc *PendingCache) Counter(tx *bolt.Tx) (*RefCounter, error) {
	if err := pc.load(tx); err != nil {
		return nil, err
	}
	return &RefCounter{tx: tx, pending: pc.counts}, nil
}

// load brings the cache up to date with tx's pending set.
func (pc *PendingCache) load(tx *bolt.Tx) error {
	if pc.keys == nil {
		pc.keys = map[string]pendingKeys{}
	}
	changed := false
	seen := 0
	err := bucket(tx, BucketPendingRefs).ForEach(func(k, v []byte) error {
		if _, err := Unseal(BucketPendingRefs, k, v); err != nil {
			return err
		}
		seen++
		rec := bucket(tx, BucketCheckpoints).Get(k)
		if len(rec) < sealSize {
			return corrupt(BucketPendingRefs, k, "names a missing checkpoint")
		}
		s := binary.LittleEndian.Uint64(rec[len(rec)-8:])
		if c, ok := pc.keys[string(k)]; ok && c.sum == s {
			return nil
		}
		// Only the keys: a full decode would copy every path and message.
		r, err := loadRecord(tx, string(k))
		if err != nil {
			return err
		}
		keys, err := r.blobKeys(newChunkCursor(tx))
		if err != nil {
			return err
		}
		pc.keys[string(k)] = pendingKeys{sum: s, keys: keys, chunks: r.chunkIDs()}
		changed = true
		return nil
	})
	if err != nil {
		return err
	}
	if seen != len(pc.keys) { // some are pending no more
		for id := range pc.keys {
			if bucket(tx, BucketPendingRefs).Get([]byte(id)) == nil {
				delete(pc.keys, id)
			}
		}
		changed = true
	}
	if changed || pc.counts == nil {
		pc.counts = map[string]int64{}
		for _, p := range pc.keys {
			for _, k := range p.keys {
				pc.counts[k]++
			}
		}
	}
	return nil
}
