package engine_test

// Resource bounds. Hostile but valid inputs — a
// 1,000,000-entry manifest, a 100 MB conversation, 4096-byte identifiers,
// 100,000 threads — either work with memory proportional to the input or
// fail with a documented limit error (chain.MaxIDBytes, chain.MaxRecordBytes,
// both *chain.LimitError matching chain.ErrTooLarge).
//
// Memory is measured per operation as the bytes it allocated
// (runtime.MemStats.TotalAlloc delta), which bounds the peak heap growth
// from above and does not depend on when the collector runs; the sampled
// peak (HeapAlloc every 2 ms) is logged beside it. Nothing asserts a time.
//
// Sizes (limSize): the full sizes, under SBXDB_LONG=1 in any mode, take
// most of a minute on 2 cores (peak RSS 2.3 GB), and SBXDB_LONG=1 adds the
// case that stores a record of exactly chain.MaxRecordBytes. go test runs
// a tenth of them, every operation and bound the same. Under the
// race detector the full sizes take 3 minutes (every byte json.Valid and
// the codec touch is instrumented), and CI runs go test -race ./... on 2
// cores, so race and -short runs use small sizes.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// limSize returns full under SBXDB_LONG=1, small under -short or the race
// detector, and quick otherwise (see the file comment).
func limSize(t *testing.T, small, quick, full int) int {
	if raceEnabled && !testkit.Long(t) {
		return small
	}
	return testkit.ScaleShort(t, small, quick, full)
}

// limCostly reports whether the cases that only repeat a refusal at a
// larger cost run: not under the race detector or -short, unless
// SBXDB_LONG=1.
func limCostly(t *testing.T) bool {
	return testkit.Long(t) || (!raceEnabled && !testing.Short())
}

// limUse is what one operation cost.
type limUse struct {
	alloc uint64 // bytes allocated (an upper bound of the peak heap growth)
	peak  uint64 // sampled peak of HeapAlloc above the starting heap
	dur   time.Duration
}

// limMeasure runs fn and returns what it allocated and its sampled peak.
func limMeasure(fn func()) limUse {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, total := ms.HeapAlloc, ms.TotalAlloc
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > base && m.HeapAlloc-base > peak.Load() {
				peak.Store(m.HeapAlloc - base)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	fn()
	d := time.Since(start)
	close(stop)
	<-done
	runtime.ReadMemStats(&ms)
	return limUse{alloc: ms.TotalAlloc - total, peak: peak.Load(), dur: d}
}

// limSlack covers what an operation allocates whatever its input: bbolt's
// transaction and page buffers, cursors, the committer.
const limSlack = 1 << 20

// limBound logs u against the input size and fails if the operation
// allocated more than factor times it (plus limSlack).
func limBound(t *testing.T, op string, u limUse, input int, factor float64) {
	t.Helper()
	t.Logf("%-22s %7.3fs  alloc %7.1f MB (%4.2fx)  peak %7.1f MB (%4.2fx)  of %.1f MB",
		op, u.dur.Seconds(), mb(u.alloc), float64(u.alloc)/float64(input), mb(u.peak), float64(u.peak)/float64(input), mb(uint64(input)))
	if limit := factor*float64(input) + limSlack; float64(u.alloc) > limit {
		t.Errorf("%s allocated %.1f MB, more than %.0fx its %.1f MB input", op, mb(u.alloc), factor, mb(uint64(input)))
	}
}

// limCheap fails if a refused operation allocated more than limSlack: it
// must not have copied, encoded or stored its oversized input.
func limCheap(t *testing.T, op string, u limUse) {
	t.Helper()
	t.Logf("%-22s %7.3fs  alloc %7.3f MB", op, u.dur.Seconds(), mb(u.alloc))
	if u.alloc > limSlack {
		t.Errorf("%s allocated %.1f MB refusing its input", op, mb(u.alloc))
	}
}

func mb(n uint64) float64 { return float64(n) / 1e6 }

func limOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// limOpen opens a store without fsync: durability is not under test here,
// and fsyncs of hundreds of megabytes would only add minutes of noise.
func limOpen(t *testing.T) *engine.DB {
	t.Helper()
	return limOpenWith(t, engine.Options{})
}

// limOpenWith is limOpen with other options.
func limOpenWith(t *testing.T, opts engine.Options) *engine.DB {
	t.Helper()
	opts.NoSync = true
	db, err := engine.Open(t.TempDir(), &opts)
	limOK(t, "Open", err)
	t.Cleanup(func() { db.Close() })
	return db
}

func limWriter(t *testing.T, db *engine.DB, thread string) chain.Writer {
	t.Helper()
	l, err := db.AcquireWriter(ctx, thread)
	limOK(t, "AcquireWriter", err)
	return l.Writer
}

// limBlobs stores n small file blobs and returns their keys, so that Check
// finds every referenced blob.
func limBlobs(t *testing.T, db *engine.DB, n int) []string {
	t.Helper()
	var keys []string
	for i := range n {
		data := fmt.Appendf(nil, "blob %d", i)
		sum := sha256.Sum256(data)
		k := chain.FilePrefix + hex.EncodeToString(sum[:])
		limOK(t, "Put", db.Blobs().Put(ctx, k, data))
		keys = append(keys, k)
	}
	return keys
}

// limClean runs Check and fails on any error finding (retention leaves
// dangling-parent warnings, which the contract allows).
func limClean(t *testing.T, db *engine.DB) *sbxdb.CheckReport {
	t.Helper()
	return checkNoErrors(t, db, sbxdb.CheckStoreOptions{}, "limits")
}

func limRefs(t *testing.T, db *engine.DB, want ...chain.BlobRef) {
	t.Helper()
	got, err := db.BlobReferences(ctx)
	limOK(t, "BlobReferences", err)
	if !slices.Equal(got, want) {
		t.Errorf("BlobReferences = %v, want %v", got, want)
	}
}

// limSameFiles compares manifests entry by entry (cmp over a million
// entries would take longer than the operations under test).
func limSameFiles(t *testing.T, what string, got, want []chain.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: entry %d = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

func limSameMessages(t *testing.T, what string, got, want []json.RawMessage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: message %d (%d bytes) differs from the %d bytes appended", what, i, len(got[i]), len(want[i]))
		}
	}
}

