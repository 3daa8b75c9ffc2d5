package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lease"
)

// threadState is what a store holds, as its readers see it: to assert that
// a refused write changed nothing, and what an accepted one changed.
type threadState struct {
	Threads    []string
	Checkpoint map[string][]string // thread → ids in List order
	Heads      map[string]string
	Transcript map[string][]string
	Artifacts  map[string][]string // thread → artifact ids
	Refs       []chain.BlobRef
	Blobs      []cas.Info
	Writers    map[string]lease.State
}

func threadStateOf(t *testing.T, db *engine.DB, threads ...string) threadState {
	t.Helper()
	ctx := context.Background()
	s := threadState{Checkpoint: map[string][]string{}, Heads: map[string]string{}, Transcript: map[string][]string{}, Artifacts: map[string][]string{}}
	var err error
	if s.Threads, err = db.Threads(ctx); err != nil {
		t.Fatal(err)
	}
	for _, th := range threads {
		cps, err := db.List(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range cps {
			s.Checkpoint[th] = append(s.Checkpoint[th], cp.ID)
		}
		if s.Heads[th], err = db.Head(ctx, th); err != nil {
			t.Fatal(err)
		}
		msgs, err := db.LoadThread(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			s.Transcript[th] = append(s.Transcript[th], string(m))
		}
		recs, err := db.ArtifactRecords().ListForThread(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			s.Artifacts[th] = append(s.Artifacts[th], r.ArtifactID)
		}
	}
	if s.Refs, err = db.BlobReferences(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Blobs, err = db.Blobs().List(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if s.Writers, err = db.Writers(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// deleteFixture is two threads sharing a blob, "a" with three captures, a
// transcript and an artifact record holding one of its blobs, "b" with one
// capture and an artifact record of its own.
func deleteFixture(t *testing.T) (f *gcFixture, a []*chain.Checkpoint, b *chain.Checkpoint) {
	t.Helper()
	ctx := context.Background()
	f = newGCFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "same.txt", []byte("shared by both threads"), 0o644)
	for i := range 3 {
		write(t, ws, "a.txt", []byte{byte('a' + i)}, 0o644)
		a = append(a, f.capture(t, "a", ws))
	}
	b = f.capture(t, "b", ws)
	if err := f.db.SaveThread(ctx, "a", []json.RawMessage{json.RawMessage(`{"role":"user"}`)}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []sbxdb.ArtifactRecord{
		{ArtifactID: "art-a", RunID: "run", ThreadID: "a", BlobKey: a[0].Files[0].BlobKey, Name: "n", MimeType: "text/plain", CreatedAt: 1},
		{ArtifactID: "art-b", RunID: "run", ThreadID: "b", BlobKey: b.Files[0].BlobKey, Name: "n", MimeType: "text/plain", CreatedAt: 1},
	} {
		if err := f.db.ArtifactRecords().Save(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	return f, a, b
}

// The blob references left are exactly those of the checkpoints left.
func wantRefs(cps ...*chain.Checkpoint) []chain.BlobRef {
	n := map[string]int64{}
	for _, cp := range cps {
		for _, k := range cp.BlobKeys() {
			n[k]++
		}
	}
	out := []chain.BlobRef{}
	for k, c := range n {
		out = append(out, chain.BlobRef{Key: k, References: c})
	}
	slices.SortFunc(out, func(x, y chain.BlobRef) int { return compareStrings(x.Key, y.Key) })
	return out
}

func compareStrings(x, y string) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func TestDeleteThread(t *testing.T) {
	for _, folded := range []bool{false, true} {
		name := map[bool]string{false: "pending", true: "folded"}[folded]
		t.Run(name, func(t *testing.T) { testDeleteThread(t, folded) })
	}
}

func testDeleteThread(t *testing.T, folded bool) {
	ctx := context.Background()
	f, a, b := deleteFixture(t)
	if folded {
		// SetRefCount folds every pending reference first; the count set
		// is the one the key has.
		k := b.Files[0].BlobKey
		refs, _ := f.db.BlobReferences(ctx)
		i := slices.IndexFunc(refs, func(r chain.BlobRef) bool { return r.Key == k })
		if err := f.db.SetRefCount(k, refs[i].References); err != nil {
			t.Fatal(err)
		}
		if _, n, _ := f.db.Pending(); n != 0 {
			t.Fatalf("%d checkpoints still pending", n)
		}
	}
	old, err := f.db.AcquireWriter(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	before := threadStateOf(t, f.db, "a", "b")
	if len(before.Checkpoint["a"]) != len(a) {
		t.Fatalf("thread a holds %q", before.Checkpoint["a"])
	}

	// A live writer refuses it, changing nothing.
	res, err := f.db.DeleteThread(ctx, "a", false)
	if !errors.Is(err, chain.ErrWriterConflict) || res.Checkpoints != nil {
		t.Fatalf("DeleteThread with a live writer = %+v, %v; want WRITER_CONFLICT", res, err)
	}
	if d := cmp.Diff(before, threadStateOf(t, f.db, "a", "b")); d != "" {
		t.Fatalf("a refused DeleteThread changed the store (-before +after):\n%s", d)
	}

	// Forced, it removes everything of the thread and nothing of b.
	res, err = f.db.DeleteThread(ctx, "a", true)
	if err != nil {
		t.Fatal(err)
	}
	want := sbxdb.DeleteThreadResult{Checkpoints: before.Checkpoint["a"], Transcript: true, Lease: true, ArtifactRecords: 1}
	if d := cmp.Diff(want, res); d != "" {
		t.Fatalf("result (-want +got):\n%s", d)
	}
	after := threadStateOf(t, f.db, "a", "b")
	wantState := before
	wantState.Threads = []string{"b"}
	wantState.Checkpoint = map[string][]string{"b": {b.ID}}
	wantState.Heads = map[string]string{"a": "", "b": b.ID}
	wantState.Transcript = map[string][]string{}
	wantState.Artifacts = map[string][]string{"b": {"art-b"}}
	wantState.Refs = wantRefs(b) // the blobs stay, for the sweep
	ws := before.Writers["a"]
	wantState.Writers = map[string]lease.State{"a": {LastFence: ws.LastFence + 1}, "b": before.Writers["b"]}
	if d := cmp.Diff(wantState, after); d != "" {
		t.Fatalf("store after DeleteThread (-want +got):\n%s", d)
	}
	for _, cp := range a {
		if got, err := f.db.Get(ctx, cp.ID); got != nil || err != nil {
			t.Fatalf("Get(%s) after DeleteThread = %v, %v", cp.ID, got, err)
		}
	}
	rep := checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after DeleteThread")
	// a.txt's first two versions are no longer named, the first not even
	// by art-a's hold; the third and same.txt are b's still.
	if rep.Unreferenced != 2 || rep.Checkpoints != 1 || rep.ArtifactRecords != 1 {
		t.Fatalf("check after DeleteThread: %+v", rep)
	}

	// The fence counter survives: the old writer stays fenced out, and the
	// thread's next writer gets a higher fence.
	if err := appendTo(ctx, f.db, old.Writer, "late", ""); !errors.Is(err, chain.ErrWriterLost) {
		t.Fatalf("append by the removed writer: %v, want WRITER_LOST", err)
	}
	if _, err := f.db.RenewWriter(ctx, old.Writer); !errors.Is(err, chain.ErrWriterLost) {
		t.Fatalf("renewal by the removed writer: %v, want WRITER_LOST", err)
	}
	next, err := f.db.AcquireWriter(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence <= old.Fence {
		t.Fatalf("fence after DeleteThread %d, not above the removed writer's %d", next.Fence, old.Fence)
	}
	// The thread is empty in every sense: a fork may make it again.
	if _, err := f.db.Fork(ctx, chain.ForkInput{SourceThreadID: "b", SourceCheckpointID: b.ID,
		DestinationThreadID: "a", DestinationCheckpointID: "forked", CreatedAt: 1, Writer: next.Writer}); err != nil {
		t.Fatalf("fork into the deleted thread: %v", err)
	}
	next.Release(ctx)
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after the fork")
}

// An expired lease does not refuse it, and is removed.
func TestDeleteThreadExpiredLease(t *testing.T) {
	ctx := context.Background()
	f, _, _ := deleteFixture(t)
	l, err := f.db.AcquireWriter(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	f.advance(sbxdb.DefaultLeaseDuration + time.Second)
	res, err := f.db.DeleteThread(ctx, "a", false)
	if err != nil || len(res.Checkpoints) != 3 || !res.Lease {
		t.Fatalf("DeleteThread over an expired lease = %+v, %v", res, err)
	}
	if _, err := f.db.RenewWriter(ctx, l.Writer); !errors.Is(err, chain.ErrWriterLost) {
		t.Fatalf("renewal after DeleteThread: %v", err)
	}
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{}, "after DeleteThread")
}

// A thread with nothing stored is not an error, and changes nothing; nor
// does a thread left with only its fence counter.
func TestDeleteThreadNothing(t *testing.T) {
	ctx := context.Background()
	f, _, _ := deleteFixture(t)
	if _, err := f.db.DeleteThread(ctx, "a", false); err != nil {
		t.Fatal(err)
	}
	for _, th := range []string{"nobody", "a"} {
		before := threadStateOf(t, f.db, "a", "b", th)
		res, err := f.db.DeleteThread(ctx, th, false)
		if err != nil || res.Checkpoints == nil || len(res.Checkpoints) != 0 || res.Transcript || res.Lease || res.ArtifactRecords != 0 {
			t.Fatalf("DeleteThread(%q) = %+v, %v; want nothing deleted", th, res, err)
		}
		if d := cmp.Diff(before, threadStateOf(t, f.db, "a", "b", th)); d != "" {
			t.Fatalf("DeleteThread(%q) changed the store:\n%s", th, d)
		}
	}
}

// A thread holding only a transcript, or only a lease, loses it.
func TestDeleteThreadPartial(t *testing.T) {
	ctx := context.Background()
	db := open(t, t.TempDir())
	if err := db.SaveThread(ctx, "talk", []json.RawMessage{json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	res, err := db.DeleteThread(ctx, "talk", false)
	if err != nil || !res.Transcript || res.Lease || len(res.Checkpoints) != 0 {
		t.Fatalf("transcript only: %+v, %v", res, err)
	}
	if th, _ := db.Threads(ctx); len(th) != 0 {
		t.Fatalf("threads left: %q", th)
	}
	if _, err := db.AcquireWriter(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	res, err = db.DeleteThread(ctx, "held", true)
	if err != nil || !res.Lease || res.Transcript || len(res.Checkpoints) != 0 {
		t.Fatalf("lease only: %+v, %v", res, err)
	}
	if w, _ := db.Writers(ctx); w["held"].Held || w["held"].LastFence != 2 {
		t.Fatalf("writer state after: %+v", w["held"])
	}
}

// Invalid thread ids are INVALID_ID and change nothing; a read-only store
// refuses it.
func TestDeleteThreadRefused(t *testing.T) {
	ctx := context.Background()
	f, _, _ := deleteFixture(t)
	before := threadStateOf(t, f.db, "a", "b")
	for _, th := range []string{"", "a\xff", "a\x00", string(make([]byte, chain.MaxIDBytes+1))} {
		if res, err := f.db.DeleteThread(ctx, th, true); !errors.Is(err, chain.ErrInvalidID) || res.Checkpoints != nil {
			t.Errorf("DeleteThread(%.10q) = %+v, %v; want INVALID_ID", th, res, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.db.DeleteThread(cctx, "a", true); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if d := cmp.Diff(before, threadStateOf(t, f.db, "a", "b")); d != "" {
		t.Fatalf("refused DeleteThread changed the store:\n%s", d)
	}
}

// A failure inside the transaction, after the checkpoints are deleted,
// rolls everything back.
func TestDeleteThreadRollsBack(t *testing.T) {
	ctx := context.Background()
	f, _, _ := deleteFixture(t)
	before := threadStateOf(t, f.db, "a", "b")
	boom := errors.New("boom")
	remove := f.db.OnPoint("deleteThread.publish", func() error { return boom })
	if _, err := f.db.DeleteThread(ctx, "a", false); !errors.Is(err, boom) {
		t.Fatalf("DeleteThread failing at publish: %v", err)
	}
	remove()
	if d := cmp.Diff(before, threadStateOf(t, f.db, "a", "b")); d != "" {
		t.Fatalf("a failed DeleteThread changed the store:\n%s", d)
	}
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{}, "after the failure")
}
