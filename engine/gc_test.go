package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/gc"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
)

// gcFixture is a store with a clock the test moves.
type gcFixture struct {
	db    *engine.DB
	dir   string
	clock atomic.Int64 // Unix ms
}

func newGCFixture(t *testing.T) *gcFixture {
	t.Helper()
	f := &gcFixture{dir: t.TempDir()}
	f.clock.Store(time.Now().UnixMilli())
	db, err := engine.Open(filepath.Join(f.dir, "store"), &engine.Options{
		NoSync: true,
		Now:    func() time.Time { return time.UnixMilli(f.clock.Load()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f.db = db
	return f
}

func (f *gcFixture) advance(d time.Duration) { f.clock.Add(d.Milliseconds()) }

func (f *gcFixture) capture(t *testing.T, thread, ws string) *chain.Checkpoint {
	t.Helper()
	ctx := context.Background()
	w, err := f.db.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	return res.Checkpoint
}

func (f *gcFixture) checkClean(t *testing.T) {
	t.Helper()
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "gc fixture")
}

func (f *gcFixture) restoreEqual(t *testing.T, id string, want map[string]fstree.Node) {
	t.Helper()
	restoreEqual(t, f.db, id, filepath.Join(f.dir, "restore-"+id+"-"+fmt.Sprint(rand.Int())), want)
}

func fileKeys(cp *chain.Checkpoint) []string { return cp.BlobKeys() }

// TestSweepDuringCapture is SPEC W5: a capture that re-uses old,
// unreferenced blobs while a sweep with no age window runs never ends with a
// checkpoint naming a deleted blob. The sweep runs inside the capture,
// after its blobs are settled and before its append: the worst moment.
func TestSweepDuringCapture(t *testing.T) {
	for _, path := range []string{"stat-cache", "read-and-dedup"} {
		t.Run("W5/"+path, func(t *testing.T) {
			f := newGCFixture(t)
			ctx := context.Background()
			ws := filepath.Join(f.dir, "ws")
			write(t, ws, "a.txt", []byte("shared content"), 0o644)
			write(t, ws, "big.bin", []byte(strings.Repeat("large and streamed ", 80_000)), 0o644)
			age(t, ws)
			first := f.capture(t, "th", ws)
			w, _ := f.db.AcquireWriter(ctx, "th")
			if err := f.db.DeleteHead(ctx, "th", first.ID, w.Writer); err != nil {
				t.Fatal(err)
			}
			w.Release(ctx)
			f.advance(2 * time.Hour) // past cas.RefreshAfter

			// Unreferenced and old: a sweep now would take them.
			dry, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true, DryRun: true})
			if err != nil || !slices.Equal(dry.Deleted, fileKeys(first)) {
				t.Fatalf("dry sweep = %v, %v; want the first capture's keys", dry.Deleted, err)
			}
			if path == "read-and-dedup" {
				// Another root has no stat cache: files are read, and their
				// blobs found stored.
				other := filepath.Join(f.dir, "ws2")
				os.Rename(ws, other)
				ws = other
			}
			var swept []string
			remove := f.db.OnPoint("capture.beforeCommit", func() error {
				res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true})
				swept = append(swept, res.Deleted...)
				return err
			})
			second := f.capture(t, "th", ws)
			remove()
			if len(swept) != 0 {
				t.Fatalf("a sweep during the capture deleted %v", swept)
			}
			{
				// A dedup hit, read or vouched for by the stat cache,
				// refreshes an old upload time (the second guard).
				for _, k := range fileKeys(second) {
					infos, err := f.db.Blobs().List(ctx, k) // List, not Head: Head refreshes too
					if err != nil || len(infos) != 1 || infos[0].Uploaded.UnixMilli() != f.clock.Load() {
						t.Fatalf("%s: %v, %v; want its upload time refreshed to now", k, infos, err)
					}
				}
			}
			f.restoreEqual(t, second.ID, snapshot(t, ws))
			if res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil || len(res.Deleted) != 0 {
				t.Fatalf("sweep after the capture = %v, %v", res.Deleted, err)
			}
			f.checkClean(t)
		})
	}
}

