// Package suite holds the bodies of sbxdb's engine-core and garbage
// collection benchmarks, so that two drivers run the same code:
//
//   - the go-test benchmarks (bench/*_test.go, bench/gcbench), thin
//     wrappers run by `go test -bench`;
//   - the one benchmark command, bench/cmd/sbxbench, which runs them with
//     testing.Benchmark next to the capture and restore benchmarks.
//
// Every function taking a *testing.B does its setup (opening a store,
// taking leases, filling a store) outside the timed region and reports its
// rates with b.ReportMetric. The machine these run on is shared and noisy,
// and its fsync time varies a lot between runs, so no benchmark asserts a
// speed: every ratio is read from a baseline measured in the same run.
package suite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

var ctx = context.Background()

// KeepDir, when set, is where Dir makes the directories of the stores, and
// they are not removed after the benchmark: the benchmark command sets it
// to its work directory and deletes everything only at the end (on this
// machine's ext4 without a journal, file creation after mass deletes is
// 3–15x slower for minutes). When empty, Dir is tb.TempDir().
var KeepDir string

// Dir returns a new empty directory for a store: under KeepDir and kept,
// or tb.TempDir() and removed after the benchmark.
func Dir(tb testing.TB) string {
	tb.Helper()
	if KeepDir == "" {
		return tb.TempDir()
	}
	d, err := os.MkdirTemp(KeepDir, "store-")
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// SmallFiles is the manifest size of the realistic small checkpoint.
const SmallFiles = 10

// baseCreatedAt is the createdAt of every chain's first checkpoint; each
// later checkpoint of a chain is 1 ms newer.
const baseCreatedAt = 1_700_000_000_000

// Durable returns the engine options of every timed store: fsync on (the
// default) and leases long enough never to expire during a run.
func Durable() *engine.Options {
	return &engine.Options{LeaseDuration: time.Hour, RenewAfter: time.Minute}
}

// blobKey returns a realistic file blob key: the prefix and the SHA-256 of
// the parts, as a capture of that content would compute it.
func blobKey(parts ...any) string {
	sum := sha256.Sum256(fmt.Append(nil, parts...))
	return chain.FilePrefix + hex.EncodeToString(sum[:])
}

// conversation is the two-message transcript of every small checkpoint: a
// user request and the assistant's reply, as an agent host stores them.
var conversation = []json.RawMessage{
	json.RawMessage(`{"role":"user","content":"Add a --verbose flag to the CLI and make the tests print the commands they run."}`),
	json.RawMessage(`{"role":"assistant","content":"I added the --verbose flag in cmd/app/main.go, threaded it through run(), and updated the tests to log each command. All tests pass."}`),
}

// gen produces the successive checkpoints of one thread's chain. Each
// checkpoint has its parent's files with one file changed (a new blob key
// and size), as consecutive agent runs mostly touch a few files.
type gen struct {
	thread string
	n      int
	head   string
	files  []chain.Entry
}

// newGen starts a chain of thread whose checkpoints have nFiles entries,
// paths "src/pkg%03d/file%04d.go" (ten files a package).
func newGen(thread string, nFiles int) *gen {
	g := &gen{thread: thread, files: make([]chain.Entry, nFiles)}
	for i := range g.files {
		g.files[i] = chain.Entry{
			Path:    fmt.Sprintf("src/pkg%03d/file%04d.go", i/10, i),
			Kind:    chain.KindFile,
			BlobKey: blobKey(thread, i, 0),
			Size:    int64(1024 + 37*i),
		}
	}
	return g
}

// next returns the next checkpoint of the chain, on the current head. The
// engine copies its input, so the shared files slice may change afterwards.
func (g *gen) next() *chain.Checkpoint {
	g.n++
	f := &g.files[g.n%len(g.files)]
	f.BlobKey = blobKey(g.thread, g.n%len(g.files), g.n)
	f.Size += 13
	return &chain.Checkpoint{
		ID:           fmt.Sprintf("%s-cp%08d", g.thread, g.n),
		ThreadID:     g.thread,
		ParentID:     g.head,
		CreatedAt:    baseCreatedAt + int64(g.n),
		Reason:       chain.ReasonAutomatic,
		SourceRunID:  fmt.Sprintf("run-%08d", g.n),
		Files:        g.files,
		Conversation: conversation,
	}
}

// writer is one thread's writer: its lease and its chain.
type writer struct {
	w chain.Writer
	g *gen
}

// appendNext appends the chain's next checkpoint on its head, durably.
func (wr *writer) appendNext(db sbxdb.CheckpointStore) error {
	cp := wr.g.next()
	head, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: wr.g.head, Writer: wr.w})
	if err != nil {
		return err
	}
	wr.g.head = head
	return nil
}

