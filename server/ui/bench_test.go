//go:build unix

package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// The page-load budgets: the threads page of a store with
// 10,000 threads and the graph of a thread of 1,000 checkpoints each
// render in under 300 ms of server time. These benchmarks measure that
// time, handler only (an httptest recorder, no network, no browser), over
// one store holding both: the graph's fork search therefore scans the
// roots of 2,000 other threads, its limit. bench/README.md has figures.
//
//	go test ./server/ui -run '^$' -bench . -benchtime 20x

const (
	benchThreads     = 10_000
	benchCheckpoints = 1_000
)

var bench struct {
	once sync.Once
	dir  string
	db   *engine.DB
	err  error
}

// benchUI opens (once per process) the benchmarks' store and returns a UI
// over it.
func benchUI(b *testing.B) *UI {
	b.Helper()
	bench.once.Do(func() { bench.dir, bench.db, bench.err = benchStore() })
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return New(Config{DB: bench.db, Auth: benchAuth{}, Version: "bench"})
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench.db != nil {
		bench.db.Close()
		os.RemoveAll(bench.dir)
	}
	os.Exit(code)
}

// benchStore builds a store of benchThreads threads of one checkpoint
// (thread-00000 …) and thread "long" of benchCheckpoints checkpoints
// (five files each, one of them changing, and every 50th named).
func benchStore() (string, *engine.DB, error) {
	dir, err := os.MkdirTemp("", "sbxdb-ui-bench-")
	if err != nil {
		return "", nil, err
	}
	db, err := engine.Open(filepath.Join(dir, "store"), &engine.Options{NoSync: true})
	if err != nil {
		return "", nil, err
	}
	ctx := context.Background()
	put := func(data string) (chain.Entry, error) {
		bt := db.Blobs().NewBatch()
		defer bt.Close()
		res, err := bt.Add(ctx, cas.Files, []byte(data))
		if err == nil {
			err = bt.Commit(ctx)
		}
		return chain.Entry{Kind: chain.KindFile, BlobKey: res.Key, Size: int64(len(data))}, err
	}
	var fixed []chain.Entry
	for _, p := range []string{"README.md", "go.mod", "src/a.go", "src/b.go"} {
		e, err := put("the content of " + p + "\n")
		if err != nil {
			return "", nil, err
		}
		e.Path = p
		fixed = append(fixed, e)
	}
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	thread := func(id string, n int) error {
		l, err := db.AcquireWriter(ctx, id)
		if err != nil {
			return err
		}
		head := ""
		for i := range n {
			step, err := put(fmt.Sprintf("%s step %d\n", id, i))
			if err != nil {
				return err
			}
			step.Path = "step.txt"
			cp := &chain.Checkpoint{ID: fmt.Sprintf("%s-%04d", id, i), ThreadID: id, ParentID: head,
				CreatedAt: base + int64(i)*1000, Reason: chain.ReasonAutomatic, Files: append(fixed[:len(fixed):len(fixed)], step)}
			if i%50 == 49 {
				cp.Reason, cp.Label = chain.ReasonNamed, fmt.Sprintf("milestone %d", i/50)
			}
			if head, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
				return err
			}
		}
		return db.ReleaseWriter(ctx, l.Writer)
	}
	if err := thread("long", benchCheckpoints); err != nil {
		return "", nil, err
	}
	for i := range benchThreads {
		if err := thread(fmt.Sprintf("thread-%05d", i), 1); err != nil {
			return "", nil, err
		}
	}
	return dir, db, nil
}

// benchAuth lets every request through, as the server does once it has
// authorized one.
type benchAuth struct{}

func (benchAuth) LoginRequired(*http.Request) bool                       { return false }
func (benchAuth) CSRFToken(*http.Request) string                         { return "csrf" }
func (benchAuth) CheckCSRF(_ *http.Request, got string) bool             { return got == "csrf" }
func (benchAuth) Login(http.ResponseWriter, *http.Request, string) error { return nil }
func (benchAuth) Logout(http.ResponseWriter, *http.Request)              {}

// benchPage serves GET target b.N times, checking each page has want,
// and reports the mean server time per request as ms/page and the
// process's CPU time per request as cpu-ms/page (on a loaded machine the
// wall time includes waiting for a core; the CPU time does not).
func benchPage(b *testing.B, target, want string) {
	u := benchUI(b)
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	for range b.N {
		w := httptest.NewRecorder()
		u.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), want) {
			b.Fatalf("GET %s: %d, %d bytes, without %q", target, w.Code, w.Body.Len(), want)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/page")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/page")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkThreadsPage: the first page of 10,001 threads ("long" first).
func BenchmarkThreadsPage(b *testing.B) { benchPage(b, "/ui/", "thread-00048") }

// BenchmarkThreadsPageSearch: a search matching 1,000 of them, its last page.
func BenchmarkThreadsPageSearch(b *testing.B) {
	benchPage(b, "/ui/?q=THREAD-09&page=20", "thread-09999")
}

// BenchmarkThreadGraph: the graph of the thread of 1,000 checkpoints.
func BenchmarkThreadGraph(b *testing.B) { benchPage(b, "/ui/thread?id=long", "long-0999") }