// A checkpoint whose manifest has a million entries (in path order, as
// capture writes them) goes through every operation with memory a small
// multiple of its 56 MB record (its JSON form is 156 MB, 2.8 times that).
//
// Smaller sizes scale Options.RefFoldAfter with the manifest, so that, as
// with the default at a million entries, the first append leaves its
// checkpoint pending and Fork's commit folds both.
func TestLimitMillionEntryManifest(t *testing.T) {
	const full = 1_000_000
	n := limSize(t, 20_000, 100_000, full)
	db := limOpenWith(t, engine.Options{RefFoldAfter: engine.DefaultRefFoldAfter * n / full})
	keys := limBlobs(t, db, 4)
	cp := &chain.Checkpoint{ID: "m1", ThreadID: "m", CreatedAt: 1, Reason: chain.ReasonAutomatic, Files: make([]chain.Entry, n)}
	for i := range cp.Files {
		cp.Files[i] = chain.Entry{Path: fmt.Sprintf("d%04d/f%07d.txt", i/1000, i), Kind: chain.KindFile, BlobKey: keys[i%len(keys)], Size: int64(i)}
	}
	rec := chain.RecordSize(cp)
	if enc := len(meta.EncodeCheckpoint(cp)); enc != rec {
		t.Fatalf("RecordSize = %d, EncodeCheckpoint wrote %d bytes", rec, enc)
	}
	t.Logf("%d entries: record %.1f MB", n, mb(uint64(rec)))
	w := limWriter(t, db, "m")
	ref := func(k string, n int64) chain.BlobRef { return chain.BlobRef{Key: k, References: n} }
	sortedKeys := slices.Sorted(slices.Values(keys))

	// Bounds, 1.3 to 1.6 times what was measured (bbolt's share varies
	// with its page size): decoding makes each 56-byte entry an 80-byte
	// Entry, a path and a 96-byte key string (3.6x). A first append copies
	// the input, encodes it and hands bbolt 390,000 new chunks (shape,
	// content and index), each sealed and keyed; and as this fresh store's
	// file outgrows its mapping, bbolt copies every value the transaction
	// has written, once per remap: 45x allocated in all, but allocated and
	// freed (the peak held is 13x). An append that shares its chunks
	// writes the record and the few new ones. Fork and Check also read the
	// pending source's blob keys to count its references, and Fork
	// prepares a second record (15x). Each checkpoint weighs 3,907 in the
	// pending set (1 plus 1 per 256 entries), so Fork's commit also folds
	// both (7,814, past 4,096): it writes 390,000 chunk counts into the empty chunk_refs
	// bucket, through bbolt's remaps (26x measured). The deletes then
	// meet folded checkpoints: they read their keys and chunk lists and
	// subtract every count, and DeleteHead, the last user of the chunks,
	// deletes 390,000 counts and chunks (6.2x and 8.2x measured).
	var err error
	u := limMeasure(func() { _, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: w}) })
	limOK(t, "Append", err)
	limBound(t, "Append", u, rec, 56)

	var got *chain.Checkpoint
	u = limMeasure(func() { got, err = db.Get(ctx, "m1") })
	limOK(t, "Get", err)
	limBound(t, "Get", u, rec, 5)
	limSameFiles(t, "Get", got.Files, cp.Files)
	got = nil

	var list []*chain.Checkpoint
	u = limMeasure(func() { list, err = db.List(ctx, "m") })
	limOK(t, "List", err)
	limBound(t, "List", u, rec, 5)
	if len(list) != 1 {
		t.Fatalf("List = %d checkpoints, want 1", len(list))
	}
	limSameFiles(t, "List", list[0].Files, cp.Files)
	list = nil

	if head, err := db.Head(ctx, "m"); head != "m1" || err != nil {
		t.Fatalf("Head = %q, %v", head, err)
	}
	// The checkpoint is pending: its keys are read per content chunk (a
	// digest list per chunk, a tally per key, then the key strings):
	// 4.2–6.4x measured.
	u = limMeasure(func() {
		limRefs(t, db, ref(sortedKeys[0], 1), ref(sortedKeys[1], 1), ref(sortedKeys[2], 1), ref(sortedKeys[3], 1))
	})
	limBound(t, "BlobReferences", u, rec, 8)

	var fork *chain.Checkpoint
	wf := limWriter(t, db, "m-fork")
	u = limMeasure(func() {
		fork, err = db.Fork(ctx, chain.ForkInput{SourceThreadID: "m", SourceCheckpointID: "m1",
			DestinationThreadID: "m-fork", DestinationCheckpointID: "f1", CreatedAt: 2, Writer: wf})
	})
	limOK(t, "Fork", err)
	limBound(t, "Fork", u, rec, 34)
	limSameFiles(t, "Fork", fork.Files, cp.Files)
	fork = nil
	limRefs(t, db, ref(sortedKeys[0], 2), ref(sortedKeys[1], 2), ref(sortedKeys[2], 2), ref(sortedKeys[3], 2))

	var rep *sbxdb.CheckReport
	u = limMeasure(func() { rep = limClean(t, db) })
	limBound(t, "Check (2 records)", u, 2*rec, 12)
	if rep.Checkpoints != 2 || rep.BlobKeys != 4 {
		t.Errorf("Check counted %d checkpoints and %d keys, want 2 and 4", rep.Checkpoints, rep.BlobKeys)
	}

	// Retention deletes the big checkpoint below a small head; DeleteHead
	// removes the fork.
	small := &chain.Checkpoint{ID: "m2", ThreadID: "m", ParentID: "m1", CreatedAt: 3, Reason: chain.ReasonAutomatic,
		Files: []chain.Entry{{Path: "only", Kind: chain.KindFile, BlobKey: keys[0], Size: 1}}}
	_, err = db.Append(ctx, chain.AppendInput{Checkpoint: small, ExpectedHeadID: "m1", Writer: w})
	limOK(t, "Append on top", err)
	var deleted []string
	u = limMeasure(func() { deleted, err = db.DeleteCheckpoints(ctx, "m", 1, w) })
	limOK(t, "DeleteCheckpoints", err)
	limBound(t, "DeleteCheckpoints", u, rec, 8)
	if !slices.Equal(deleted, []string{"m1"}) {
		t.Errorf("DeleteCheckpoints deleted %q, want [m1]", deleted)
	}
	u = limMeasure(func() { err = db.DeleteHead(ctx, "m-fork", "f1", wf) })
	limOK(t, "DeleteHead", err)
	limBound(t, "DeleteHead", u, rec, 11)
	limRefs(t, db, ref(keys[0], 1))
	limClean(t, db)
}

