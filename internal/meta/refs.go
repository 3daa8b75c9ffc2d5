package meta

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/sbxdb/sbxdb/chain"
	bolt "go.etcd.io/bbolt"
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

// pendingEntriesPerWeight is how many manifest entries add 1 to the
// weight of a pending checkpoint.
const pendingEntriesPerWeight = 256

// CheckpointWeight is the weight in the pending set of a checkpoint whose
// manifest has entries entries (Options.RefFoldAfter is in this unit).
func CheckpointWeight(entries uint64) uint64 { return 1 + entries/pendingEntriesPerWeight }

// pendingKey is the refs_pending key of checkpoint id created at createdAt:
// the time first (as in the thread index, xor 2^63 so that the bytes sort
// as the numbers), then the id. The appends of one commit, made at about
// the same time whatever their threads, then land on the bucket's last
// leaf; keyed by id, 30 appends of 30 threads wrote about ten of its leaves.
func pendingKey(createdAt int64, id string) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(id)), uint64(createdAt)^1<<63)
	return append(k, id...)
}

// PendingKey is the refs_pending key of a checkpoint, for tests that forge
// a pending set.
func PendingKey(createdAt int64, id string) []byte { return pendingKey(createdAt, id) }

// pendingID returns the checkpoint id that pending key k names.
func pendingID(k []byte) (string, error) {
	if len(k) <= 8 {
		return "", corrupt(BucketPendingRefs, k, "is not a pending-set key")
	}
	return string(k[8:]), nil
}

// addPending adds a checkpoint (its id, thread, createdAt and number of
// manifest entries) to the pending set; the bucket's sequence is the set's
// weight.
func addPending(tx *bolt.Tx, id, thread string, createdAt int64, entries uint64) error {
	b := bucket(tx, BucketPendingRefs)
	k := pendingKey(createdAt, id)
	if err := b.Put(k, Seal(BucketPendingRefs, k, []byte(thread))); err != nil {
		return err
	}
	return b.SetSequence(b.Sequence() + CheckpointWeight(entries))
}

// PendingWeight returns the weight of the checkpoints whose references are
// not folded yet: 1 for each, plus 1 for each 256 entries of its manifest.
// (Formats 1 and 2 kept their number: a store they wrote weighs its
// pending set once, when it is upgraded.)
func PendingWeight(tx *bolt.Tx) uint64 { return bucket(tx, BucketPendingRefs).Sequence() }

// PendingPerThread reports whether the pending checkpoints number at least
// per for each thread they belong to. It stops reading once the threads
// seen make that impossible: the checkpoints are no more than their
// weight.
func PendingPerThread(tx *bolt.Tx, per int) (bool, error) {
	limit := PendingWeight(tx)
	n := 0
	seen := map[string]bool{}
	c := bucket(tx, BucketPendingRefs).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		thread, err := Unseal(BucketPendingRefs, k, v)
		if err != nil {
			return false, err
		}
		n++
		if !seen[string(thread)] { // the lookup does not allocate
			seen[string(thread)] = true
			if uint64(per*len(seen)) > limit {
				return false, nil
			}
		}
	}
	return n >= per*len(seen), nil
}

// loadPending returns the record of the checkpoint that the pending entry
// k, v names, checking the entry's seal; a missing record is ErrCorrupt.
func loadPending(tx *bolt.Tx, k, v []byte) (*storedRecord, error) {
	if _, err := Unseal(BucketPendingRefs, k, v); err != nil {
		return nil, err
	}
	id, err := pendingID(k)
	if err != nil {
		return nil, err
	}
	r, err := loadRecord(tx, id)
	switch {
	case err != nil:
	case r == nil:
		err = corrupt(BucketPendingRefs, k, "names a missing checkpoint")
	case r.createdAt != pendingCreatedAt(k):
		// Else the readers would count it and a delete, which looks it up
		// by the record's time, would not find it (found by review).
		err = corrupt(BucketPendingRefs, k, "does not carry its checkpoint's createdAt")
	}
	return r, err
}

// isPending reports whether stored checkpoint r is in the pending set.
func isPending(tx *bolt.Tx, r *storedRecord) bool {
	return bucket(tx, BucketPendingRefs).Get(pendingKey(r.createdAt, r.id)) != nil
}

