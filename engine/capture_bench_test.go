package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
)

// benchTree writes 4,000 text-like files of 1–16 KiB in 80 directories two
// levels deep, and two 3 MiB files (streamed), with mtimes an hour back.
func benchTree(b *testing.B) string {
	b.Helper()
	ws := filepath.Join(b.TempDir(), "ws")
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"func", "return", "capture", "the", "workspace", "if", "err", "nil", "{", "}", "\n"}
	old := time.Now().Add(-time.Hour)
	put := func(rel string, data []byte) {
		p := filepath.Join(ws, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		os.Chtimes(p, old, old)
	}
	for i := range 4000 {
		n := 1<<10 + r.IntN(15<<10)
		buf := make([]byte, 0, n+16)
		for len(buf) < n {
			buf = append(buf, words[r.IntN(len(words))]...)
			buf = append(buf, ' ')
		}
		put(fmt.Sprintf("d%02d/s%d/f%04d.go", i%40, i%2, i), buf)
	}
	for i := range 2 {
		big := make([]byte, 3<<20)
		for j := range big {
			big[j] = byte(r.IntN(16))
		}
		put(fmt.Sprintf("assets/big%d.bin", i), big)
	}
	return ws
}

func benchStore(b *testing.B) (*engine.DB, *sbxdb.CaptureInput) {
	b.Helper()
	db, err := engine.Open(filepath.Join(b.TempDir(), "store"), &engine.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	l, err := db.AcquireWriter(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	return db, &sbxdb.CaptureInput{Writer: l.Writer}
}

// BenchmarkCaptureCold captures the tree into an empty store: every file
// is read, hashed, compressed and written.
func BenchmarkCaptureCold(b *testing.B) {
	ws := benchTree(b)
	var cpu cpuTime
	defer cpu.report(b)
	for b.Loop() {
		b.StopTimer()
		db, in := benchStore(b)
		in.Dir = ws
		b.StartTimer()
		cpu.start()
		if _, err := db.Capture(context.Background(), *in); err != nil {
			b.Fatal(err)
		}
		cpu.stop()
		b.StopTimer()
		db.Close()
		b.StartTimer()
	}
}

// BenchmarkCaptureUnchanged captures the tree again and again: the walk
// and the stat cache, no file read.
func BenchmarkCaptureUnchanged(b *testing.B) {
	ws := benchTree(b)
	db, in := benchStore(b)
	defer db.Close()
	in.Dir = ws
	for range 2 { // the second capture trusts the first's cache
		if _, err := db.Capture(context.Background(), *in); err != nil {
			b.Fatal(err)
		}
	}
	var cpu cpuTime
	defer cpu.report(b)
	for b.Loop() {
		cpu.start()
		res, err := db.Capture(context.Background(), *in)
		cpu.stop()
		if err != nil {
			b.Fatal(err)
		}
		if res.Stats.FilesRead != 0 {
			b.Fatalf("read %d files", res.Stats.FilesRead)
		}
	}
}

// cpuTime adds up the process's CPU time (user and system) over the timed
// calls: on a shared machine it varies less than the wall time.
type cpuTime struct {
	total, at time.Duration
	n         int
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (c *cpuTime) start() { c.at = processCPU() }
func (c *cpuTime) stop()  { c.total += processCPU() - c.at; c.n++ }
func (c *cpuTime) report(b *testing.B) {
	if c.n > 0 {
		b.ReportMetric(float64(c.total.Microseconds())/1000/float64(c.n), "cpu-ms/op")
	}
}
