package suite

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// GCCheckpoints is the number of checkpoints of every GC store: its
// references are spread over 100 checkpoints, so that with the engine's
// default fold interval (64) the last 36 are pending when the store is
// built with pending references.
const GCCheckpoints = 100

// GCScale sizes a GC store: References blob references held by
// GCCheckpoints checkpoints, every file its own 16-byte blob.
type GCScale struct {
	References int
}

// FullGC is the full scale: 1,000,000 references (10,000 files per
// checkpoint). QuickGC is the benchmark command's --quick scale.
var (
	FullGC  = GCScale{References: 1_000_000}
	QuickGC = GCScale{References: 100_000}
)

// PerCheckpoint is the number of files (and blobs) of each checkpoint.
func (s GCScale) PerCheckpoint() int { return s.References / GCCheckpoints }

// Churns returns the numbers of blobs no checkpoint names that the sweep
// benchmarks delete: 1 % and 10 % of the references.
func (s GCScale) Churns() []int { return []int{s.References / 100, s.References / 10} }

// gcT0 is when the blobs were uploaded; sweeps run two days later.
var gcT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// GCStore is an open GC benchmark store (fsync on), its clock two days
// after the blobs were uploaded.
type GCStore struct {
	DB           *engine.DB
	Dir          string
	Scale        GCScale
	Unreferenced int
	clock        atomic.Int64
}

func (s *GCStore) now() time.Time { return time.UnixMilli(s.clock.Load()) }

// BuildGCStore writes a GC benchmark store into dir (new or empty) and
// closes it: scale.References+unreferenced tiny blobs, and GCCheckpoints
// checkpoints naming the first scale.References of them. It is written
// without fsync. With pending, the last 36 checkpoints' references are left
// pending (it folds every 64 appends), each with keys of its own:
// the costliest case for counting; else every reference is folded. When
// withWorkspace, it also writes a 200-file workspace under dir/ws for
// CaptureDuringSweep.
func BuildGCStore(dir string, scale GCScale, unreferenced int, pending, withWorkspace bool) error {
	if scale.References < GCCheckpoints || scale.References%GCCheckpoints != 0 {
		return fmt.Errorf("GC scale: %d references is not a multiple of %d", scale.References, GCCheckpoints)
	}
	now := func() time.Time { return gcT0 }
	// Fold after 64 checkpoints, so that the last 36 of 100 are pending.
	foldAfter := 64 * int(meta.CheckpointWeight(uint64(scale.PerCheckpoint())))
	if !pending {
		foldAfter = 1
	}
	db, err := engine.Open(dir, &engine.Options{NoSync: true, Now: now, RefFoldAfter: foldAfter})
	if err != nil {
		return err
	}
	defer db.Close()
	total := scale.References + unreferenced
	keys := make([]string, 0, total)
	for start := 0; start < total; start += 100_000 {
		batch := db.Blobs().NewBatch()
		var payload [16]byte
		for i := start; i < min(start+100_000, total); i++ {
			binary.LittleEndian.PutUint64(payload[:], uint64(i))
			res, err := batch.Add(ctx, cas.Files, payload[:])
			if err != nil {
				batch.Close()
				return err
			}
			keys = append(keys, res.Key)
		}
		err := batch.Commit(ctx)
		batch.Close()
		if err != nil {
			return err
		}
	}
	w, err := db.AcquireWriter(ctx, "th")
	if err != nil {
		return err
	}
	per := scale.PerCheckpoint()
	head := ""
	for c := range GCCheckpoints {
		files := make([]chain.Entry, per)
		for i := range files {
			files[i] = chain.Entry{Path: fmt.Sprintf("f%05d", i), Kind: chain.KindFile, Size: 16, BlobKey: keys[c*per+i]}
		}
		cp := &chain.Checkpoint{ID: fmt.Sprintf("cp%03d", c), ThreadID: "th", ParentID: head, CreatedAt: gcT0.UnixMilli() + int64(c),
			Reason: chain.ReasonAutomatic, Files: files}
		if head, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: w.Writer}); err != nil {
			return err
		}
	}
	if err := w.Release(ctx); err != nil {
		return err
	}
	if withWorkspace {
		ws := filepath.Join(dir, "ws")
		for i := range 200 {
			if err := writeFile(filepath.Join(ws, fmt.Sprintf("src/f%03d.go", i)), fmt.Sprintf("package src // file %d\n", i)); err != nil {
				return err
			}
		}
	}
	return db.Close()
}

// OpenGCStore opens a store BuildGCStore wrote (or a copy of one, see
// CopyTree) with fsync on, its clock two days after the uploads. A
// read-only store serves Mark, and is not changed.
func OpenGCStore(dir string, scale GCScale, unreferenced int, readOnly bool) (*GCStore, error) {
	s := &GCStore{Dir: dir, Scale: scale, Unreferenced: unreferenced}
	s.clock.Store(gcT0.Add(48 * time.Hour).UnixMilli())
	db, err := engine.Open(dir, &engine.Options{Now: s.now, ReadOnly: readOnly})
	if err != nil {
		return nil, err
	}
	s.DB = db
	return s, nil
}

