package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// recKnown fails the test for a violated property that these targets once
// found as an engine bug, now fixed and kept as a regression seed; the name
// ties the failure to its seed files and to the fix:
//
//	get-unvalidated  Get and List returned a decoded record that fails validation
//	list-thread      List returned a record of another thread
//	check-aborts     Check failed instead of reporting a damaged blob index
//	symlink-chain    Restore accepted symlinks that escape through another link
//	refs-hint        BlobReferences allocated by a damaged bucket sequence
//	open-oversize    cas.Store.Open allocated an index entry's claimed size
//	threads-unsealed Threads returned bucket keys without checking their seals
func recKnown(t *testing.T, bug, format string, args ...any) {
	t.Helper()
	t.Errorf("["+bug+"] "+format, args...)
}

// recValid checks a checkpoint read back from the store against the rules
// an append applies: identifiers, createdAt, reason, manifest, artifacts,
// conversation.
func recValid(cp *chain.Checkpoint) error {
	return chain.ValidateAppend(chain.AppendInput{Checkpoint: cp, ExpectedHeadID: cp.ParentID, Writer: chain.Writer{ThreadID: cp.ThreadID}})
}

// recIndexKey is the thread_index key of a checkpoint (internal/meta/schema.go):
// threadId 0x00 be64(createdAt xor 2^63) id.
func recIndexKey(thread string, createdAt int64, id string) []byte {
	k := append([]byte(thread), 0)
	k = binary.BigEndian.AppendUint64(k, uint64(createdAt)^1<<63)
	return append(k, id...)
}

// recLargestChunk is the size of the largest chunk.
func recLargestChunk(chunks map[uint64][]byte) int {
	n := 0
	for _, c := range chunks {
		n = max(n, len(c))
	}
	return n
}

// recMaxAlloc is what decoding n bytes may allocate: a manifest entry
// takes at least 3 bytes and its Go value 80, a message at least 1 byte
// and its slice header 24; digests grow 32 bytes to 85 of hex key. Any
// forged count or length beyond that is a failure.
func recMaxAlloc(n int) uint64 { return 40*uint64(n) + 64<<10 }

