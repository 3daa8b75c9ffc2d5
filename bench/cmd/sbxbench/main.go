// Command sbxbench is sbxdb's one benchmark command: it runs every
// benchmark of the engine in one process and prints one table.
//
//  1. Capture and restore of a generated agent workspace with a
//     node_modules part (bench/workload) against its peers on the same tree
//     in the same run: `git add -A && git commit`, `tar -cf - . | zstd -1
//     -T0` (and `zstd -d | tar -x`), restic (`restic backup` / `restic
//     restore`) and kopia (`kopia snapshot create` / `kopia snapshot
//     restore`) when they are on PATH: first capture (wall and CPU time),
//     bytes stored, the walk floor, unchanged tree, 1 % edit (in process
//     and as a process), restore, peak RSS of a capture and a restore in
//     a process of their own, Open of stores of 16 MB to 1 GB, and a large
//     file on one core. sbxdb captures with no default exclusions, so that
//     every tool stores the same files.
//  2. The engine core (bench/*_test.go): durable Append, serial and at 8
//     and 64 concurrent writers, against raw bbolt doing the same writes;
//     Get of a 1,000-file checkpoint; List of a 1,000-checkpoint thread.
//  3. Garbage collection (bench/gcbench): mark throughput, sweep keys/s
//     and write-lock time per million references, capture latency alone
//     and during a sweep.
//  4. Shared metadata: durable appends at 1, 8 and 64 writers with the
//     metadata in PostgreSQL, through one engine handle and through two
//     sharing the database, against bbolt (--pg URL, else a throw-away
//     cluster when PostgreSQL's binaries are installed).
//  5. S3 blobs: first capture, 1 % edit capture and restore of the
//     generated tree with bbolt + the blob directory, PostgreSQL + the
//     blob directory and PostgreSQL + an S3 bucket (versitygw on loopback,
//     started here), a cold-cache restore through a second handle, and
//     the S3 requests each costs.
//  6. Network: PostgreSQL + S3 behind a loopback proxy delaying each
//     direction by 0 and by --net-delay (internal/testkit/netdelay):
//     appends/s of 64 writers through 1, 2 and 4 servers, first capture,
//     1 % edit capture and cold restore against the local store, and the
//     PostgreSQL round trips of each.
//
// The table ends with one row per performance target, met or not.
//
// The engine-core and GC benchmark bodies are those of `go test -bench`
// (package bench/suite), run here with testing.Benchmark.
//
// Usage:
//
//	go run ./bench/cmd/sbxbench [--quick | --smoke] [--runs N] [--work DIR] [--json FILE] [--chart FILE.svg] [--pg URL]
//
// Every figure is the median of --runs runs with min–max, and every ratio
// is computed run by run within this invocation. Everything is prepared
// before it is timed, and nothing is deleted until the end: on this
// machine's ext4 (no journal), file creation after mass deletes is 3–15x
// slower for minutes.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/bench/peers"
	"github.com/sbxdb/sbxdb/bench/suite"
	"github.com/sbxdb/sbxdb/bench/workload"
)

// config is the command line.
type config struct {
	quick     bool
	runs      int
	work      string
	jsonOut   string
	chartOut  string
	largeMiB  int
	benchtime string
	gcRefs    int
	pg        string
	profile   string
	only      map[string]bool
	smoke     bool
	netDelay  time.Duration
	be        *backends // started on first use (backends.go)
}