func TestSweepRefusesWhenAReferencedBlobIsMissing(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "a.txt", []byte("a"), 0o644)
	write(t, ws, "b.txt", []byte("b"), 0o644)
	cp := f.capture(t, "th", ws)
	lost := cp.Files[0].BlobKey
	if err := f.db.Blobs().Delete(ctx, lost); err != nil {
		t.Fatal(err)
	}
	f.advance(time.Hour)
	_, err := f.db.Sweep(ctx, sbxdb.SweepOptions{OlderThan: time.Minute})
	if chain.Code(err) != chain.CodeMissingBlob || !strings.Contains(err.Error(), lost) {
		t.Fatalf("Sweep = %v; want MISSING_BLOB naming %s", err, lost)
	}
	rep, _ := f.db.Check(ctx, sbxdb.CheckStoreOptions{})
	if rep.Clean() || rep.Findings[0].Kind != sbxdb.FindingMissingBlob || rep.Findings[0].Subject != lost {
		t.Fatalf("check = %+v", rep.Findings)
	}
}

func TestSweepOptions(t *testing.T) {
	f := newGCFixture(t)
	for _, o := range []sbxdb.SweepOptions{{}, {OlderThan: -time.Second}, {OlderThan: -1, Immediate: true}} {
		if _, err := f.db.Sweep(context.Background(), o); !errors.Is(err, gc.ErrInvalidOptions) {
			t.Errorf("Sweep(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
}

// TestGCReclaimsSpace is the space target: capture 50 versions of a tree
// (25 by default, 50 under SBXDB_LONG=1), keep 5, collect; the blob
// directory must then be within 1.2x of a fresh store holding just those 5
// versions.
func TestGCReclaimsSpace(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	ws := filepath.Join(f.dir, "ws")
	r := rand.New(rand.NewPCG(4, 4))
	const files, keep = 300, 5
	versions := testkit.Scale(t, 25, 50)
	for i := range files {
		write(t, ws, fmt.Sprintf("src/f%03d.go", i), varied(r, 3000+r.IntN(5000)), 0o644)
	}
	write(t, ws, "data/large.bin", varied(r, 3<<20), 0o644)
	var ids []string
	for v := range versions {
		if v > 0 {
			for range files / 10 { // 10% of the files change per version
				write(t, ws, fmt.Sprintf("src/f%03d.go", r.IntN(files)), varied(r, 3000+r.IntN(5000)), 0o644)
			}
			if v%10 == 0 {
				write(t, ws, "data/large.bin", varied(r, 3<<20), 0o644)
			}
		}
		ids = append(ids, f.capture(t, "th", ws).ID)
	}
	f.advance(48 * time.Hour)
	opts := sbxdb.GCOptions{Retain: true, Keep: keep, OlderThan: 24 * time.Hour}
	before := dirBytes(t, filepath.Join(f.dir, "store"))
	dry, err := f.db.PlanGC(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := f.db.List(ctx, "th"); len(list) != versions || dirBytes(t, filepath.Join(f.dir, "store")) != before {
		t.Fatalf("a dry run changed the store: %d checkpoints left", len(list))
	}
	res, err := f.db.GC(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dry.Sweep.Deleted, res.Sweep.Deleted) || !slices.Equal(dry.Retention.Deleted["th"], res.Retention.Deleted["th"]) {
		t.Fatalf("the dry run announced %d checkpoints and %d blobs, the run deleted %d and %d",
			len(dry.Retention.Deleted["th"]), len(dry.Sweep.Deleted), len(res.Retention.Deleted["th"]), len(res.Sweep.Deleted))
	}
	// Captures share one clock reading, so List orders them by id.
	if got := res.Retention.Deleted["th"]; !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(ids[:versions-keep]))) {
		t.Fatalf("retention deleted %d checkpoints, want the %d oldest", len(got), versions-keep)
	}
	if len(res.Sweep.Deleted) == 0 || res.Repack.Packs == 0 || res.After.DeadBytes != 0 {
		t.Fatalf("gc result: swept %d, repack %+v, after %+v", len(res.Sweep.Deleted), res.Repack, res.After)
	}

	// A fresh store with the same kept versions.
	fresh, err := engine.Open(filepath.Join(f.dir, "fresh"), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	w, _ := fresh.AcquireWriter(ctx, "th")
	for _, id := range ids[versions-keep:] {
		out := filepath.Join(f.dir, "v-"+id)
		if _, err := f.db.Restore(ctx, id, out, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := fresh.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: out}); err != nil {
			t.Fatal(err)
		}
	}
	got, want := dirBytes(t, filepath.Join(f.dir, "store", engine.BlobDir)), dirBytes(t, filepath.Join(f.dir, "fresh", engine.BlobDir))
	t.Logf("blob bytes after gc %d, fresh capture of the kept versions %d (%.3fx)", got, want, float64(got)/float64(want))
	if float64(got) > 1.2*float64(want) {
		t.Fatalf("after gc the blobs take %d bytes, %.2fx a fresh capture's %d", got, float64(got)/float64(want), want)
	}
	f.checkClean(t)
}

// varied returns n bytes of text that compresses like source code.
func varied(r *rand.Rand, n int) []byte {
	words := []string{"func ", "return ", "err ", "ctx ", "if ", "{\n", "}\n", "x", "y", "z", "42", "\t"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(8) == 0 {
			fmt.Fprintf(&b, "%d", r.Uint32())
		}
	}
	return []byte(b.String()[:n])
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// TestGCStress shows that retention, sweep and repack never lose a blob a
// checkpoint needs: goroutines capture trees that share most of their
// content and keep returning to old versions (so captures re-use
// blobs that retention just made unreferenced), while another goroutine
// runs retention, sweeps with no age window and repacks in a loop, and
// restores heads meanwhile. At the end every checkpoint left restores
// byte-exact and check finds nothing.
func TestGCStress(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	const writers, rounds, filesPer = 4, 12, 40
	var mu sync.Mutex
	expected := map[string]map[string]fstree.Node{} // checkpoint id → tree

	// File i at version v has the same bytes in every tree, so a blob one
	// thread's retention frees is soon wanted by another thread's capture.
	const versions = 4
	content := func(i, v int) []byte { return []byte(strings.Repeat(fmt.Sprintf("file %d version %d\n", i, v), 200)) }
	// Captures linger between settling their blobs and appending, so sweeps
	// land inside that window often.
	f.db.OnPoint("capture.beforeCommit", func() error { time.Sleep(time.Millisecond); return nil })
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for g := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 9))
			thread := fmt.Sprintf("t%d", g)
			ws := filepath.Join(f.dir, "ws-"+thread)
			put := func(rel string, data []byte) bool {
				if err := os.MkdirAll(ws, 0o755); err == nil {
					err = os.WriteFile(filepath.Join(ws, rel), data, 0o644)
				} else {
					errs <- err
					return false
				}
				return true
			}
			for i := range filesPer {
				if !put(fmt.Sprintf("f%02d.txt", i), content(i, 0)) {
					return
				}
			}
			for round := range rounds {
				for range 8 { // change some files to one of the few versions
					i, v := r.IntN(filesPer), r.IntN(versions)
					data := content(i, v)
					if i%5 == 0 { // some content is the writer's own
						data = fmt.Appendf(nil, "%s own %d\n", thread, v)
					}
					put(fmt.Sprintf("f%02d.txt", i), data)
				}
				if round%4 == 0 {
					put("large.bin", []byte(strings.Repeat(fmt.Sprintf("large %d ", r.IntN(2)), 150_000)))
				}
				age(t, ws) // unchanged files come from the stat cache
				want, err := fstree.Read(ws)
				if err != nil {
					errs <- err
					return
				}
				var w *lease.Lease
				for w == nil {
					if w, err = f.db.AcquireWriter(ctx, thread); chain.Code(err) == chain.CodeWriterConflict {
						time.Sleep(time.Millisecond) // retention holds it
						continue
					} else if err != nil {
						errs <- err
						return
					}
				}
				res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws})
				w.Release(ctx)
				if err != nil {
					errs <- fmt.Errorf("%s round %d: %w", thread, round, err)
					return
				}
				mu.Lock()
				expected[res.Checkpoint.ID] = want
				mu.Unlock()
			}
		})
	}
	var collections atomic.Int64
	collector := make(chan struct{})
	go func() {
		defer close(collector)
		r := rand.New(rand.NewPCG(7, 7))
		for !done.Load() {
			if _, err := f.db.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 2, Immediate: true, RepackThreshold: 0.01}); err != nil {
				errs <- fmt.Errorf("gc: %w", err)
				return
			}
			collections.Add(1)
			f.advance(time.Millisecond) // every upload is now strictly older than now
			thread := fmt.Sprintf("t%d", r.IntN(writers))
			head, err := f.db.Head(ctx, thread)
			if err != nil || head == "" {
				continue
			}
			mu.Lock()
			want := expected[head]
			mu.Unlock()
			out := filepath.Join(f.dir, fmt.Sprintf("mid-%d", collections.Load()))
			if _, err := f.db.Restore(ctx, head, out, nil); err != nil {
				if cp, _ := f.db.Get(ctx, head); cp == nil {
					continue // pruned or replaced between Head and Restore
				}
				errs <- fmt.Errorf("restore of head %s during gc: %w", head, err)
				return
			}
			if got, err := fstree.Read(out); want != nil {
				if diff := fstree.Diff(want, got); err != nil || diff != nil {
					errs <- fmt.Errorf("head %s restored wrong during gc: %v", head, diff)
					return
				}
			}
			os.RemoveAll(out)
		}
	}()
	wg.Wait()
	done.Store(true)
	<-collector
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d collections ran during %d captures", collections.Load(), writers*rounds)
	if collections.Load() < 2 {
		t.Fatalf("only %d collections overlapped the captures", collections.Load())
	}
	// One last collection, then every checkpoint left must restore.
	f.advance(time.Second)
	if _, err := f.db.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 2, Immediate: true}); err != nil {
		t.Fatal(err)
	}
	left := 0
	for g := range writers {
		list, err := f.db.List(ctx, fmt.Sprintf("t%d", g))
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range list {
			left++
			f.restoreEqual(t, cp.ID, expected[cp.ID])
		}
	}
	if left == 0 {
		t.Fatal("no checkpoints left to restore")
	}
	f.checkClean(t)
	if u, _ := f.db.Blobs().Usage(ctx); u.Blobs == 0 {
		t.Fatal("no blobs left")
	}
}

