// Package gcbench measures garbage collection at the scale of issue 4: a
// store whose checkpoints hold 1,000,000 blob references, with 100,000
// more blobs that nothing references. Run it with
//
//	go test ./bench/gcbench -run '^$' -bench . -benchtime 1x -count 3 -timeout 60m
//
// Each benchmark builds its store outside the timer (about a minute).
package gcbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/gc"
)

const (
	referenced    = 1_000_000 // blob references held by checkpoints
	perCheckpoint = 10_000    // files per checkpoint, each its own blob
)

// churns are the numbers of blobs no checkpoint names, which a sweep
// deletes: 1% and 10% of the references.
var churns = []int{10_000, 100_000}

// t0 is when the blobs were uploaded; sweeps run two days later.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type fixture struct {
	db    *engine.DB
	dir   string
	clock atomic.Int64
}

// build makes the store: referenced+unreferenced tiny blobs, and
// referenced/perCheckpoint checkpoints naming the first referenced of them.
// It is written without fsync, then reopened with fsync on, as a store is
// used. With pending, the last 36 checkpoints' references are left pending
// (the engine folds every 64 appends), each with keys of its own: the
// costliest case for counting; else every reference is folded.
func build(b *testing.B, unreferenced int, pending bool) *fixture {
	b.Helper()
	ctx := context.Background()
	f := &fixture{dir: b.TempDir()}
	f.clock.Store(t0.UnixMilli())
	now := func() time.Time { return time.UnixMilli(f.clock.Load()) }
	foldAfter := 0 // the default
	if !pending {
		foldAfter = 1
	}
	db, err := engine.Open(f.dir, &engine.Options{NoSync: true, Now: now, RefFoldAfter: foldAfter})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 0, referenced+unreferenced)
	for start := 0; start < referenced+unreferenced; start += 100_000 {
		batch := db.Blobs().NewBatch()
		var payload [16]byte
		for i := start; i < min(start+100_000, referenced+unreferenced); i++ {
			binary.LittleEndian.PutUint64(payload[:], uint64(i))
			res, err := batch.Add(ctx, cas.Files, payload[:])
			if err != nil {
				b.Fatal(err)
			}
			keys = append(keys, res.Key)
		}
		if err := batch.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		batch.Close()
	}
	w, err := db.AcquireWriter(ctx, "th")
	if err != nil {
		b.Fatal(err)
	}
	head := ""
	for c := range referenced / perCheckpoint {
		files := make([]chain.Entry, perCheckpoint)
		for i := range files {
			files[i] = chain.Entry{Path: fmt.Sprintf("f%05d", i), Kind: chain.KindFile, Size: 16, BlobKey: keys[c*perCheckpoint+i]}
		}
		cp := &chain.Checkpoint{ID: fmt.Sprintf("cp%03d", c), ThreadID: "th", ParentID: head, CreatedAt: t0.UnixMilli() + int64(c),
			Reason: chain.ReasonAutomatic, Files: files}
		if head, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: w.Writer}); err != nil {
			b.Fatal(err)
		}
	}
	w.Release(ctx)
	db.Close()
	if f.db, err = engine.Open(f.dir, &engine.Options{Now: now}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.db.Close() })
	f.clock.Store(t0.Add(48 * time.Hour).UnixMilli())
	return f
}

// BenchmarkMark reads the marks: every referenced key with its count, from
// a store whose references are all folded, and from one where 36
// checkpoints of 10,000 keys each are pending (the costliest case).
func BenchmarkMark(b *testing.B) {
	for _, pending := range []bool{false, true} {
		name := "folded"
		if pending {
			name = "pending"
		}
		b.Run(name, func(b *testing.B) {
			f := build(b, churns[0], pending)
			ctx := context.Background()
			for b.Loop() {
				refs, err := f.db.BlobReferences(ctx)
				if err != nil || len(refs) != referenced {
					b.Fatalf("%d refs, %v", len(refs), err)
				}
			}
			b.ReportMetric(float64(referenced)*float64(b.N)/b.Elapsed().Seconds(), "refs/s")
		})
	}
}

// BenchmarkSweep is one sweep of the whole store: list every blob, read 1M
// references, check none is missing, delete the unreferenced ones.
// It reports keys examined per second and how long the sweep held the
// store's write lock, per million references.
func BenchmarkSweep(b *testing.B) {
	for _, churn := range churns {
		b.Run(fmt.Sprintf("delete-%d", churn), func(b *testing.B) { sweep(b, churn) })
	}
}

func sweep(b *testing.B, unreferenced int) {
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		f := build(b, unreferenced, true)
		before := f.db.WriteStats()
		b.StartTimer()
		start := time.Now()
		res, err := f.db.Sweep(ctx, engine.SweepOptions{OlderThan: 24 * time.Hour})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != nil || len(res.Deleted) != unreferenced {
			b.Fatalf("swept %d, %v", len(res.Deleted), err)
		}
		after := f.db.WriteStats()
		b.ReportMetric(float64(res.Examined)/elapsed.Seconds(), "keys/s")
		b.ReportMetric(float64((after.Held-before.Held).Milliseconds())/(referenced/1e6), "lock-ms/1M-refs")
		b.ReportMetric(float64(after.Transactions-before.Transactions), "write-txs")
		f.db.Close()
	}
}

// BenchmarkCaptureDuringSweep captures a small workspace again and again
// (one file changed each time) into the same store, first alone and then
// while a sweep deleting 100,000 blobs runs, and reports the capture
// latencies of both.
func BenchmarkCaptureDuringSweep(b *testing.B) {
	const unreferenced = 100_000
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		// Folded references: a fold of the build's pending ones would
		// land in the middle of the idle captures.
		f := build(b, unreferenced, false)
		ws := filepath.Join(f.dir, "ws")
		write(b, ws, 200)
		capture := func(i int) time.Duration {
			writeFile(b, filepath.Join(ws, "edited.txt"), fmt.Sprint("edit ", i))
			start := time.Now()
			w, err := f.db.AcquireWriter(ctx, "ws")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.db.Capture(ctx, engine.CaptureInput{Writer: w.Writer, Dir: ws}); err != nil {
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
		done := make(chan gc.SweepResult)
		go func() {
			res, err := f.db.Sweep(ctx, engine.SweepOptions{OlderThan: 24 * time.Hour})
			if err != nil {
				b.Error(err)
			}
			done <- res
		}()
	loop:
		for i := 0; ; i++ {
			select {
			case res := <-done:
				if len(res.Deleted) != unreferenced {
					b.Fatalf("swept %d", len(res.Deleted))
				}
				break loop
			default:
				during = append(during, capture(1000+i))
			}
		}
		b.StopTimer()
		slices.Sort(idle)
		slices.Sort(during)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(idle[len(idle)/2]), "idle-p50-ms")
		b.ReportMetric(ms(idle[len(idle)-1]), "idle-max-ms")
		b.ReportMetric(ms(during[len(during)/2]), "sweep-p50-ms")
		b.ReportMetric(ms(during[len(during)-1]), "sweep-max-ms")
		b.ReportMetric(float64(len(during)), "captures-during-sweep")
		f.db.Close()
	}
}

func write(b *testing.B, dir string, n int) {
	b.Helper()
	for i := range n {
		writeFile(b, filepath.Join(dir, fmt.Sprintf("src/f%03d.go", i)), fmt.Sprintf("package src // file %d\n", i))
	}
}

func writeFile(b *testing.B, path, content string) {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
}