// limConversation returns n JSON messages of exactly size bytes each, all
// different.
func limConversation(n, size int) []json.RawMessage {
	msgs := make([]json.RawMessage, n)
	for i := range msgs {
		m := fmt.Appendf(make([]byte, 0, size), `{"role":"user","n":%d,"content":"`, i)
		m = append(m, bytes.Repeat([]byte{'a' + byte(i%26)}, size-len(m)-2)...)
		msgs[i] = append(m, '"', '}')
	}
	return msgs
}

// A 100 MB conversation, as 50,000 messages of 2 KB and as one message,
// round-trips byte for byte through Append and Get; the first also through
// SaveThread/LoadThread and Fork (which copies it into the destination
// transcript).
func TestLimitHundredMBConversation(t *testing.T) {
	for _, c := range []struct {
		name                   string
		smallN, quickN, n      int  // messages at each size (limSize)
		smallSz, quickSz, size int  // bytes per message
		all                    bool // also SaveThread/LoadThread and Fork: once is enough for the time they take
	}{
		{"50000x2KB", 500, 5_000, 50_000, 2048, 2048, 2048, true},
		{"1x100MiB", 1, 1, 1, 1 << 20, 10 << 20, 100 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs := limConversation(limSize(t, c.smallN, c.quickN, c.n), limSize(t, c.smallSz, c.quickSz, c.size))
			db := limOpen(t)
			cp := &chain.Checkpoint{ID: "c1", ThreadID: "c", CreatedAt: 1, Reason: chain.ReasonAutomatic, Conversation: msgs}
			rec, tr := chain.RecordSize(cp), chain.TranscriptSize(msgs)
			t.Logf("%d messages: record %.1f MB", len(msgs), mb(uint64(rec)))
			w := limWriter(t, db, "c")

			// Bounds, 1.2 to 1.4 times what was measured: a write copies
			// the input, encodes, seals and hands bbolt a page buffer (4-5x),
			// and 50,000 new message chunks make bbolt copy what it has
			// written at each remap of this fresh, growing file (34x at
			// full size, allocated and freed: the peak is 6.6x);
			// a read copies each message out of the mapped file once. Fork
			// (17x) decodes the source, encodes and seals two records (the
			// checkpoint and the destination transcript), and bbolt
			// rewrites the leaves it touches — here holding the source
			// record and transcript — and copies their values to the heap
			// when the file grows (bbolt's remap).
			var err error
			u := limMeasure(func() { _, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: w}) })
			limOK(t, "Append", err)
			limBound(t, "Append", u, rec, 44)

			var got *chain.Checkpoint
			u = limMeasure(func() { got, err = db.Get(ctx, "c1") })
			limOK(t, "Get", err)
			limBound(t, "Get", u, rec, 1.2)
			limSameMessages(t, "Get", got.Conversation, msgs)
			got = nil
			if !c.all {
				return
			}

			u = limMeasure(func() { err = db.SaveThread(ctx, "c", msgs) })
			limOK(t, "SaveThread", err)
			limBound(t, "SaveThread", u, tr, 5)
			var loaded []json.RawMessage
			u = limMeasure(func() { loaded, err = db.LoadThread(ctx, "c") })
			limOK(t, "LoadThread", err)
			limBound(t, "LoadThread", u, tr, 1.2)
			limSameMessages(t, "LoadThread", loaded, msgs)
			loaded = nil

			wf := limWriter(t, db, "c-fork")
			u = limMeasure(func() {
				_, err = db.Fork(ctx, chain.ForkInput{SourceThreadID: "c", SourceCheckpointID: "c1",
					DestinationThreadID: "c-fork", DestinationCheckpointID: "f1", CreatedAt: 2, Writer: wf})
			})
			limOK(t, "Fork", err)
			limBound(t, "Fork", u, rec, 24)
			loaded, err = db.LoadThread(ctx, "c-fork")
			limOK(t, "LoadThread(fork)", err)
			limSameMessages(t, "fork transcript", loaded, msgs)
		})
	}
}

