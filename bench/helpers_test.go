// Package bench holds the benchmark suites of sbxdb. This file builds the
// stores and checkpoints the engine-core benchmarks use; run.sh runs them and
// README.md reports the results.
//
// The machine these run on is shared and noisy, and its fsync time varies a
// lot between runs, so no benchmark asserts a speed: every ratio is read from
// a baseline measured in the same run.
package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

var ctx = context.Background()

// baseCreatedAt is the createdAt of every chain's first checkpoint; each
// later checkpoint of a chain is 1 ms newer.
const baseCreatedAt = 1_700_000_000_000

// durable are the engine options of every timed store: fsync on (the
// default) and leases long enough never to expire during a run.
func durable() *engine.Options {
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
func (wr *writer) appendNext(db *engine.DB) error {
	cp := wr.g.next()
	head, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: wr.g.head, Writer: wr.w})
	if err != nil {
		return err
	}
	wr.g.head = head
	return nil
}

// openDB opens a fresh engine store in its own temporary directory.
func openDB(tb testing.TB, opts *engine.Options) *engine.DB {
	tb.Helper()
	db, err := engine.Open(tb.TempDir(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// writers acquires one lease each on n threads "w00", "w01", … (acquired
// concurrently, so setup shares commits too) with chains of nFiles files.
func writers(tb testing.TB, db *engine.DB, n, nFiles int) []*writer {
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

// filledStore makes a store holding one thread, "t", with a chain of count
// checkpoints of nFiles files each, closes it and reopens it with the
// durable options; it returns the reopened store and the thread's head.
// The chain is written with fsync off (setup only): reads never sync.
func filledStore(tb testing.TB, count, nFiles int) (*engine.DB, string) {
	tb.Helper()
	dir := tb.TempDir()
	fast := durable()
	fast.NoSync = true
	db, err := engine.Open(dir, fast)
	if err != nil {
		tb.Fatal(err)
	}
	wr := writers(tb, db, 1, nFiles)[0]
	for range count {
		if err := wr.appendNext(db); err != nil {
			db.Close()
			tb.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	if db, err = engine.Open(dir, durable()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db, wr.g.head
}

// reportRate reports n operations over elapsed as "appends/s", the unit the
// README's throughput ratios are computed from.
func reportRate(b *testing.B, n int, elapsed time.Duration) {
	if elapsed > 0 {
		b.ReportMetric(float64(n)/elapsed.Seconds(), "appends/s")
	}
}