// recDecode runs the record decoders on arbitrary bytes (part (a) of
// FuzzRecord).
func recDecode(t *testing.T, data []byte, chunks map[uint64][]byte) {
	var cp *chain.Checkpoint
	var err error
	if n := blobAllocs(func() { cp, err = meta.DecodeCheckpoint(data) }); n > recMaxAlloc(len(data)) {
		t.Errorf("DecodeCheckpoint of %d bytes allocated %d bytes", len(data), n)
	}
	if err == nil {
		// Re-encoding is canonical (minimal varints), so never longer, and
		// decodes to the same checkpoint.
		enc := meta.EncodeCheckpoint(cp)
		cp2, err := meta.DecodeCheckpoint(enc)
		switch {
		case err != nil:
			t.Errorf("re-encoded checkpoint does not decode: %v", err)
		case !reflect.DeepEqual(cp, cp2):
			t.Errorf("decode(encode(decode(b))) differs:\n%+v\n%+v", cp, cp2)
		case len(enc) > len(data):
			t.Errorf("re-encoding is longer (%d bytes) than the record (%d)", len(enc), len(data))
		}
	}

	// The same bytes as a format-2 record over the template's chunks. A
	// record may name a chunk once per 8 of its bytes, so the bound counts
	// each 8 bytes as the largest chunk.
	budget := recMaxAlloc(len(data) + len(data)/8*recLargestChunk(chunks))
	var rec *chain.Checkpoint
	if n := blobAllocs(func() { rec, err = meta.DecodeRecord(data, chunks) }); n > budget {
		t.Errorf("DecodeRecord of %d bytes allocated %d bytes", len(data), n)
	}
	if err == nil {
		// The keys reference counting reads are the checkpoint's keys.
		keys, err := meta.DecodeRecordBlobKeys(data, chunks)
		if err != nil || !slices.Equal(keys, rec.BlobKeys()) {
			t.Errorf("DecodeRecordBlobKeys = %v, %v; DecodeRecord gave %v", keys, err, rec.BlobKeys())
		}
		// Re-encoding decodes to the same checkpoint (over its own chunks).
		enc, own := meta.EncodeRecord(rec)
		rec2, err := meta.DecodeRecord(enc, own)
		switch {
		case err != nil:
			t.Errorf("re-encoded record does not decode: %v", err)
		case !reflect.DeepEqual(rec, rec2):
			t.Errorf("decode(encode(decode(b))) differs:\n%+v\n%+v", rec, rec2)
		}
	}
	if n := blobAllocs(func() { meta.DecodeMessages(data) }); n > recMaxAlloc(len(data)) {
		t.Errorf("DecodeMessages of %d bytes allocated %d bytes", len(data), n)
	}

	// A length prefix: the bytes it names, or an error when it claims more
	// than there are (2^60 included) — never an allocation.
	d := meta.NewDecoder(data)
	var s string
	if n := blobAllocs(func() { s = d.String() }); n > recMaxAlloc(len(data)) {
		t.Errorf("Decoder.String of %d bytes allocated %d bytes", len(data), n)
	}
	l, w := binary.Uvarint(data)
	switch {
	case w <= 0 || l > uint64(len(data)-w):
		if s != "" || d.Err() == nil {
			t.Errorf("Decoder.String accepted a length of %d with %d bytes left: %q", l, len(data)-max(w, 0), s)
		}
	case s != string(data[w:w+int(l)]):
		t.Errorf("Decoder.String = %q, want %q", s, data[w:w+int(l)])
	}
	d = meta.NewDecoder(data)
	c := d.Count(1)
	if w > 0 && l <= uint64(len(data)-w) && c != int(l) || c > len(data) {
		t.Errorf("Decoder.Count(1) = %d for a count of %d with %d bytes left", c, l, len(data)-max(w, 0))
	}

	// Unseal: the payload between the version byte and the checksum.
	p, err := meta.Unseal(meta.BucketCheckpoints, []byte("k"), data)
	if err == nil && !bytes.Equal(p, data[1:len(data)-8]) {
		t.Errorf("Unseal returned %q, not the payload", p)
	}
	if err != nil && !errors.Is(err, chain.ErrCorrupt) {
		t.Errorf("Unseal error does not match ErrCorrupt: %v", err)
	}
}

