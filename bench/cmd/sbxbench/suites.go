package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/bench/suite"
	"github.com/sbxdb/sbxdb/engine"
)

// benchmark runs f with testing.Benchmark at the given -test.benchtime
// ("300ms", "1x") and fails when the benchmark did (testing.Benchmark
// drops the message: rerun the go-test wrapper to see it).
func benchmark(name, benchtime string, f func(b *testing.B)) (testing.BenchmarkResult, error) {
	if err := flag.CommandLine.Set("test.benchtime", benchtime); err != nil {
		return testing.BenchmarkResult{}, err
	}
	r := testing.Benchmark(f)
	if r.N == 0 {
		return r, fmt.Errorf("benchmark %s failed (its go-test wrapper in bench/ or bench/gcbench shows why)", name)
	}
	return r, nil
}

// coreBench runs the engine-core benchmarks (bench/*_test.go) runs times
// each, every run of every benchmark on fresh stores under work/core. Each
// run runs all of them back to back, in an order rotated by one every run,
// so that the ratios of a run compare figures taken seconds apart.
func coreBench(rep *Report, cfg *config) error {
	suite.KeepDir = filepath.Join(cfg.work, "core")
	if err := os.MkdirAll(suite.KeepDir, 0o755); err != nil {
		return err
	}
	// The read benchmarks share one filled store each (they only read).
	getDir, listDir := filepath.Join(cfg.work, "core-get"), filepath.Join(cfg.work, "core-list")
	getHead, err := suite.FillStore(getDir, 20, 1000)
	if err != nil {
		return err
	}
	if _, err := suite.FillStore(listDir, 1000, suite.SmallFiles); err != nil {
		return err
	}
	getDB, err := engine.Open(getDir, suite.Durable())
	if err != nil {
		return err
	}
	defer getDB.Close()
	listDB, err := engine.Open(listDir, suite.Durable())
	if err != nil {
		return err
	}
	defer listDB.Close()

	benches := []bench{
		{"raw", suite.RawBoltUpdate},
		{"serial", suite.AppendSerial},
		{"raw8", func(b *testing.B) { suite.RawBoltConcurrent(b, 8) }},
		{"w8", func(b *testing.B) { suite.AppendConcurrent(b, 8) }},
		{"raw64", func(b *testing.B) { suite.RawBoltConcurrent(b, 64) }},
		{"w64", func(b *testing.B) { suite.AppendConcurrent(b, 64) }},
		{"rawrefs", suite.RawBoltUpdateRefs},
		{"files1000", suite.Append1000Files},
		{"get", func(b *testing.B) { suite.Get(b, getDB, getHead, 1000) }},
		{"list", func(b *testing.B) { suite.List(b, listDB, 1000) }},
	}
	results, err := rotated(cfg, "engine core", benches)
	if err != nil {
		return err
	}
	metric := func(id, unit string) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, r.Extra[unit])
		}
		return v
	}
	perOp := func(id string, scale float64) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, float64(r.T.Nanoseconds())/float64(r.N)/scale)
		}
		return v
	}
	allocs := func(id string) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, float64(r.AllocsPerOp()))
		}
		return v
	}

	rep.setSection(fmt.Sprintf("Engine core: durable appends of a small checkpoint (10 files, 2 messages), fsync on, %s per benchmark and run", cfg.benchtime))
	raw := rep.add("core.append.raw", "raw bbolt Update, 1 writer (the same writes)", "appends/s", metric("raw", "appends/s"), "record + index key + head, no reference counts")
	serial := rep.add("core.append.serial", "sbxdb Append, serial", "appends/s", metric("serial", "appends/s"), "")
	rep.add("core.append.raw8", "raw bbolt Update, 8 writers", "appends/s", metric("raw8", "appends/s"), "one fsync per write: bbolt has no group commit")
	w8 := rep.add("core.append.w8", "sbxdb Append, 8 writers", "appends/s", metric("w8", "appends/s"), "group commit")
	rep.add("core.append.raw64", "raw bbolt Update, 64 writers", "appends/s", metric("raw64", "appends/s"), "")
	w64 := rep.add("core.append.w64", "sbxdb Append, 64 writers", "appends/s", metric("w64", "appends/s"), "group commit")
	rep.add("core.append.rawrefs", "raw bbolt Update + eager reference counts (diagnostic)", "appends/s", metric("rawrefs", "appends/s"), "what the engine wrote before lazy counts")
	rep.add("core.append.files1000", "sbxdb Append, serial, 1,000-file checkpoint", "appends/s", metric("files1000", "appends/s"), "one file changed per append")
	rep.ratio(serial, raw.ID, "÷ raw bbolt").want(">=", 0.8)
	rep.ratio(serial, "core.append.rawrefs", "÷ raw + eager refs")
	rep.ratio(w8, serial.ID, "÷ sbxdb serial").want(">=", 1)
	rep.ratio(w8, "core.append.raw8", "÷ raw bbolt 8 writers")
	rep.ratio(w64, serial.ID, "÷ sbxdb serial").want(">=", 2.5)
	rep.ratio(w64, "core.append.raw64", "÷ raw bbolt 64 writers")

	rep.setSection("Engine core: reads")
	rep.add("core.get.1000files", "sbxdb Get of a 1,000-file head checkpoint", "µs", perOp("get", 1e3), "")
	rep.add("core.get.allocs", "  allocations per Get", "allocs", allocs("get"), "")
	rep.add("core.list.1000", "sbxdb List of a thread of 1,000 small checkpoints", "ms", perOp("list", 1e6), "")
	rep.add("core.list.allocs", "  allocations per List", "allocs", allocs("list"), "")
	return nil
}