const usage = `usage: go run ./bench/cmd/sbxbench [flags]

Runs every sbxdb benchmark and prints one markdown table to stdout (progress
goes to stderr): capture and restore of a generated workspace against git,
tar | zstd -1 -T0, restic and kopia (when on PATH), Open of stores up to
1 GB, the engine core (Append serial
and at 8/64 writers against raw bbolt, Get, List) and garbage collection
(mark, sweep, capture during a sweep), and appends with the metadata in
PostgreSQL against bbolt (--pg, else a throw-away cluster), and capture
and restore with the blobs in S3 (versitygw on loopback) against local
storage, and both again behind a loopback proxy that delays each direction
(the network section, --net-delay). Each figure is the median of --runs
runs with min–max; each ratio is computed run by run within this run.

Duration on 2 cores: --quick a few minutes (2,250-file tree of ~31 MB,
Open stores up to 256 MB, 256 MiB large file, 300 ms per engine-core
benchmark, 100,000 GC references). The default full run (22,500-file tree
of ~235 MB, Open stores up to 1 GB, 2 GiB large file, 2 s per engine-core
benchmark, 1,000,000 GC references) takes longer and needs about 20 GB
free in the work directory. --smoke runs every section once on tiny
inputs, as CI does: a minute or two.

Flags:
`

func main() {
	testing.Init() // testing.Benchmark reads -test.benchtime, set per benchmark
	fs := flag.NewFlagSet("sbxbench", flag.ExitOnError)
	cfg := &config{}
	fs.BoolVar(&cfg.quick, "quick", false, "small scale everywhere: a few minutes on 2 cores")
	fs.BoolVar(&cfg.smoke, "smoke", false, "every section once on tiny inputs, as CI runs it (--quick, one run, a small tree, short benchmarks); fails when PostgreSQL or the S3 server cannot run")
	fs.DurationVar(&cfg.netDelay, "net-delay", time.Millisecond, "the network section's one-way delay, each direction, besides none")
	fs.IntVar(&cfg.runs, "runs", 3, "timed runs per figure (median, min–max); at least 3 for the README")
	fs.StringVar(&cfg.work, "work", "", "work directory (default: a new temporary directory, removed at the end)")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write the whole table as JSON to this file")
	fs.StringVar(&cfg.chartOut, "chart", "", "also write an SVG bar chart of first-capture and restore MB/s to this file")
	fs.IntVar(&cfg.largeMiB, "large-mib", 0, "size of the large-file capture in MiB, 0 for the default (2048, --quick 256); -1 skips it")
	fs.StringVar(&cfg.benchtime, "benchtime", "", "time per engine-core benchmark and run (default 2s, --quick 300ms)")
	fs.IntVar(&cfg.gcRefs, "gc-refs", 0, "blob references of the GC stores, a multiple of 100 (default 1000000, --quick 100000)")
	fs.StringVar(&cfg.pg, "pg", "", "PostgreSQL server `URL` whose user may create databases, for the shared-metadata and s3 sections (default: a throw-away cluster)")
	fs.StringVar(&cfg.profile, "cpuprofile", "", "write a CPU profile of the whole run to this `file` (go tool pprof)")
	only := fs.String("only", "", "comma-separated sections to run: capture, core, serve, gc, shared, s3, network (default all)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	switch fs.Arg(0) { // internal: one operation in a process of its own
	case "large-child":
		os.Exit(largeChild(fs.Arg(1), fs.Arg(2)))
	case "capture-child":
		os.Exit(captureChild(fs.Arg(1), fs.Arg(2)))
	case "restore-child":
		os.Exit(restoreChild(fs.Arg(1), fs.Arg(2)))
	}
	if fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	cfg.only = map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case "capture", "core", "serve", "gc", "shared", "s3", "network":
			cfg.only[s] = true
		default:
			fmt.Fprintf(os.Stderr, "sbxbench: unknown section %q in --only\n", s)
			os.Exit(2)
		}
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "sbxbench:", err)
		os.Exit(1)
	}
}

func (c *config) wants(section string) bool { return len(c.only) == 0 || c.only[section] }