// FuzzRecord hands the record decoders, and then a real store, arbitrary
// bytes as a stored checkpoint record.
//
// (a) meta.DecodeCheckpoint, meta.DecodeMessages, the Decoder's length
// prefixes and meta.Unseal never panic, never allocate more than 40 times
// their input (plus 64 KiB), refuse any length or count beyond the bytes
// left; a decoded record re-encodes canonically to the same checkpoint.
//
// (b) data is stored as the value of a checkpoint id (mode bit 0 clear:
// data is the whole stored value; set: data is the payload, sealed with
// meta.Seal so that the decoder runs on it), with a thread_index key so
// that List finds it, optionally (bit 1) as a pending reference count and
// (bit 2) as its thread's head. The id and thread are taken from the
// payload when it starts like a record, else fixed. Then, through
// engine.Open: Get returns the stored record exactly, and only when it
// decodes and passes append's validation — a record that breaks the
// manifest rules is an error, never returned as good; List returns only
// such records, of the asked thread; BlobReferences equals a recount;
// Restore succeeds only for a record Get returns, writes exactly its
// tree, and on failure leaves nothing behind; Threads and Check do not
// panic; no exec takes over 5 s or leaves the file lock held.
func FuzzRecord(f *testing.F) {
	fx := blobTemplate(f)
	record := func(cp *chain.Checkpoint) []byte {
		rec, _ := meta.EncodeRecord(cp)
		return rec
	}
	for _, id := range fx.cpIDs {
		f.Add(uint8(1), record(fx.cps[id]))
		f.Add(uint8(1), meta.EncodeCheckpoint(fx.cps[id])) // format 1
	}
	f.Add(uint8(0), fx.records["c1"])
	f.Add(uint8(7), record(fx.cps["c3"]))
	bad := fx.cps["c1"].Clone()
	bad.ID, bad.ParentID = "z1", ""
	bad.Files = append(bad.Files, chain.Entry{Path: "../x", Kind: chain.KindFile, BlobKey: fx.small[0], Size: 6})
	badRec, _ := meta.EncodeRecord(bad) // its chunks are not stored
	f.Add(uint8(1), badRec)
	// Entry and message counts of 2^60.
	var e meta.Encoder
	for _, s := range []string{"z2", "th-z", "", "automatic", "", ""} {
		e.String(s)
	}
	e.Varint(1)        // createdAt
	e.Uvarint(1)       // fullSize
	e.Uvarint(1 << 60) // entries
	e.Uvarint(0)       // groups
	e.Uvarint(0)       // artifacts
	e.Uvarint(1 << 60) // messages
	f.Add(uint8(1), e.Bytes())

	work := f.TempDir()
	store := filepath.Join(work, "store")
	blobStage(f, fx, store)
	// The chunks the template store holds, by id: what a forged record's
	// chunk ids can name (a deleted checkpoint's are gone).
	chunks := map[uint64][]byte{}
	blobRawUpdate(f, store, func(tx *bolt.Tx) error {
		return tx.Bucket(meta.BucketChunks).ForEach(func(k, v []byte) error {
			p, err := meta.Unseal(meta.BucketChunks, k, v)
			chunks[binary.BigEndian.Uint64(k)] = bytes.Clone(p)
			return err
		})
	})
	rst := rstNewArea(f, work)

	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		recDecode(t, data, chunks)
		blobWithin(t, func() { recStore(t, fx, chunks, store, rst, mode, data) })
	})
}