// openDB opens a fresh engine store in its own directory (Dir), closed
// when the benchmark ends.
func openDB(tb testing.TB, opts *engine.Options) *engine.DB {
	tb.Helper()
	db, err := engine.Open(Dir(tb), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// writers acquires one lease each on n threads "w00", "w01", … (acquired
// concurrently, so setup shares commits too) with chains of nFiles files.
func writers(tb testing.TB, db sbxdb.CheckpointStore, n, nFiles int) []*writer {
	tb.Helper()
	out := make([]*writer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			thread := fmt.Sprintf("w%02d", i)
			l, err := db.AcquireWriter(ctx, thread)
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = &writer{w: l.Writer, g: newGen(thread, nFiles)}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// FillStore writes a store into dir holding one thread, "w00", with a
// chain of count checkpoints of nFiles files each, closes it and returns
// the thread's head. The chain is written with fsync off (setup only):
// reads never sync.
func FillStore(dir string, count, nFiles int) (head string, err error) {
	fast := Durable()
	fast.NoSync = true
	db, err := engine.Open(dir, fast)
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}()
	l, err := db.AcquireWriter(ctx, "w00")
	if err != nil {
		return "", err
	}
	wr := &writer{w: l.Writer, g: newGen("w00", nFiles)}
	for range count {
		if err := wr.appendNext(db); err != nil {
			return "", err
		}
	}
	return wr.g.head, nil
}

// FilledStore makes a store with FillStore in a new directory (Dir) and
// reopens it with the durable options; it returns the reopened store
// (closed when tb ends) and the thread's head.
func FilledStore(tb testing.TB, count, nFiles int) (*engine.DB, string) {
	tb.Helper()
	dir := Dir(tb)
	head, err := FillStore(dir, count, nFiles)
	if err != nil {
		tb.Fatal(err)
	}
	db, err := engine.Open(dir, Durable())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db, head
}

// reportRate reports n operations over elapsed as "appends/s", the unit the
// throughput ratios are computed from.
func reportRate(b *testing.B, n int, elapsed time.Duration) {
	if elapsed > 0 {
		b.ReportMetric(float64(n)/elapsed.Seconds(), "appends/s")
	}
}

// AppendSerial is one goroutine appending durably on its own thread, each
// small checkpoint on the previous head. One op is one Append.
func AppendSerial(b *testing.B) {
	db := openDB(b, Durable())
	wr := writers(b, db, 1, SmallFiles)[0]
	for b.Loop() {
		if err := wr.appendNext(db); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, b.Elapsed())
}

// AppendConcurrent runs n goroutines, each appending durably to its own
// thread with its own lease; b.N appends are shared among them, so ns/op
// is wall time per append and appends/s the aggregate throughput. Each
// b.N the framework tries gets a fresh store.
func AppendConcurrent(b *testing.B, n int) {
	db := openDB(b, Durable())
	ws := writers(b, db, n, SmallFiles)
	b.ResetTimer()
	elapsed, err := appendConcurrently(db, ws, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportRate(b, b.N, elapsed)
}

// appendConcurrently makes n appends with one goroutine per writer, each
// appending to its own chain until n appends have been claimed, and returns
// the wall time and the first error.
func appendConcurrently(db sbxdb.CheckpointStore, ws []*writer, n int) (time.Duration, error) {
	ops := make([]func() error, len(ws))
	for i, wr := range ws {
		ops[i] = func() error { return wr.appendNext(db) }
	}
	return concurrently(ops, n)
}

// concurrently runs one goroutine per op, each calling its op until n
// calls have been claimed in all, and returns the wall time and the first
// error.
func concurrently(ops []func() error, n int) (time.Duration, error) {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	start := time.Now()
	for _, op := range ops {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

// Append1000Files is the serial durable append of a big manifest: 1,000
// file entries, one of which changes per checkpoint (so 1,000 blob
// reference counts change per append).
func Append1000Files(b *testing.B) {
	db := openDB(b, Durable())
	wr := writers(b, db, 1, 1000)[0]
	for b.Loop() {
		if err := wr.appendNext(db); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, b.Elapsed())
}

// Get is Get of head, a checkpoint of files file entries, from db (see
// FilledStore). It reports allocations.
func Get(b *testing.B, db *engine.DB, head string, files int) {
	b.ReportAllocs()
	for b.Loop() {
		cp, err := db.Get(ctx, head)
		if err != nil {
			b.Fatal(err)
		}
		if cp == nil || len(cp.Files) != files {
			b.Fatalf("Get(%s) returned %v", head, cp)
		}
	}
}

// List is List of the thread "w00" of db, which holds count checkpoints
// (see FilledStore). It reports allocations.
func List(b *testing.B, db *engine.DB, count int) {
	b.ReportAllocs()
	for b.Loop() {
		cps, err := db.List(ctx, "w00")
		if err != nil {
			b.Fatal(err)
		}
		if len(cps) != count {
			b.Fatalf("List returned %d checkpoints, want %d", len(cps), count)
		}
	}
}