// limWantTooLarge checks that err is the limit error for size > limit,
// with the contract code code.
func limWantTooLarge(t *testing.T, what string, err error, sentinel error, code string, size, limit int) {
	t.Helper()
	var le *chain.LimitError
	switch {
	case !errors.Is(err, chain.ErrTooLarge) || !errors.Is(err, sentinel) || chain.Code(err) != code:
		t.Errorf("%s: got %v (code %q), want ErrTooLarge with %s", what, err, chain.Code(err), code)
	case !errors.As(err, &le) || le.Size != int64(size) || le.Limit != int64(limit):
		t.Errorf("%s: got %#v, want a *chain.LimitError of %d bytes, limit %d", what, le, size, limit)
	}
}

// Identifiers of exactly chain.MaxIDBytes bytes (multi-byte characters
// included) work through every operation, capture and restore included;
// one byte more is INVALID_ID and a *LimitError, and changes nothing.
// Paths, artifact ids, labels and run ids have no length limit of their own
// (SPEC §1.2, §1.3): 4097 bytes and more work, bounded only by the record.
func TestLimitIDBytes(t *testing.T) {
	db := limOpen(t)
	max := chain.MaxIDBytes
	id := func(s string, n int) string { return strings.Repeat(s, n/len(s)) + strings.Repeat("x", n%len(s)) }
	thread, dest := id("é", max), id("d", max) // 2-byte characters
	root, child := id("😀", max), id("ü", max-1)+"c"
	forkID, capID := id("f", max), id("猫", max)
	long := id("p", max+1)
	for _, s := range []string{thread, dest, root, child, forkID, capID} {
		if len(s) != max || !strings.Contains(long, "p") {
			t.Fatalf("fixture id of %d bytes", len(s))
		}
	}
	keys := limBlobs(t, db, 1)
	art, err := db.PutArtifact(ctx, engine.ArtifactInput{ArtifactID: long, Name: long, MimeType: "text/plain", Data: strings.NewReader("artifact")})
	limOK(t, "PutArtifact", err)
	path := strings.Repeat("seg/", max/4) + "file" // 4100 bytes, 1025 segments

	w := limWriter(t, db, thread)
	cp1 := &chain.Checkpoint{ID: root, ThreadID: thread, CreatedAt: 1, Reason: chain.ReasonNamed, Label: long, SourceRunID: long,
		Files:     []chain.Entry{{Path: path, Kind: chain.KindFile, BlobKey: keys[0], Size: 7}},
		Artifacts: []chain.Artifact{art}}
	_, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp1, Writer: w})
	limOK(t, "Append root", err)
	cp2 := &chain.Checkpoint{ID: child, ThreadID: thread, ParentID: root, CreatedAt: 2, Reason: chain.ReasonAutomatic}
	_, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp2, ExpectedHeadID: root, Writer: w})
	limOK(t, "Append child", err)
	if got, err := db.Get(ctx, root); err != nil || got == nil || got.ThreadID != thread || got.Label != long ||
		got.Files[0].Path != path || got.Artifacts[0].ArtifactID != long {
		t.Fatalf("Get(root) = %+v, %v", got, err)
	}
	if head, err := db.Head(ctx, thread); head != child || err != nil {
		t.Fatalf("Head = %q, %v", head, err)
	}
	if list, err := db.List(ctx, thread); err != nil || len(list) != 2 || list[1].ParentID != root {
		t.Fatalf("List = %v, %v", list, err)
	}
	limOK(t, "SaveThread", db.SaveThread(ctx, thread, []json.RawMessage{json.RawMessage(`"hi"`)}))
	if msgs, err := db.LoadThread(ctx, thread); err != nil || len(msgs) != 1 {
		t.Fatalf("LoadThread = %q, %v", msgs, err)
	}
	wd := limWriter(t, db, dest)
	_, err = db.Fork(ctx, chain.ForkInput{SourceThreadID: thread, SourceCheckpointID: root,
		DestinationThreadID: dest, DestinationCheckpointID: forkID, CreatedAt: 3, Writer: wd})
	limOK(t, "Fork", err)
	if got, err := db.Get(ctx, forkID); err != nil || got == nil || got.ThreadID != dest {
		t.Fatalf("Get(fork) = %v, %v", got, err)
	}

	// Capture and restore under a maximal thread id and checkpoint id.
	work := t.TempDir()
	limOK(t, "WriteFile", os.WriteFile(filepath.Join(work, "a.txt"), []byte("captured"), 0o644))
	capThread := id("ß", max)
	wc := limWriter(t, db, capThread)
	res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: wc, Dir: work, ID: capID})
	limOK(t, "Capture", err)
	if res.Checkpoint.ID != capID {
		t.Fatalf("Capture made checkpoint %.20q…", res.Checkpoint.ID)
	}
	out := filepath.Join(t.TempDir(), "out")
	_, err = db.Restore(ctx, capID, out, nil)
	limOK(t, "Restore", err)
	if b, err := os.ReadFile(filepath.Join(out, "a.txt")); err != nil || string(b) != "captured" {
		t.Fatalf("restored a.txt = %q, %v", b, err)
	}

	// Instance keys are any string: past bbolt's 32 KiB key limit too.
	for _, k := range []string{long, id("k", 40_000)} {
		rec := sbxdb.InstanceRecord{Key: k, Provider: "p", ProviderSandboxID: "sb", ThreadID: thread, UpdatedAt: 1}
		limOK(t, "Upsert", db.Instances().Upsert(ctx, rec))
		if got, err := db.Instances().Get(ctx, k); err != nil || got == nil || *got != rec {
			t.Fatalf("Instances().Get of a %d-byte key = %v, %v", len(k), got, err)
		}
	}

	// Retention and DeleteHead with maximal ids.
	if deleted, err := db.DeleteCheckpoints(ctx, thread, 1, w); err != nil || !slices.Equal(deleted, []string{root}) {
		t.Fatalf("DeleteCheckpoints = %.20q, %v", deleted, err)
	}
	limOK(t, "DeleteHead", db.DeleteHead(ctx, dest, forkID, wd))
	threads, err := db.Threads(ctx)
	limOK(t, "Threads", err)
	if want := []string{dest, capThread, thread}; !slices.Equal(threads, want) { // d < ß (C3 9F) < é (C3 A9)
		t.Fatalf("Threads = %d threads, not the 3 of the test in byte order", len(threads))
	}
	limClean(t, db)

	// One byte more is refused by every operation, and nothing changes.
	type state struct {
		threads []string
		heads   []string
		refs    []chain.BlobRef
	}
	snap := func() state {
		var s state
		s.threads, _ = db.Threads(ctx)
		for _, th := range s.threads {
			h, _ := db.Head(ctx, th)
			s.heads = append(s.heads, h)
		}
		s.refs, _ = db.BlobReferences(ctx)
		return s
	}
	before := snap()
	over := id("é", max) + "x" // 4097 bytes, ending in a 1-byte character
	small := func(id, thread, parent string) *chain.Checkpoint {
		return &chain.Checkpoint{ID: id, ThreadID: thread, ParentID: parent, CreatedAt: 9, Reason: chain.ReasonAutomatic}
	}
	app := func(cp *chain.Checkpoint, expected string, w chain.Writer) error {
		_, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: expected, Writer: w})
		return err
	}
	fork := func(srcThread, src, destThread, destID string) error {
		_, err := db.Fork(ctx, chain.ForkInput{SourceThreadID: srcThread, SourceCheckpointID: src,
			DestinationThreadID: destThread, DestinationCheckpointID: destID, CreatedAt: 9, Writer: w})
		return err
	}
	for op, f := range map[string]func() error{
		"Get":                     func() error { _, err := db.Get(ctx, over); return err },
		"List":                    func() error { _, err := db.List(ctx, over); return err },
		"Head":                    func() error { _, err := db.Head(ctx, over); return err },
		"AcquireWriter":           func() error { _, err := db.AcquireWriter(ctx, over); return err },
		"Append id":               func() error { return app(small(over, thread, child), child, w) },
		"Append thread":           func() error { return app(small("n", over, ""), "", w) },
		"Append parent":           func() error { return app(small("n", thread, over), child, w) },
		"Append expected":         func() error { return app(small("n", thread, child), over, w) },
		"Append writer":           func() error { return app(small("n", thread, child), child, chain.Writer{ThreadID: over}) },
		"DeleteHead thread":       func() error { return db.DeleteHead(ctx, over, child, w) },
		"DeleteHead id":           func() error { return db.DeleteHead(ctx, thread, over, w) },
		"DeleteCheckpoints":       func() error { _, err := db.DeleteCheckpoints(ctx, over, 1, w); return err },
		"SaveThread":              func() error { return db.SaveThread(ctx, over, nil) },
		"LoadThread":              func() error { _, err := db.LoadThread(ctx, over); return err },
		"Fork source thread":      func() error { return fork(over, child, "z", "z1") },
		"Fork source id":          func() error { return fork(thread, over, "z", "z1") },
		"Fork destination thread": func() error { return fork(thread, child, over, "z1") },
		"Fork destination id":     func() error { return fork(thread, child, "z", over) },
		"Capture writer": func() error {
			_, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: chain.Writer{ThreadID: over}, Dir: work})
			return err
		},
		"Capture id": func() error {
			_, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: wc, Dir: work, ID: over})
			return err
		},
	} {
		limWantTooLarge(t, op, f(), chain.ErrInvalidID, chain.CodeInvalidID, len(over), max)
	}
	if after := snap(); !slices.Equal(before.threads, after.threads) || !slices.Equal(before.heads, after.heads) || !slices.Equal(before.refs, after.refs) {
		t.Errorf("refused operations changed the store")
	}
	limClean(t, db)
}