// recStore is part (b) of FuzzRecord.
func recStore(t *testing.T, fx *blobFixture, chunks map[uint64][]byte, store string, rst *rstArea, mode uint8, data []byte) {
	sealed := mode&1 != 0
	payload := data
	if !sealed {
		payload = nil
		if len(data) >= 9 {
			payload = data[1 : len(data)-8]
		}
	}
	id, thread, createdAt := "fz", "fz-t", int64(0)
	if payload != nil {
		if s := meta.NewDecoder(payload).String(); s != "" && len(s) <= bolt.MaxKeySize/2 {
			id = s
		}
	}
	decoded, decErr := meta.DecodeRecord(payload, chunks)
	if decErr == nil && decoded.ThreadID != "" && len(decoded.ThreadID) <= bolt.MaxKeySize/2 {
		thread, createdAt = decoded.ThreadID, decoded.CreatedAt
	}
	value := data
	if sealed {
		value = meta.Seal(meta.BucketCheckpoints, []byte(id), data)
	}
	// What GetCheckpoint can return: the record, if its seal holds, it
	// decodes, and it names its own id.
	var stored *chain.Checkpoint
	if _, err := meta.Unseal(meta.BucketCheckpoints, []byte(id), value); err == nil && decErr == nil && decoded.ID == id {
		stored = decoded
	}
	good := stored != nil && recValid(stored) == nil
	// What counting a pending record reads: its blob keys alone.
	var pendingKeys []string
	if _, err := meta.Unseal(meta.BucketCheckpoints, []byte(id), value); err == nil && payload != nil && meta.NewDecoder(payload).String() == id {
		pendingKeys, _ = meta.DecodeRecordBlobKeys(payload, chunks)
	}

	blobReset(t, fx, store, fx.db, "")
	blobRawUpdate(t, store, func(tx *bolt.Tx) error {
		if err := tx.Bucket(meta.BucketCheckpoints).Put([]byte(id), value); err != nil {
			return err
		}
		ik := recIndexKey(thread, createdAt, id)
		if err := tx.Bucket(meta.BucketThreadIndex).Put(ik, meta.Seal(meta.BucketThreadIndex, ik, nil)); err != nil {
			return err
		}
		if mode&2 != 0 {
			b := tx.Bucket(meta.BucketPendingRefs)
			pk := meta.PendingKey(createdAt, id)
			if b.Get(pk) == nil {
				if err := b.SetSequence(b.Sequence() + 1); err != nil {
					return err
				}
			}
			if err := b.Put(pk, meta.Seal(meta.BucketPendingRefs, pk, []byte(thread))); err != nil {
				return err
			}
		}
		if mode&4 != 0 {
			return tx.Bucket(meta.BucketHeads).Put([]byte(thread), meta.Seal(meta.BucketHeads, []byte(thread), []byte(id)))
		}
		return nil
	})

	db, err := blobOpen(t, store)
	if err != nil {
		t.Errorf("Open of a store with one forged record: %v", err)
		return
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		blobLockFree(t, store)
	}()

	// Get.
	var got *chain.Checkpoint
	getOK := false
	if chain.CheckID("id", id) == nil {
		got, err = db.Get(blobCtx, id)
		switch {
		case err != nil:
			if good {
				t.Errorf("Get of a valid record %q: %v", id, err)
			}
			if stored == nil && !errors.Is(err, chain.ErrCorrupt) {
				t.Errorf("Get of an undecodable record: error does not match ErrCorrupt: %v", err)
			}
		case got == nil:
			t.Errorf("Get %q: nil, nil for a stored record", id)
		case stored == nil:
			t.Errorf("Get %q returned a record that does not unseal or decode: %+v", id, got)
		case !reflect.DeepEqual(got, stored):
			t.Errorf("Get %q returned\n%+v\nnot the stored\n%+v", id, got, stored)
		default:
			getOK = true
			if err := recValid(got); err != nil {
				recKnown(t, "get-unvalidated", "Get %q returned a record that fails validation: %v", id, err)
			}
		}
	}

	// List.
	if chain.CheckID("threadId", thread) == nil {
		list, err := db.List(blobCtx, thread)
		if err == nil {
			for _, cp := range list {
				if cp.ThreadID != thread {
					recKnown(t, "list-thread", "List(%q) returned checkpoint %q of thread %q", thread, cp.ID, cp.ThreadID)
				}
				if err := recValid(cp); err != nil {
					recKnown(t, "get-unvalidated", "List(%q) returned %q, which fails validation: %v", thread, cp.ID, err)
				}
				if want, ok := fx.cps[cp.ID]; cp.ID != id && ok && !reflect.DeepEqual(cp, want) {
					t.Errorf("List(%q) returned %q changed:\n%+v", thread, cp.ID, cp)
				}
			}
		} else if _, clash := fx.cps[id]; good && !clash {
			// (When id is a template checkpoint's, that one's index key
			// names the forged record too, and an error is fair.)
			t.Errorf("List(%q) with a valid forged record: %v", thread, err)
		}
	}

	// BlobReferences: the template's folded counts, plus one per distinct
	// key of every pending checkpoint (the forged one instead of a
	// template record it replaced).
	refs, err := db.BlobReferences(blobCtx)
	pendingIDs := map[string]bool{}
	for p := range fx.pending {
		pendingIDs[p] = true
	}
	if mode&2 != 0 {
		pendingIDs[id] = true
	}
	// A template entry for the forged id now names the forged record; its
	// key keeps the template's time, so unless the forged record has it the
	// entry is damage, and an error is fair.
	at, stale := fx.pending[id]
	stale = stale && (decErr != nil || decoded.CreatedAt != at || mode&2 != 0 && createdAt != at)
	want := map[string]int64{}
	for k, n := range fx.folded {
		want[k] = n
	}
	countable := !stale
	for p := range pendingIDs {
		keys := pendingKeys
		if p != id {
			keys = fx.cps[p].BlobKeys()
		} else if keys == nil {
			countable = false
			continue
		}
		for _, k := range keys {
			want[k]++
		}
	}
	switch {
	case err == nil && !countable:
		t.Errorf("BlobReferences counted a pending checkpoint whose record does not decode: %v", refs)
	case err == nil:
		gotRefs := map[string]int64{}
		for _, r := range refs {
			gotRefs[r.Key] = r.References
		}
		if !reflect.DeepEqual(gotRefs, want) {
			t.Errorf("BlobReferences = %v, want %v", gotRefs, want)
		}
		if !slices.IsSortedFunc(refs, func(a, b chain.BlobRef) int { return strings.Compare(a.Key, b.Key) }) {
			t.Errorf("BlobReferences not sorted: %v", refs)
		}
	case countable && good:
		t.Errorf("BlobReferences with a valid forged record: %v", err)
	}

	db.Threads(blobCtx)
	db.Head(blobCtx, thread)
	db.Check(blobCtx, sbxdb.CheckStoreOptions{})

	// Restore.
	if chain.CheckID("id", id) == nil {
		ok := rst.restore(t, db, id, nil, 0)
		switch {
		case ok && !getOK:
			t.Errorf("Restore of %q succeeded though Get failed", id)
		case ok:
			rst.checkTree(t, got.Files, fx.blobs)
			rst.checkLinks(t, got.Files)
			if err := chain.ValidateFiles(got.Files); err != nil {
				t.Errorf("Restore wrote a manifest that fails validation: %v", err)
			}
		}
		rst.clean(t)
	}
}