func run(cfg *config) error {
	ctx := context.Background()
	start := time.Now()
	if cfg.runs < 1 {
		return fmt.Errorf("--runs must be at least 1")
	}
	if cfg.smoke {
		cfg.quick = true
		cfg.runs = 1
		if cfg.benchtime == "" {
			cfg.benchtime = "100ms"
		}
		if cfg.gcRefs == 0 {
			cfg.gcRefs = 10_000
		}
		if cfg.largeMiB == 0 {
			cfg.largeMiB = 16
		}
	}
	if cfg.netDelay <= 0 {
		return fmt.Errorf("--net-delay must be positive")
	}
	spec := workload.Default()
	if cfg.quick {
		spec = workload.Quick()
	}
	if cfg.smoke {
		spec = smokeSpec()
	}
	def := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if cfg.quick {
				*v = quick
			}
		}
	}
	def(&cfg.largeMiB, 2048, 256)
	def(&cfg.gcRefs, suite.FullGC.References, suite.QuickGC.References)
	if cfg.benchtime == "" {
		cfg.benchtime = "2s"
		if cfg.quick {
			cfg.benchtime = "300ms"
		}
	}
	if err := flag.CommandLine.Set("test.benchtime", cfg.benchtime); err != nil {
		return fmt.Errorf("--benchtime: %v", err)
	}
	if cfg.gcRefs < 100 || cfg.gcRefs%100 != 0 {
		return fmt.Errorf("--gc-refs must be a positive multiple of 100")
	}
	if cfg.wants("capture") {
		for _, tool := range []string{"git", "tar", "zstd", "bash"} {
			if !peers.Available(tool) {
				return fmt.Errorf("%s is not installed (.ci/run installs the peers)", tool)
			}
		}
	}
	if cfg.work == "" {
		d, err := os.MkdirTemp("", "sbxbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		cfg.work = d
	} else if err := os.MkdirAll(cfg.work, 0o755); err != nil {
		return err
	}
	if empty, err := isEmpty(cfg.work); err != nil || !empty {
		return fmt.Errorf("work directory %s must be empty or new (%v)", cfg.work, err)
	}

	if cfg.profile != "" {
		f, err := os.Create(cfg.profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	defer cfg.closeBackends()
	if cfg.smoke && (cfg.wants("shared") || cfg.wants("s3") || cfg.wants("network")) {
		if be := cfg.backends(); be.s3 == nil {
			return fmt.Errorf("--smoke runs every section: %s", be.whyS3)
		}
	}

	rep := newReport()
	rep.Command = "sbxbench " + strings.Join(os.Args[1:], " ")
	rep.Quick, rep.Runs = cfg.quick, cfg.runs
	rep.Started = start.UTC().Format(time.RFC3339)
	rep.Machine = machine(cfg.work)
	rep.Settings = Settings{LargeMiB: max(cfg.largeMiB, 0), CoreBenchtime: cfg.benchtime, GCReferences: cfg.gcRefs}

	// Prepare: the tree and the CLI binary, then the GC stores (built and
	// copied before anything is timed).
	var st workload.Stats
	tree := filepath.Join(cfg.work, "tree")
	cli := ""
	if cfg.wants("capture") || cfg.wants("serve") {
		t0 := time.Now()
		var err error
		if st, err = workload.Generate(tree, spec); err != nil {
			return err
		}
		progress("generated %d files, %d symlinks, %.1f MB in %v", st.Files, st.Symlinks, float64(st.Bytes)/1e6, time.Since(t0).Round(time.Millisecond))
		rep.Tree = TreeInfo{Spec: spec, Files: st.Files, Dirs: st.Dirs, Symlinks: st.Symlinks, Bytes: st.Bytes}
		cli = filepath.Join(cfg.work, "sbxdb")
		if out, err := exec.Command("go", "build", "-o", cli, "github.com/sbxdb/sbxdb/cmd/sbxdb").CombinedOutput(); err != nil {
			rep.check("CLI capture", fmt.Sprintf("not measured: building the CLI failed: %v: %s", err, bytes.TrimSpace(out)))
			cli = ""
		}
	}
	var gc *gcStores
	if cfg.wants("gc") {
		var err error
		if gc, err = prepareGC(cfg); err != nil {
			return err
		}
	}
	if cfg.wants("capture") {
		time.Sleep(2100 * time.Millisecond) // every file older than the stat cache's racy window
		if err := captureBench(ctx, rep, cfg, tree, spec, st, cli); err != nil {
			return err
		}
	}
	if cfg.wants("core") {
		if err := coreBench(rep, cfg); err != nil {
			return err
		}
	}
	if cfg.wants("serve") {
		if err := serveBench(rep, cfg); err != nil {
			return err
		}
		if cli != "" {
			if err := cliServedBench(rep, cfg, tree, cli); err != nil {
				return err
			}
		}
	}
	if gc != nil {
		if err := gcBench(rep, cfg, gc); err != nil {
			return err
		}
	}
	if cfg.wants("shared") {
		if err := sharedBench(rep, cfg); err != nil {
			return err
		}
	}
	if cfg.wants("s3") {
		if err := s3Bench(ctx, rep, cfg, spec); err != nil {
			return err
		}
	}
	if cfg.wants("network") {
		if err := networkBench(ctx, rep, cfg); err != nil {
			return err
		}
	}

	addTargets(rep)
	if cfg.smoke {
		if err := smokeCheck(rep, cfg); err != nil {
			writeTable(os.Stdout, rep)
			return err
		}
	}
	rep.Finished = time.Now().UTC().Format(time.RFC3339)
	rep.WallSeconds = time.Since(start).Seconds()
	writeTable(os.Stdout, rep)
	if cfg.jsonOut != "" {
		if err := writeJSON(cfg.jsonOut, rep); err != nil {
			return err
		}
	}
	if cfg.chartOut != "" {
		if err := os.WriteFile(cfg.chartOut, chart(rep), 0o644); err != nil {
			return err
		}
	}
	progress("done in %v", time.Since(start).Round(time.Second))
	return nil
}

// smokeCheck fails a --smoke run of every section that left a row without
// a figure for any reason but an optional peer (restic, kopia) not being
// installed: every section ran and produced its numbers.
func smokeCheck(rep *Report, cfg *config) error {
	if len(cfg.only) > 0 {
		return nil
	}
	var bad []string
	for _, r := range rep.Rows {
		if r.Missing != "" && !strings.Contains(r.Missing, "not installed") {
			bad = append(bad, fmt.Sprintf("%s (%s)", r.ID, r.Missing))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("--smoke: rows without a figure: %s", strings.Join(bad, "; "))
	}
	return nil
}

// smokeSpec is --smoke's tree: a few hundred files, one binary, every
// kind of entry of the quick tree.
func smokeSpec() workload.Spec {
	s := workload.Quick()
	s.TextFiles, s.NodeModules.Files = 60, 240
	return s
}

func isEmpty(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	return len(entries) == 0, err
}

// machine gathers the facts of the machine and the source tree.
func machine(work string) Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, Tools: map[string]string{}}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	out := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0") // git status must not write the index
		b, err := cmd.Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	m.WorkFS = out("stat", "-f", "-c", "%T", work)
	if m.Commit = out("git", "rev-parse", "HEAD"); m.Commit != "" {
		// bench/results is left out: the report being written there (quick.md
		// redirected from stdout) is not a change to the code measured.
		dirty := out("git", "status", "--porcelain", "--untracked-files=no",
			"--", ":/", ":(top,exclude)bench/results") != ""
		m.Dirty = &dirty
	}
	first := func(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }
	m.Tools["git"] = first(out("git", "--version"))
	m.Tools["tar"] = first(out("tar", "--version"))
	m.Tools["zstd"] = first(out("zstd", "--version"))
	m.Tools["restic"] = first(out("restic", "version"))
	m.Tools["kopia"] = first(out("kopia", "--version"))
	return m
}