// bench is one go-test benchmark body and the id its results go under.
type bench struct {
	id string
	f  func(b *testing.B)
}

// rotated runs every benchmark cfg.runs times, each run all of them back
// to back in an order rotated by one every run, so that the ratios of a
// run compare figures taken seconds apart; it returns the results by id.
func rotated(cfg *config, what string, benches []bench) (map[string][]testing.BenchmarkResult, error) {
	results := map[string][]testing.BenchmarkResult{}
	for run := range cfg.runs {
		progress("%s, run %d of %d", what, run+1, cfg.runs)
		for i := range benches {
			b := benches[(i+run)%len(benches)]
			r, err := benchmark(b.id, cfg.benchtime, b.f)
			if err != nil {
				return nil, err
			}
			results[b.id] = append(results[b.id], r)
		}
	}
	return results, nil
}

// gcTemplate is one GC store built for the run, and its copies, one per
// run, for the benchmarks that change a store.
type gcTemplate struct {
	name        string
	unref       int
	pending, ws bool
	dir         string
	copies      []string
}

// gcStores are the stores of the GC benchmarks, prepared before anything
// is timed.
type gcStores struct {
	scale                       suite.GCScale
	pending1, pending10, folded *gcTemplate
}

// prepareGC builds the GC benchmarks' stores at cfg.gcRefs references:
// pending references with 1 % and with 10 % unreferenced blobs, and folded
// references with 10 % unreferenced blobs and a small workspace; copies
// each once per run (the sweeps change them), and syncs.
func prepareGC(cfg *config) (*gcStores, error) {
	scale := suite.GCScale{References: cfg.gcRefs}
	churns := scale.Churns()
	g := &gcStores{
		scale:     scale,
		pending1:  &gcTemplate{name: "pending-1pct", unref: churns[0], pending: true},
		pending10: &gcTemplate{name: "pending-10pct", unref: churns[1], pending: true},
		folded:    &gcTemplate{name: "folded-10pct-ws", unref: churns[1], ws: true},
	}
	t0 := time.Now()
	for _, t := range []*gcTemplate{g.pending1, g.pending10, g.folded} {
		t.dir = filepath.Join(cfg.work, "gc", t.name)
		if err := suite.BuildGCStore(t.dir, scale, t.unref, t.pending, t.ws); err != nil {
			return nil, err
		}
		for i := range cfg.runs {
			c := fmt.Sprintf("%s-run%d", t.dir, i)
			if err := suite.CopyTree(t.dir, c); err != nil {
				return nil, err
			}
			t.copies = append(t.copies, c)
		}
	}
	syscall.Sync()
	progress("built and copied the GC stores (%s references) in %v", num(float64(scale.References)), time.Since(t0).Round(time.Millisecond))
	return g, nil
}