// recPageSeeds returns offsets in the template's bbolt file worth damaging:
// the meta pages' root and high-water fields, the first leaf and branch
// pages' headers and first element, and the headers (root page and
// sequence, uncovered by any checksum) of the refs, refs_pending and
// thread_index buckets in the root bucket's leaf.
func recPageSeeds(db []byte) (pageSize int, seeds map[string]int) {
	le := binary.LittleEndian
	seeds = map[string]int{}
	pageSize = int(le.Uint32(db[16+8:]))
	if pageSize < 1024 || len(db) < 2*pageSize {
		return pageSize, seeds
	}
	meta := 16 // the meta with the higher txid
	if le.Uint64(db[pageSize+16+48:]) > le.Uint64(db[16+48:]) {
		meta = pageSize + 16
	}
	seeds["meta root"] = meta + 16
	seeds["meta high-water mark"] = meta + 40
	root := int(le.Uint64(db[meta+16:]))
	hwm := int(le.Uint64(db[meta+40:]))
	for id := 2; id < hwm && (id+1)*pageSize <= len(db); id++ {
		p := id * pageSize
		switch le.Uint16(db[p+8:]) {
		case 0x01:
			if _, ok := seeds["branch"]; !ok {
				seeds["branch"] = p
			}
		case 0x02:
			if _, ok := seeds["leaf"]; !ok && id != root {
				seeds["leaf"] = p
			}
		}
	}
	if p := root * pageSize; p+16 <= len(db) && le.Uint16(db[p+8:]) == 0x02 {
		seeds["root leaf"] = p
		for i := range int(le.Uint16(db[p+10:])) {
			e := p + 16 + 16*i
			pos, ksize := int(le.Uint32(db[e+4:])), int(le.Uint32(db[e+8:]))
			k := db[e+pos : e+pos+ksize]
			switch string(k) {
			case "refs", "refs_pending", "thread_index":
				seeds[string(k)+" sequence"] = e + pos + ksize + 8
				seeds[string(k)+" root page"] = e + pos + ksize
			}
		}
	}
	return pageSize, seeds
}