// dropPending removes stored checkpoint r from the pending set, reporting
// whether it was there.
func dropPending(tx *bolt.Tx, r *storedRecord) (bool, error) {
	b := bucket(tx, BucketPendingRefs)
	k := pendingKey(r.createdAt, r.id)
	if b.Get(k) == nil {
		return false, nil
	}
	if err := b.Delete(k); err != nil {
		return false, err
	}
	return true, b.SetSequence(b.Sequence() - min(b.Sequence(), CheckpointWeight(r.entries)))
}

// UpgradePending rewrites the pending set of a format-1 or format-2 store,
// keyed by checkpoint id with empty values, as format 3 keeps it: keyed by
// pendingKey, each naming its thread, the sequence its weight. An entry
// whose record is missing or damaged is kept (keyed with createdAt 0, and
// weighing 1): the upgrade runs in a writable Open, and must not lock out
// the check and repair that report and fix it (found by review).
func UpgradePending(tx *bolt.Tx) error {
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

// WeighPending sets the pending set's weight, and each entry's thread,
// from the checkpoints' records. An entry whose record is missing or
// damaged weighs 1 and is left as it is.
func WeighPending(tx *bolt.Tx) error {
	w, threads, err := weighPending(tx)
	if err != nil {
		return err
	}
	b := bucket(tx, BucketPendingRefs)
	for k, thread := range threads {
		if err := b.Put([]byte(k), Seal(BucketPendingRefs, []byte(k), []byte(thread))); err != nil {
			return err
		}
	}
	return b.SetSequence(w)
}

// weighPending returns the weight of the pending set as its records give
// it, and the thread of each entry (by key) that has a record.
func weighPending(tx *bolt.Tx) (uint64, map[string]string, error) {
	w := uint64(0)
	threads := map[string]string{}
	err := bucket(tx, BucketPendingRefs).ForEach(func(k, _ []byte) error {
		id, err := pendingID(k)
		var r *storedRecord
		if err == nil {
			r, err = loadRecord(tx, id)
		}
		if err != nil || r == nil || r.createdAt != pendingCreatedAt(k) {
			w++
			return nil
		}
		w += CheckpointWeight(r.entries)
		threads[string(k)] = r.threadID
		return nil
	})
	return w, threads, err
}

// pendingCreatedAt returns the createdAt of a pending key (at least 8 bytes).
func pendingCreatedAt(k []byte) int64 { return int64(binary.BigEndian.Uint64(k) ^ 1<<63) }

// CheckPending compares the pending set's weight and its entries' threads
// with what the records give, and describes each difference. They decide
// only when folds run, never a count; WeighPending sets them right.
func CheckPending(tx *bolt.Tx) ([]string, error) {
	w, threads, err := weighPending(tx)
	if err != nil {
		return nil, err
	}
	var out []string
	if have := PendingWeight(tx); have != w {
		out = append(out, fmt.Sprintf("pending set weighs %d, its checkpoints %d", have, w))
	}
	err = bucket(tx, BucketPendingRefs).ForEach(func(k, v []byte) error {
		thread, err := Unseal(BucketPendingRefs, k, v)
		if want, ok := threads[string(k)]; ok && (err != nil || string(thread) != want) {
			out = append(out, fmt.Sprintf("pending entry %q names thread %q, its checkpoint %q", k, thread, want))
		}
		return nil
	})
	return out, err
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
	for _, p := range pc.pending {
		for _, c := range p.chunks {
			chunks[c]++
		}
	}
	if err := addChunkRefs(tx, chunks); err != nil {
		return err
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
	hint := min(b.Sequence(), 1<<26, uint64(rc.tx.Size())/85)
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
func References(tx *bolt.Tx) ([]chain.BlobRef, error) { return NewRefCounter(tx).All() }

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

// PendingCache remembers what the pending checkpoints reference, across
// transactions, for a caller that runs many in a row (the sweep deletes in
// groups, one transaction each, and must count references in each).
// Without it, every transaction would decode every pending checkpoint
// again; folding them instead would make the first group pay for all the
// folding appends would otherwise do. A checkpoint is known by its
// pending-set key and the checksum of its stored record, so an id deleted
// and reused is read again. Not safe for concurrent use.
//
// Pending checkpoints share almost all their content chunks, so the blob
// keys are read per chunk, once, not per checkpoint: 64 pending checkpoints
// of 20,000 files each read about 17,000 chunks, not 320,000, and count
// 100,000 digests, not 1.3 million (a fold took a second before).
type PendingCache struct {
	pending map[string]pendingRecord // by pending-set key
	digests map[chunkRef][][32]byte  // distinct file digests of a content chunk
	counts  map[string]int64         // the pending counts, for the set in pending
}

// chunkRef names a chunk as stored: its id and its seal checksum (an id may
// be deleted and, rarely, reused for other bytes).
type chunkRef struct{ id, sum uint64 }

type pendingRecord struct {
	sum       uint64     // the record's seal checksum
	content   []chunkRef // distinct content chunks, sorted
	inline    [][32]byte // or the distinct digests of an inline manifest
	artifacts []string   // distinct artifact keys
	chunks    []uint64   // distinct chunk ids of every list (chunk counts)
}

// Counter returns a RefCounter for tx that takes the pending counts from
// the cache, reading only checkpoints and chunks it has not seen.
func (pc *PendingCache) Counter(tx *bolt.Tx) (*RefCounter, error) {
	if err := pc.load(tx); err != nil {
		return nil, err
	}
	return &RefCounter{tx: tx, pending: pc.counts}, nil
}

// load brings the cache up to date with tx's pending set.
func (pc *PendingCache) load(tx *bolt.Tx) error {
	if pc.pending == nil {
		pc.pending, pc.digests = map[string]pendingRecord{}, map[chunkRef][][32]byte{}
	}
	changed := false
	seen := 0
	chunks := newChunkCursor(tx)
	looked := map[uint64]chunkRef{} // chunks looked up in tx: ids are stable within it
	err := bucket(tx, BucketPendingRefs).ForEach(func(k, v []byte) error {
		if _, err := Unseal(BucketPendingRefs, k, v); err != nil {
			return err
		}
		seen++
		id, err := pendingID(k)
		if err != nil {
			return err
		}
		rec := bucket(tx, BucketCheckpoints).Get([]byte(id))
		if len(rec) < sealSize {
			return corrupt(BucketPendingRefs, k, "names a missing checkpoint")
		}
		s := binary.LittleEndian.Uint64(rec[len(rec)-8:])
		if c, ok := pc.pending[string(k)]; ok && c.sum == s {
			return nil
		}
		r, err := loadPending(tx, k, v)
		if err != nil {
			return err
		}
		p, err := pc.read(chunks, looked, r)
		if err != nil {
			return err
		}
		p.sum = s
		pc.pending[string(k)] = p
		changed = true
		return nil
	})
	if err != nil {
		// Some records may be in pending and the counts not recomputed:
		// make the next load recount whatever it finds.
		pc.counts = nil
		return err
	}
	if seen != len(pc.pending) { // some are pending no more
		for k := range pc.pending {
			if bucket(tx, BucketPendingRefs).Get([]byte(k)) == nil {
				delete(pc.pending, k)
			}
		}
		changed = true
	}
	if changed || pc.counts == nil {
		pc.recount()
	}
	return nil
}

// read returns what record r references, reading the digests of each
// content chunk the cache does not hold.
func (pc *PendingCache) read(chunks *chunkCursor, looked map[uint64]chunkRef, r *storedRecord) (pendingRecord, error) {
	var err error
	p := pendingRecord{}
	if p.chunks, err = r.chunkIDs(chunks); err != nil {
		return p, err
	}
	if r.inline {
		ds, err := contentDigests(r.content)
		if err != nil {
			return p, corrupt(BucketCheckpoints, []byte(r.id), "inline content: "+err.Error())
		}
		p.inline = ds
	}
	lists, err := r.contentLists(chunks)
	if err != nil {
		return p, err
	}
	var content []uint64
	for _, ids := range lists {
		for i := range ids.len() {
			content = append(content, ids.at(i))
		}
	}
	for _, id := range content {
		if ref, ok := looked[id]; ok { // looked up in this transaction already
			p.content = append(p.content, ref)
			continue
		}
		v := chunks.get(id)
		if len(v) < sealSize {
			_, err := chunks.read(id, r.id) // names the missing chunk
			return p, err
		}
		ref := chunkRef{id, binary.LittleEndian.Uint64(v[len(v)-8:])}
		p.content = append(p.content, ref)
		looked[id] = ref
		if _, ok := pc.digests[ref]; ok {
			continue
		}
		data, err := Unseal(BucketChunks, chunkKey(id), v) // v is the chunk: no second lookup
		if err != nil {
			return p, corrupt(BucketCheckpoints, []byte(r.id), "chunk "+chunkName(id)+" is damaged")
		}
		ds, err := contentDigests(data)
		if err != nil {
			return p, corrupt(BucketCheckpoints, []byte(r.id), "content chunk: "+err.Error())
		}
		pc.digests[ref] = ds
	}
	slices.SortFunc(p.content, compareChunkRefs)
	p.content = slices.Compact(p.content)
	for _, a := range r.artifacts {
		p.artifacts = append(p.artifacts, a.BlobKey)
	}
	slices.Sort(p.artifacts)
	p.artifacts = slices.Compact(p.artifacts)
	return p, nil
}

// contentDigests returns the distinct file digests of content bytes (a
// content chunk, or an inline manifest's content), sorted.
func contentDigests(data []byte) ([][32]byte, error) {
	var ds [][32]byte
	d := Decoder{b: data}
	for len(d.b) > 0 {
		var sum [32]byte
		copy(sum[:], d.Fixed(32))
		d.Uvarint()
		ds = append(ds, sum)
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(ds, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(ds), nil
}

func compareChunkRefs(a, b chunkRef) int {
	if c := cmp.Compare(a.id, b.id); c != 0 {
		return c
	}
	return cmp.Compare(a.sum, b.sum)
}

// recount sums the pending counts from the chunks: the count of key k is
// the number of pending checkpoints with k among their distinct keys. The
// sum over chunks counts a checkpoint once per chunk of it holding k, so
// for the few keys held by more than one chunk (duplicate files) each
// checkpoint's surplus is taken off again.
func (pc *PendingCache) recount() {
	use := map[chunkRef]int64{}
	for _, p := range pc.pending {
		for _, c := range p.content {
			use[c]++
		}
	}
	for ref := range pc.digests { // forget chunks no pending checkpoint uses
		if use[ref] == 0 {
			delete(pc.digests, ref)
		}
	}
	// Per key: the checkpoints counted (once per chunk of theirs holding
	// it), and how many distinct chunks hold it.
	type tally struct {
		n      int64
		chunks int32
	}
	size := 0
	for ref := range use {
		size += len(pc.digests[ref])
	}
	for _, p := range pc.pending {
		size += len(p.inline)
	}
	tallies := make(map[[32]byte]tally, size)
	for ref, n := range use {
		for _, d := range pc.digests[ref] {
			t := tallies[d]
			t.n, t.chunks = t.n+n, t.chunks+1
			tallies[d] = t
		}
	}
	// An inline manifest's digests are distinct and held by no chunk: each
	// counts its checkpoint once.
	for _, p := range pc.pending {
		for _, d := range p.inline {
			t := tallies[d]
			t.n++
			tallies[d] = t
		}
	}
	multi := map[[32]byte]struct{}{} // keys held by more than one chunk
	for d, t := range tallies {
		if t.chunks > 1 {
			multi[d] = struct{}{}
		}
	}
	// Most such keys are one file's key in two versions of its chunk (a
	// neighbour changed), never both in one checkpoint; only a checkpoint
	// holding a key in m > 1 of its chunks (duplicate files) is counted
	// m-1 times too often. One pass over each checkpoint's digests finds
	// them, with a map lookup each.
	if len(multi) > 0 {
		for _, p := range pc.pending {
			var in map[[32]byte]int64
			for _, ref := range p.content {
				for _, d := range pc.digests[ref] {
					if _, ok := multi[d]; ok {
						if in == nil {
							in = map[[32]byte]int64{}
						}
						in[d]++
					}
				}
			}
			for d, m := range in {
				if m > 1 {
					t := tallies[d]
					t.n -= m - 1
					tallies[d] = t
				}
			}
		}
	}
	pc.counts = make(map[string]int64, len(tallies))
	for d, t := range tallies {
		pc.counts[chain.FilePrefix+hex.EncodeToString(d[:])] = t.n
	}
	for _, p := range pc.pending {
		for _, k := range p.artifacts {
			pc.counts[k]++
		}
	}
}