// gcBench runs the garbage-collection benchmarks (bench/gcbench) on the
// stores prepareGC made.
func gcBench(rep *Report, cfg *config, g *gcStores) error {
	scale, churns := g.scale, g.scale.Churns()
	pending1, pending10, folded := g.pending1, g.pending10, g.folded
	// Mark reads only: on the templates, opened read-only.
	markFolded, err := suite.OpenGCStore(folded.dir, scale, folded.unref, true)
	if err != nil {
		return err
	}
	defer markFolded.DB.Close()
	markPending, err := suite.OpenGCStore(pending1.dir, scale, pending1.unref, true)
	if err != nil {
		return err
	}
	defer markPending.DB.Close()

	// The sweeps get the copy prepared for their run, opened with fsync on.
	copyOf := func(t *gcTemplate, run int) func(*testing.B) *suite.GCStore {
		return func(b *testing.B) *suite.GCStore {
			s, err := suite.OpenGCStore(t.copies[run], scale, t.unref, false)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
	}
	results := map[string][]testing.BenchmarkResult{}
	for run := range cfg.runs {
		progress("garbage collection, run %d of %d", run+1, cfg.runs)
		steps := []struct {
			id, benchtime string
			f             func(b *testing.B)
		}{
			{"mark-folded", cfg.benchtime, func(b *testing.B) { suite.Mark(b, markFolded) }},
			{"mark-pending", cfg.benchtime, func(b *testing.B) { suite.Mark(b, markPending) }},
			{"sweep-1", "1x", func(b *testing.B) { suite.Sweep(b, copyOf(pending1, run)) }},
			{"sweep-10", "1x", func(b *testing.B) { suite.Sweep(b, copyOf(pending10, run)) }},
			{"capture", "1x", func(b *testing.B) { suite.CaptureDuringSweep(b, copyOf(folded, run)) }},
		}
		for _, s := range steps {
			r, err := benchmark(s.id, s.benchtime, s.f)
			if err != nil {
				return err
			}
			results[s.id] = append(results[s.id], r)
		}
	}
	metric := func(id, unit string) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, r.Extra[unit])
		}
		return v
	}
	refs := num(float64(scale.References))
	rep.setSection(fmt.Sprintf("Garbage collection: %s references in %d checkpoints, 16-byte blobs, fsync on", refs, suite.GCCheckpoints))
	rep.add("gc.mark.folded", "mark (BlobReferences), all references folded", "refs/s", metric("mark-folded", "refs/s"), "").want(">=", 5e6)
	rep.add("gc.mark.pending", "mark, the last 36 checkpoints pending", "refs/s", metric("mark-pending", "refs/s"), "costliest case: distinct keys")
	for i, churn := range churns {
		id := []string{"sweep-1", "sweep-10"}[i]
		pct := []string{"1 %", "10 %"}[i]
		p := fmt.Sprintf("gc.sweep.%s", []string{"1pct", "10pct"}[i])
		rep.add(p+".keys_per_s", fmt.Sprintf("sweep deleting %s blobs (%s): keys examined", num(float64(churn)), pct), "keys/s", metric(id, "keys/s"), "").want(">=", 50000)
		rep.add(p+".lock_ms_per_1m_refs", "  write lock held, per 1M references", "ms", metric(id, "lock-ms/1M-refs"), "DB.WriteStats().Held across the sweep").want("<=", 300)
		rep.add(p+".write_txs", "  write transactions", "txs", metric(id, "write-txs"), "")
	}
	idle := rep.add("gc.capture.alone.p50", "capture of a 200-file workspace, alone: median", "ms", metric("capture", "idle-p50-ms"), "30 captures, one file changed each")
	idleMax := rep.add("gc.capture.alone.max", "  alone: max", "ms", metric("capture", "idle-max-ms"), "")
	during := rep.add("gc.capture.sweep.p50", fmt.Sprintf("the same capture during a sweep deleting %s blobs: median", num(float64(churns[1]))), "ms", metric("capture", "sweep-p50-ms"), "")
	duringMax := rep.add("gc.capture.sweep.max", "  during the sweep: max", "ms", metric("capture", "sweep-max-ms"), "")
	rep.add("gc.capture.sweep.count", "  captures during the sweep", "captures", metric("capture", "captures-during-sweep"), "")
	rep.ratio(during, idle.ID, "÷ alone")
	rep.ratio(duringMax, idleMax.ID, "÷ alone")
	return nil
}