// recMaxPageAlloc bounds what opening and reading the small template store
// may allocate, however damaged.
const recMaxPageAlloc = 256 << 20

// FuzzDatabasePage opens a copy of the template store (five checkpoints
// over two threads, one deleted, a transcript, folded and pending
// reference counts, packed and large blobs) whose bbolt file has patch
// written at off (growing the file if need be) after being cut to
// trunc % size bytes (trunc 0: not cut), and reads it all: Threads, Head,
// List, LoadThread for every thread, Get of every checkpoint ever stored,
// BlobReferences, every small blob's bytes and every large blob's index
// entry, and db.Check.
//
// It proves that a damaged file is refused or read without a panic, within
// 5 s and 256 MiB of allocation, and that whatever is read is right: a
// checkpoint, head, transcript, thread or blob reference is one the
// template stored (at some point: freed pages may hold older values) and a
// blob's bytes are exact; and that no Open or Close leaves the file lock
// held.
func FuzzDatabasePage(f *testing.F) {
	fx := blobTemplate(f)
	size := uint64(len(fx.db))
	pageSize, seeds := recPageSeeds(fx.db)
	ps := uint64(pageSize)
	f.Add(uint64(16), []byte{0xff}, uint64(0))                          // meta 0 magic
	f.Add(ps+16, []byte{0xff}, uint64(0))                               // meta 1 magic
	f.Add(uint64(0), bytes.Repeat([]byte{0xa5}, 2*pageSize), uint64(0)) // both metas
	for _, name := range slices.Sorted(maps.Keys(seeds)) {
		off := seeds[name]
		if strings.HasSuffix(name, "sequence") {
			// 2^22, not more: a bucket sequence is a capacity hint (refs),
			// and the seeds must stay quick to run.
			f.Add(uint64(off), []byte{0, 0, 0x40, 0, 0, 0, 0, 0}, uint64(0))
			continue
		}
		f.Add(uint64(off), []byte{0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0}, uint64(0))
		f.Add(uint64(off), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, uint64(0))
	}
	for _, name := range []string{"leaf", "branch", "root leaf"} {
		if off, ok := seeds[name]; ok {
			f.Add(uint64(off+12), []byte{0xff, 0xff, 0xff, 0x7f}, uint64(0)) // overflow count
			f.Add(uint64(off+8), []byte{0x10}, uint64(0))                    // page type
			f.Add(uint64(off+10), []byte{0xff, 0x0f}, uint64(0))             // element count
			f.Add(uint64(off+16+4), []byte{0xf0, 0xff}, uint64(0))           // first element's offset
			f.Add(uint64(off+40), []byte("\x00\x01\x02"), uint64(0))
		}
	}
	for _, cut := range []uint64{size / 2, 2048, ps*2 + 1, size - ps, size - 1} {
		f.Add(uint64(0), []byte{}, cut)
	}

	work := f.TempDir()
	store := filepath.Join(work, "store")
	blobStage(f, fx, store)
	threads := map[string]bool{}
	for _, th := range fx.threads {
		threads[th] = true
	}
	f.Fuzz(func(t *testing.T, off uint64, patch []byte, trunc uint64) {
		b := bytes.Clone(fx.db)
		if trunc != 0 {
			b = b[:trunc%size]
		}
		o := int(off % uint64(len(b)+1))
		if o+len(patch) > len(b) {
			b = append(b, make([]byte, o+len(patch)-len(b))...)
		}
		copy(b[o:], patch)
		blobReset(t, fx, store, b, "")
		blobWithin(t, func() {
			var db *engine.DB
			var known uint64
			n := blobAllocs(func() {
				var err error
				if db, err = blobOpen(t, store); err != nil {
					t.Logf("Open: %v", err)
					return
				}
				defer func() {
					if err := db.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				}()
				known = recReadAll(t, fx, db, threads)
			})
			if n-known > recMaxPageAlloc {
				t.Errorf("opening and reading the store allocated %d MiB", (n-known)>>20)
			}
			blobLockFree(t, store)
		})
	})
}