// Records and transcripts past chain.MaxRecordBytes are refused before
// anything is written with a *LimitError (INVALID_ENTRY). The inputs here
// share one 1 MiB buffer, so they are hundreds of megabytes to the limit
// check but cost the test nothing. Append and SaveThread refuse them from
// their lengths, before copying anything.
func TestLimitRecordSize(t *testing.T) {
	// The limit is checked on RecordSize and TranscriptSize, which must
	// be the encoded sizes exactly.
	mixed := &chain.Checkpoint{ID: "mixed", ThreadID: "t", ParentID: "p", CreatedAt: -chain.MaxSafeInteger, Reason: chain.ReasonNamed,
		Label: "label", SourceRunID: strings.Repeat("r", 200),
		Files: []chain.Entry{
			{Path: "d", Kind: chain.KindDir},
			{Path: "d/f", Kind: chain.KindFile, BlobKey: chain.FilePrefix + strings.Repeat("1", 64), Size: chain.MaxSafeInteger, Executable: true},
			{Path: "l", Kind: chain.KindSymlink, Target: strings.Repeat("t", 300)},
		},
		Artifacts: []chain.Artifact{{ArtifactID: "a", Name: "n", MimeType: "m",
			BlobKey: chain.ArtifactPrefix + strings.Repeat("0", 64), Size: 1 << 40, CreatedAt: -1}},
		Conversation: []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`"` + strings.Repeat("m", 20000) + `"`)},
	}
	if got, want := chain.RecordSize(mixed), len(meta.EncodeCheckpoint(mixed)); got != want {
		t.Errorf("RecordSize = %d, EncodeCheckpoint wrote %d bytes", got, want)
	}
	if got, want := chain.TranscriptSize(mixed.Conversation), len(meta.EncodeMessages(mixed.Conversation)); got != want {
		t.Errorf("TranscriptSize = %d, EncodeMessages wrote %d bytes", got, want)
	}

	db := limOpen(t)
	w := limWriter(t, db, "r")
	chunk := strings.Repeat("t", 1<<20)
	msg := json.RawMessage(`"` + chunk[:1<<20-2] + `"`)
	n := chain.MaxRecordBytes/(1<<20) + 1
	links := make([]chain.Entry, n)
	msgs := make([]json.RawMessage, n)
	for i := range links {
		links[i] = chain.Entry{Path: fmt.Sprintf("l%04d", i), Kind: chain.KindSymlink, Target: chunk}
		msgs[i] = msg
	}

	byLinks := &chain.Checkpoint{ID: "r1", ThreadID: "r", CreatedAt: 1, Reason: chain.ReasonAutomatic, Files: links}
	var err error
	u := limMeasure(func() { _, err = db.Append(ctx, chain.AppendInput{Checkpoint: byLinks, Writer: w}) })
	limWantTooLarge(t, "Append of an oversized manifest", err, chain.ErrInvalidEntry, chain.CodeInvalidEntry, chain.RecordSize(byLinks), chain.MaxRecordBytes)
	limCheap(t, "Append refused", u)

	u = limMeasure(func() { err = db.SaveThread(ctx, "r", msgs) })
	limWantTooLarge(t, "SaveThread of an oversized transcript", err, chain.ErrInvalidEntry, chain.CodeInvalidEntry, chain.TranscriptSize(msgs), chain.MaxRecordBytes)
	limCheap(t, "SaveThread refused", u)

	// The copy costs 2.5 s under the race detector (which checks every
	// byte copied); the refusal itself is the manifest case above.
	if limCostly(t) {
		byConv := &chain.Checkpoint{ID: "r1", ThreadID: "r", CreatedAt: 1, Reason: chain.ReasonAutomatic, Conversation: msgs}
		size := chain.RecordSize(byConv)
		u = limMeasure(func() { _, err = db.Append(ctx, chain.AppendInput{Checkpoint: byConv, Writer: w}) })
		limWantTooLarge(t, "Append of an oversized conversation", err, chain.ErrInvalidEntry, chain.CodeInvalidEntry, size, chain.MaxRecordBytes)
		limBound(t, "Append refused (conv)", u, size, 1.05)
	}

	// An invalid id still comes first (SPEC §10 Q6: ids, then entries).
	_, err = db.Append(ctx, chain.AppendInput{Checkpoint: &chain.Checkpoint{ID: "", ThreadID: "r", Reason: chain.ReasonAutomatic, Files: links}, Writer: w})
	if chain.Code(err) != chain.CodeInvalidID || errors.Is(err, chain.ErrTooLarge) {
		t.Errorf("empty id and oversized manifest: got %v, want INVALID_ID first", err)
	}
	if head, _ := db.Head(ctx, "r"); head != "" {
		t.Errorf("Head = %q after refused appends", head)
	}
	if msgs, _ := db.LoadThread(ctx, "r"); len(msgs) != 0 {
		t.Errorf("LoadThread = %d messages after a refused save", len(msgs))
	}
	limRefs(t, db)
}

