package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
	"github.com/sbxdb/sbxdb/internal/testkit/s3test"
)

// churnTree writes the n files of ws on round 0 and then, each round, a
// quarter of those not a multiple of 5 (which stay as round 0 wrote them:
// the first pack stays partly live), each with text of a length of its
// own for the round, so that the stat cache never takes a changed file
// for an unchanged one.
func churnTree(t *testing.T, ws, tag string, round, n int) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(round), uint64(len(tag))))
	words := []string{"func ", "return ", "if err != nil ", "{\n", "}\n", "x := ", "ctx, ", "// comment\n"}
	for i := range n {
		if round > 0 && (i%5 == 0 || (i+round)%4 != 0) {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s file %d round %d\n", tag, i, round)
		for b.Len() < 8000+i*97+round*13 {
			b.WriteString(words[r.IntN(len(words))])
		}
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%03d.go", i)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Two servers share one PostgreSQL database and one bucket. One captures
// 20 checkpoints of a churning tree, then runs gc (retention, sweep and a
// repack in the bucket) while the other captures and restores trees of
// its own. Every checkpoint left restores byte for byte on either server,
// check --verify-blobs is clean, the dead bytes are at most a fifth of the
// live ones, and once the store's clock passes the window a second gc
// leaves in the bucket only the packs the index lists.
func TestSharedS3RepackAcrossServers(t *testing.T) {
	srv := s3test.Start(t)
	s3test.Env(t, srv)
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	opts := engine.Options{NoSync: true, Now: now, Metadata: pgtest.URL(t), Blobs: "s3://" + s3test.Bucket() + "/blobs"}
	root := t.TempDir()
	one, err := engine.Open(filepath.Join(root, "one"), &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	two, err := engine.Open(filepath.Join(root, "two"), &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()

	// 20 captures on one, each a quarter of the files new.
	ws := filepath.Join(root, "ws")
	os.MkdirAll(ws, 0o755)
	w1, err := one.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	trees := map[string]map[string]fstree.Node{}
	var ids []string
	for round := range 20 {
		churnTree(t, ws, "one", round, 40)
		res, err := one.Capture(ctx, sbxdb.CaptureInput{Writer: w1.Writer, Dir: ws})
		if err != nil {
			t.Fatal(err)
		}
		trees[res.Checkpoint.ID] = snapshot(t, ws)
		ids = append(ids, res.Checkpoint.ID)
	}
	w1.Release(ctx)

	// Two hours on, gc on one (keeping 3 checkpoints) while two captures
	// and restores a tree of its own, sharing no blob with one's.
	clock.Add((2 * time.Hour).Milliseconds())
	var (
		wg      sync.WaitGroup
		done    atomic.Bool
		errMu   sync.Mutex
		errs    []error
		twoRuns atomic.Int64
	)
	fail := func(err error) { errMu.Lock(); errs = append(errs, err); errMu.Unlock() }
	ws2 := filepath.Join(root, "ws2")
	os.MkdirAll(ws2, 0o755)
	w2, err := two.AcquireWriter(ctx, "t2")
	if err != nil {
		t.Fatal(err)
	}
	var treesMu sync.Mutex
	wg.Go(func() {
		for round := 0; round < 3 || !done.Load(); round++ {
			churnTree(t, ws2, "two", round, 20)
			res, err := two.Capture(ctx, sbxdb.CaptureInput{Writer: w2.Writer, Dir: ws2})
			if err != nil {
				fail(fmt.Errorf("capture on two: %w", err))
				return
			}
			want, err := fstree.Read(ws2)
			if err != nil {
				fail(err)
				return
			}
			treesMu.Lock()
			trees[res.Checkpoint.ID] = want
			treesMu.Unlock()
			out := filepath.Join(root, fmt.Sprintf("two-restore-%d", round))
			if _, err := two.Restore(ctx, res.Checkpoint.ID, out, nil); err != nil {
				fail(fmt.Errorf("restore on two: %w", err))
				return
			}
			if got, err := fstree.Read(out); err != nil || len(fstree.Diff(want, got)) != 0 {
				fail(fmt.Errorf("restore on two of round %d differs (%v)", round, err))
				return
			}
			os.RemoveAll(out)
			twoRuns.Add(1)
		}
	})
	gcRes, err := one.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 3, Threads: []string{"t1"}, OlderThan: time.Hour})
	done.Store(true)
	wg.Wait()
	w2.Release(ctx)
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if gcRes.Repack.Packs == 0 || gcRes.Repack.Blobs == 0 || len(gcRes.Sweep.Deleted) == 0 {
		t.Fatalf("GC swept %d blobs and repacked %d packs, moving %d blobs; want all three", len(gcRes.Sweep.Deleted), gcRes.Repack.Packs, gcRes.Repack.Blobs)
	}
	t.Logf("gc: before %+v", gcRes.Before)
	t.Logf("gc: repack %+v", gcRes.Repack)
	t.Logf("gc: after %+v", gcRes.After)

	// Every checkpoint left restores byte for byte, on either server.
	kept := ids[len(ids)-3:]
	for id, want := range trees {
		if contains(ids, id) && !contains(kept, id) {
			continue // deleted by retention
		}
		for i, db := range []*engine.DB{one, two} {
			out := filepath.Join(root, fmt.Sprintf("restore-%s-%d", id, i))
			if _, err := db.Restore(ctx, id, out, nil); err != nil {
				t.Fatalf("restore of %s on server %d: %v", id, i+1, err)
			}
			if diff := fstree.Diff(want, snapshot(t, out)); len(diff) != 0 {
				t.Fatalf("restore of %s on server %d differs: %v", id, i+1, diff[0])
			}
			os.RemoveAll(out)
		}
	}
	for _, db := range []*engine.DB{one, two} {
		rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
		if err != nil || !rep.Clean() {
			t.Fatalf("Check --verify-blobs: %+v, %v", rep, err)
		}
	}

	// Dead bytes against live ones, by the index.
	after := gcRes.After
	live := after.PackBytes - after.DeadBytes + after.LargeBytes
	if total := after.PackBytes + after.LargeBytes; float64(total) > 1.2*float64(live) {
		t.Fatalf("after gc: %d bytes indexed for %d live (%.3fx); want at most 1.2x", total, live, float64(total)/float64(live))
	}

	// Past the window, a second gc deletes the retired packs: the bucket
	// then holds what the index lists, and no more than 1.2x live bytes.
	bucket := openTestBucket(t, opts.Blobs)
	bucketBytes := func() (n int64) {
		bucket.List(ctx, "", func(i objstore.Info) error { n += i.Size; return nil })
		return n
	}
	beforeSecond := bucketBytes()
	clock.Add((2 * time.Hour).Milliseconds())
	second, err := two.GC(ctx, sbxdb.GCOptions{OlderThan: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if second.Orphans < gcRes.Repack.Packs {
		t.Errorf("second gc removed %d objects; want at least the %d retired packs", second.Orphans, gcRes.Repack.Packs)
	}
	inBucket := bucketBytes()
	indexed := second.After.PackBytes + second.After.LargeBytes
	live = second.After.PackBytes - second.After.DeadBytes + second.After.LargeBytes
	t.Logf("bucket: %d bytes before the window, %d after (indexed %d, live %d: %.3fx)", beforeSecond, inBucket, indexed, live, float64(inBucket)/float64(live))
	if inBucket != indexed {
		t.Errorf("bucket holds %d bytes, the index %d", inBucket, indexed)
	}
	if float64(inBucket) > 1.2*float64(live) {
		t.Errorf("bucket holds %d bytes for %d live (%.3fx); want at most 1.2x", inBucket, live, float64(inBucket)/float64(live))
	}
	for _, db := range []*engine.DB{one, two} {
		rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
		if err != nil || !rep.Clean() || rep.OrphanFiles != 0 {
			t.Fatalf("Check --verify-blobs after the window: %+v, %v", rep, err)
		}
	}
	for _, id := range kept {
		out := filepath.Join(root, "final-"+id)
		if _, err := two.Restore(ctx, id, out, nil); err != nil {
			t.Fatal(err)
		}
		if diff := fstree.Diff(trees[id], snapshot(t, out)); len(diff) != 0 {
			t.Fatalf("restore of %s after the window differs: %v", id, diff[0])
		}
	}
}

func contains(s []string, v string) bool { return slices.Contains(s, v) }

// A server whose pack cache is a third of the tree restores it whole, and
// its cache directory is within the bound afterwards.
func TestSharedS3CacheBound(t *testing.T) {
	srv := s3test.Start(t)
	s3test.Env(t, srv)
	ctx := context.Background()
	opts := engine.Options{NoSync: true, Metadata: pgtest.URL(t), Blobs: "s3://" + s3test.Bucket() + "/blobs"}
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	os.MkdirAll(ws, 0o755)
	const cacheSize = 10 << 20
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 30 { // 30 MiB, incompressible: three times the cache
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("blob%02d.bin", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	one, err := engine.Open(filepath.Join(root, "one"), &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	small := opts
	small.CacheSize = cacheSize
	two, err := engine.Open(filepath.Join(root, "two"), &small)
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	w, err := one.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := one.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "out")
	if _, err := two.Restore(ctx, res.Checkpoint.ID, out, nil); err != nil {
		t.Fatalf("restore through a cache of a third of the tree: %v", err)
	}
	if diff := fstree.Diff(snapshot(t, ws), snapshot(t, out)); len(diff) != 0 {
		t.Fatalf("restored tree differs: %v", diff[0])
	}
	var cached int64
	ents, _ := os.ReadDir(filepath.Join(root, "two", engine.BlobDir, "packs"))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			cached += fi.Size()
		}
	}
	if cached > cacheSize {
		t.Fatalf("cache directory holds %d bytes; bound %d", cached, cacheSize)
	}
	t.Logf("restored %d MiB through a %d MiB cache, which holds %d bytes after", 30, cacheSize>>20, cached)
}