// recReadAll is FuzzDatabasePage's reading of a damaged store. It returns
// the bytes allocated by calls that failed the refs-hint check (reported
// already, so the total below does not count them twice).
func recReadAll(t *testing.T, fx *blobFixture, db *engine.DB, threads map[string]bool) (known uint64) {
	sameCP := func(what string, cp *chain.Checkpoint) {
		if want := fx.cps[cp.ID]; want == nil || !reflect.DeepEqual(cp, want) {
			t.Errorf("%s returned a checkpoint the template never stored: %+v", what, cp)
		}
	}
	if got, err := db.Threads(blobCtx); err == nil {
		for _, th := range got {
			if !threads[th] {
				recKnown(t, "threads-unsealed", "Threads returned %q, which the template never had (all: %q)", th, got)
			}
		}
	}
	for _, th := range fx.threads {
		if head, err := db.Head(blobCtx, th); err == nil && head != "" && (fx.cps[head] == nil || fx.cps[head].ThreadID != th) {
			t.Errorf("Head(%q) = %q, never a checkpoint of that thread", th, head)
		}
		if list, err := db.List(blobCtx, th); err == nil {
			for _, cp := range list {
				sameCP("List("+th+")", cp)
				if cp.ThreadID != th {
					t.Errorf("List(%q) returned %q of thread %q", th, cp.ID, cp.ThreadID)
				}
			}
		}
		if msgs, err := db.LoadThread(blobCtx, th); err == nil && len(msgs) > 0 {
			var got []string
			for _, m := range msgs {
				got = append(got, string(m))
			}
			if !slices.Equal(got, fx.messages[th]) {
				t.Errorf("LoadThread(%q) = %q, never saved", th, got)
			}
		}
	}
	for _, id := range append(slices.Clone(fx.cpIDs), "nope") {
		if cp, err := db.Get(blobCtx, id); err == nil && cp != nil {
			sameCP("Get("+id+")", cp)
		}
	}
	// BlobReferences and Check read the refs bucket's sequence as a
	// capacity hint: measured alone, so that a regression of refs-hint does not hide
	// other allocations.
	var refs []chain.BlobRef
	err := errors.New("not read")
	if n := blobAllocs(func() {
		refs, err = db.BlobReferences(blobCtx)
	}); n > recMaxPageAlloc {
		recKnown(t, "refs-hint", "BlobReferences allocated %d MiB (the refs bucket's sequence, a capacity hint, is damaged?)", n>>20)
		known += n
	}
	if err == nil {
		for _, r := range refs {
			if !fx.refKeys[r.Key] || r.References <= 0 || r.References > int64(len(fx.cps)) {
				t.Errorf("BlobReferences returned %+v, never a count of the template", r)
			}
		}
	}
	for _, key := range fx.keys {
		want := fx.blobs[key]
		if fx.large[key] {
			if info, err := db.Blobs().Head(blobCtx, key); err == nil && info.Size != int64(len(want)) {
				t.Errorf("Head %s: size %d, want %d", key, info.Size, len(want))
			}
			continue
		}
		got, err := db.Blobs().Get(blobCtx, key)
		switch {
		case err == nil && !bytes.Equal(got, want):
			t.Errorf("Get %s returned %d wrong bytes", key, len(got))
		case err != nil && !errors.Is(err, chain.ErrCorrupt):
			blobCheckErr(t, "Get", key, err)
		}
	}
	db.Blobs().List(blobCtx, "")
	if n := blobAllocs(func() {
		db.Check(blobCtx, sbxdb.CheckStoreOptions{})
	}); n > recMaxPageAlloc {
		recKnown(t, "refs-hint", "Check allocated %d MiB (the refs bucket's sequence, a capacity hint, is damaged?)", n>>20)
		known += n
	}
	return known
}