func TestCompact(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	ws := filepath.Join(f.dir, "ws")
	for i := range 300 {
		write(t, ws, fmt.Sprintf("f%03d.txt", i), fmt.Appendf(nil, "file %d", i), 0o644)
	}
	for i := range 40 {
		write(t, ws, "changing.txt", fmt.Appendf(nil, "version %d", i), 0o644)
		f.capture(t, "th", ws)
	}
	if _, err := f.db.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 2, OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	wantList, _ := f.db.List(ctx, "th")
	wantRefs, _ := f.db.BlobReferences(ctx)
	f.db.Close()

	dir := filepath.Join(f.dir, "store")
	before, after, err := engine.Compact(ctx, dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compacted %d → %d bytes", before, after)
	if after >= before {
		t.Fatalf("compaction did not shrink the file: %d → %d", before, after)
	}
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	f.db = db
	t.Cleanup(func() { db.Close() })
	gotList, _ := db.List(ctx, "th")
	gotRefs, _ := db.BlobReferences(ctx)
	if !reflect.DeepEqual(gotList, wantList) || !reflect.DeepEqual(gotRefs, wantRefs) {
		t.Fatal("compaction changed the store's contents")
	}
	f.checkClean(t)
	if _, _, err := engine.Compact(ctx, dir, &engine.Options{NoSync: true, LockTimeout: 50 * time.Millisecond}); !errors.Is(err, sbxdb.ErrLocked) {
		t.Fatalf("Compact of an open store = %v, want ErrLocked", err)
	}
}

// TestSweepRechecksUploadTime: a blob nothing references or holds, listed
// as old, whose upload time a dedup hit refreshes between the listing and
// the deleting transaction, is kept: that transaction reads the time
// again. Only then, once the window has passed again, is it swept.
func TestSweepRechecksUploadTime(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	data := []byte("a blob a host uploads and a later capture finds")
	key := testkit.FileKeyOf(data)
	if err := f.db.Blobs().Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	f.advance(2 * time.Hour) // past cas.RefreshAfter and the window
	remove := f.db.OnPoint("sweep.marked", func() error {
		_, err := f.db.Blobs().Head(ctx, key) // a dedup hit: refreshes
		return err
	})
	res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{OlderThan: time.Hour})
	remove()
	if err != nil || len(res.Deleted) != 0 {
		t.Fatalf("sweep with a dedup hit after its listing deleted %v (%v)", res.Deleted, err)
	}
	if _, err := f.db.Blobs().Get(ctx, key); err != nil {
		t.Fatalf("the refreshed blob: %v", err)
	}
	f.advance(2 * time.Hour)
	if res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{OlderThan: time.Hour}); err != nil || !slices.Equal(res.Deleted, []string{key}) {
		t.Fatalf("sweep past the window deleted %v (%v); want %s", res.Deleted, err, key)
	}
}