// NewGCStore builds and opens a GC store in a new directory (Dir), closed
// when tb ends.
func NewGCStore(tb testing.TB, scale GCScale, unreferenced int, pending, withWorkspace bool) *GCStore {
	tb.Helper()
	dir := Dir(tb)
	if err := BuildGCStore(dir, scale, unreferenced, pending, withWorkspace); err != nil {
		tb.Fatal(err)
	}
	s, err := OpenGCStore(dir, scale, unreferenced, false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.DB.Close() })
	return s
}

// CopyTree copies the regular files, directories and symlinks under src
// into dst (which must not exist), keeping modes (fstree.Copy). The
// benchmark command builds one store per kind and copies it for every run,
// before timing.
func CopyTree(src, dst string) error { return fstree.Copy(src, dst) }

// Mark reads the marks, every referenced key with its count, from s. One
// op is one BlobReferences; it reports references read per second.
func Mark(b *testing.B, s *GCStore) {
	for b.Loop() {
		refs, err := s.DB.BlobReferences(ctx)
		if err != nil || len(refs) != s.Scale.References {
			b.Fatalf("%d refs, %v", len(refs), err)
		}
	}
	b.ReportMetric(float64(s.Scale.References)*float64(b.N)/b.Elapsed().Seconds(), "refs/s")
}

// Sweep is one sweep of a whole store per op: list every blob, read the
// references, check none is missing, delete the unreferenced ones. next is
// called with the timer stopped and returns the op's store (built with
// pending references); Sweep closes it. It reports keys examined per
// second, how long the sweep held the store's write lock per million
// references (DB.WriteStats().Held: every write transaction from begin to
// the end of its commit, fsyncs included) and the write transactions.
func Sweep(b *testing.B, next func(b *testing.B) *GCStore) {
	for range b.N {
		b.StopTimer()
		s := next(b)
		before := s.DB.WriteStats()
		b.StartTimer()
		start := time.Now()
		res, err := s.DB.Sweep(ctx, sbxdb.SweepOptions{OlderThan: 24 * time.Hour})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != nil || len(res.Deleted) != s.Unreferenced {
			b.Fatalf("swept %d, %v", len(res.Deleted), err)
		}
		after := s.DB.WriteStats()
		b.ReportMetric(float64(res.Examined)/elapsed.Seconds(), "keys/s")
		b.ReportMetric(float64((after.Held-before.Held).Microseconds())/1000/(float64(s.Scale.References)/1e6), "lock-ms/1M-refs")
		b.ReportMetric(float64(after.Transactions-before.Transactions), "write-txs")
		s.DB.Close()
	}
}

// CaptureDuringSweep captures the store's 200-file workspace again and
// again (one file changed each time) into the same store, first 30 times
// alone and then while a sweep deleting the store's unreferenced blobs
// runs, and reports the capture latencies of both (median and max). next
// is called with the timer stopped and returns the op's store, built with
// folded references (a fold of pending ones would land in the middle of
// the idle captures) and the workspace; CaptureDuringSweep closes it.
func CaptureDuringSweep(b *testing.B, next func(b *testing.B) *GCStore) {
	for range b.N {
		b.StopTimer()
		s := next(b)
		ws := filepath.Join(s.Dir, "ws")
		capture := func(i int) time.Duration {
			if err := writeFile(filepath.Join(ws, "edited.txt"), fmt.Sprint("edit ", i)); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			w, err := s.DB.AcquireWriter(ctx, "ws")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.DB.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws}); err != nil {
				b.Fatal(err)
			}
			w.Release(ctx)
			return time.Since(start)
		}
		capture(-1) // the first capture reads everything
		b.StartTimer()
		var idle []time.Duration
		for i := range 30 {
			idle = append(idle, capture(i))
		}
		var during []time.Duration
		done := make(chan sbxdb.SweepResult)
		go func() {
			res, err := s.DB.Sweep(ctx, sbxdb.SweepOptions{OlderThan: 24 * time.Hour})
			if err != nil {
				b.Error(err)
			}
			done <- res
		}()
	loop:
		for i := 0; ; i++ {
			select {
			case res := <-done:
				if len(res.Deleted) != s.Unreferenced {
					b.Fatalf("swept %d, want %d", len(res.Deleted), s.Unreferenced)
				}
				break loop
			default:
				during = append(during, capture(1000+i))
			}
		}
		b.StopTimer()
		if len(during) == 0 {
			b.Fatal("the sweep ended before a capture began")
		}
		slices.Sort(idle)
		slices.Sort(during)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(idle[len(idle)/2]), "idle-p50-ms")
		b.ReportMetric(ms(idle[len(idle)-1]), "idle-max-ms")
		b.ReportMetric(ms(during[len(during)/2]), "sweep-p50-ms")
		b.ReportMetric(ms(during[len(during)-1]), "sweep-max-ms")
		b.ReportMetric(float64(len(during)), "captures-during-sweep")
		s.DB.Close()
	}
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}