// A record of exactly chain.MaxRecordBytes is stored and read back; a fork
// of it whose longer ids push its record past the limit is refused as a
// contract error that leaves the destination empty. Stores 256 MiB: only
// with SBXDB_LONG=1.
func TestLimitRecordBoundary(t *testing.T) {
	testkit.SkipUnlessLong(t, "stores a 256 MiB record")
	db := limOpen(t)
	w := limWriter(t, db, "b")
	chunk := strings.Repeat("t", 1<<20)
	links := make([]chain.Entry, chain.MaxRecordBytes/(1<<20)-1)
	for i := range links {
		links[i] = chain.Entry{Path: fmt.Sprintf("l%04d", i), Kind: chain.KindSymlink, Target: chunk}
	}
	cp := &chain.Checkpoint{ID: "b1", ThreadID: "b", CreatedAt: 1, Reason: chain.ReasonAutomatic, Files: links}
	// Pad with a message (a fork keeps it) to exactly the limit.
	pad := func(n int) []json.RawMessage {
		return []json.RawMessage{json.RawMessage(`"` + strings.Repeat("p", n) + `"`)}
	}
	for n := chain.MaxRecordBytes - chain.RecordSize(cp); ; n-- {
		if cp.Conversation = pad(n); chain.RecordSize(cp) <= chain.MaxRecordBytes {
			break
		}
	}
	if got := chain.RecordSize(cp); got != chain.MaxRecordBytes {
		t.Fatalf("fixture record is %d bytes", got)
	}
	over := *cp
	over.Label = "l"
	_, err := db.Append(ctx, chain.AppendInput{Checkpoint: &over, Writer: w})
	limWantTooLarge(t, "Append one byte over", err, chain.ErrInvalidEntry, chain.CodeInvalidEntry, chain.MaxRecordBytes+1, chain.MaxRecordBytes)

	// Bound, 1.3 times what was measured: the append copies, encodes and
	// seals the record's chunks, and as this fresh store's file outgrows
	// its mapping bbolt copies every value the transaction has written,
	// once per remap: 12x allocated in all, allocated and freed (the peak
	// held is 4.3x).
	u := limMeasure(func() { _, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: w}) })
	limOK(t, "Append at the limit", err)
	limBound(t, "Append at the limit", u, chain.MaxRecordBytes, 16)
	var got *chain.Checkpoint
	u = limMeasure(func() { got, err = db.Get(ctx, "b1") })
	limOK(t, "Get", err)
	limBound(t, "Get at the limit", u, chain.MaxRecordBytes, 1.2)
	limSameFiles(t, "Get", got.Files, cp.Files)
	got = nil

	wf := limWriter(t, db, strings.Repeat("D", chain.MaxIDBytes))
	_, err = db.Fork(ctx, chain.ForkInput{SourceThreadID: "b", SourceCheckpointID: "b1", DestinationThreadID: wf.ThreadID,
		DestinationCheckpointID: strings.Repeat("F", chain.MaxIDBytes), CreatedAt: 2, Writer: wf})
	fork := &chain.Checkpoint{ID: strings.Repeat("F", chain.MaxIDBytes), ThreadID: wf.ThreadID, CreatedAt: 2,
		Reason: chain.ReasonForkRoot, Files: links, Conversation: cp.Conversation}
	limWantTooLarge(t, "Fork past the limit", err, chain.ErrInvalidEntry, chain.CodeInvalidEntry, chain.RecordSize(fork), chain.MaxRecordBytes)
	if head, _ := db.Head(ctx, wf.ThreadID); head != "" {
		t.Errorf("refused fork left head %.20q…", head)
	}
	if msgs, err := db.LoadThread(ctx, wf.ThreadID); err != nil || len(msgs) != 0 {
		t.Errorf("refused fork left a transcript of %d messages (%v)", len(msgs), err)
	}
	limClean(t, db)
}

// 100,000 threads of one checkpoint each: Threads lists them all in order
// and Check is clean, with memory per thread bounded. The appends run from
// many goroutines so that group commit batches them (there is no bulk path).
func TestLimitManyThreads(t *testing.T) {
	n := limSize(t, 2_000, 10_000, 100_000)
	const workers = 1024
	db := limOpen(t)
	key := limBlobs(t, db, 1)[0]
	name := func(i int) string { return fmt.Sprintf("thread-%06d", i) }
	var failed atomic.Bool
	var wg sync.WaitGroup
	u := limMeasure(func() {
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n && !failed.Load(); i += workers {
					th := name(i)
					l, err := db.AcquireWriter(ctx, th)
					if err == nil {
						_, err = db.Append(ctx, chain.AppendInput{Writer: l.Writer, Checkpoint: &chain.Checkpoint{
							ID: th + "/1", ThreadID: th, CreatedAt: 1, Reason: chain.ReasonAutomatic,
							Files: []chain.Entry{{Path: "f", Kind: chain.KindFile, BlobKey: key, Size: 7}}}})
					}
					if err != nil && failed.CompareAndSwap(false, true) {
						t.Errorf("thread %d: %v", i, err)
					}
				}
			}()
		}
		wg.Wait()
	})
	if failed.Load() {
		t.FailNow()
	}
	st := db.WriteStats()
	t.Logf("%d threads: %d writes in %d transactions, %.1fs; alloc %.0f B/thread, peak heap %.1f MB",
		n, 2*n, st.Transactions, u.dur.Seconds(), float64(u.alloc)/float64(n), mb(u.peak))

	// Bounds per thread: Threads keeps each id once in a set and once in
	// the result; Check keeps a few maps over checkpoints and keys. With
	// -short's 2,000 threads nothing has folded (one checkpoint a thread,
	// under the 4,096 weight), so Check also decodes each pending record
	// twice, for the counts and for the pending set (5,124 B measured).
	perThread := func(op string, u limUse, max uint64) {
		t.Helper()
		t.Logf("%-22s %7.3fs  alloc %5d B/thread  peak %5d B/thread", op, u.dur.Seconds(), u.alloc/uint64(n), u.peak/uint64(n))
		if u.alloc > max*uint64(n)+limSlack {
			t.Errorf("%s allocated %d B per thread, more than %d", op, u.alloc/uint64(n), max)
		}
	}
	var threads []string
	var err error
	u = limMeasure(func() { threads, err = db.Threads(ctx) })
	limOK(t, "Threads", err)
	perThread("Threads", u, 400)
	if len(threads) != n {
		t.Fatalf("Threads = %d, want %d", len(threads), n)
	}
	for i, th := range threads {
		if th != name(i) {
			t.Fatalf("Threads[%d] = %q, want %q", i, th, name(i))
		}
	}
	var rep *sbxdb.CheckReport
	u = limMeasure(func() { rep = limClean(t, db) })
	perThread("Check", u, 6500)
	if rep.Threads != n || rep.Checkpoints != n {
		t.Errorf("Check counted %d threads and %d checkpoints, want %d", rep.Threads, rep.Checkpoints, n)
	}
	limRefs(t, db, chain.BlobRef{Key: key, References: int64(n)})
}
