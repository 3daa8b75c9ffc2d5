// Command sbxbench measures sbxdb's capture and restore on a generated agent
// workspace against its peers on the same tree in the same run:
// `git add -A && git commit` and `tar -cf - . | zstd -1` (and
// `zstd -d | tar -x` for restore). It prints one table, every figure the
// median of --runs runs with min–max, and the ratio against its peer.
//
// Usage:
//
//	go run ./bench/cmd/sbxbench [--quick] [--runs N] [--work DIR] [--json FILE] [--large-mib N]
//
// Everything is prepared before it is timed, and nothing is deleted until
// the end: on this machine's ext4 (no journal), file creation after mass
// deletes is 3–15x slower for minutes. Each timed run writes into a fresh
// store, git directory, archive or restore target.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb/bench/peers"
	"github.com/sbxdb/sbxdb/bench/workload"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
)

// row is one line of the report.
type row struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`
	Values []float64 `json:"values"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Peer   string    `json:"peer,omitempty"` // the row this one is compared with
	Ratio  float64   `json:"ratio,omitempty"`
	Note   string    `json:"note,omitempty"`
}

type report struct {
	Started string            `json:"started"`
	Go      string            `json:"go"`
	CPUs    int               `json:"cpus"`
	Tree    map[string]any    `json:"tree"`
	Rows    []*row            `json:"rows"`
	Checks  map[string]string `json:"checks"`
	byName  map[string]*row
}

func (r *report) add(name, unit string, values []float64, note string) *row {
	x := &row{Name: name, Unit: unit, Values: values, Median: median(values), Min: slices.Min(values), Max: slices.Max(values), Note: note}
	r.Rows = append(r.Rows, x)
	r.byName[name] = x
	fmt.Fprintf(os.Stderr, "  %-44s %10.3f %s  (%.3f–%.3f)\n", name, x.Median, unit, x.Min, x.Max)
	return x
}

func (r *report) compare(name, peer string) {
	a, b := r.byName[name], r.byName[peer]
	if a != nil && b != nil && b.Median != 0 {
		a.Peer, a.Ratio = peer, a.Median/b.Median
	}
}

func main() {
	quick := flag.Bool("quick", false, "small tree (2,000 files, ~30 MB) and 3 runs: under 2 minutes")
	runs := flag.Int("runs", 3, "timed runs per figure (median, min–max)")
	work := flag.String("work", "", "work directory (default: a new temporary directory, removed at the end)")
	jsonOut := flag.String("json", "", "also write the report as JSON to this file")
	largeMiB := flag.Int("large-mib", 2048, "size of the large-file capture in MiB (0 skips it)")
	flag.Parse()
	if flag.Arg(0) == "large-child" { // internal: one large capture in its own process
		os.Exit(largeChild(flag.Arg(1), flag.Arg(2)))
	}
	if err := run(*quick, *runs, *work, *jsonOut, *largeMiB); err != nil {
		fmt.Fprintln(os.Stderr, "sbxbench:", err)
		os.Exit(1)
	}
}

func run(quick bool, runs int, work, jsonOut string, largeMiB int) error {
	ctx := context.Background()
	if runs < 1 {
		return fmt.Errorf("--runs must be at least 1")
	}
	for _, tool := range []string{"git", "tar", "zstd"} {
		if !peers.Available(tool) {
			return fmt.Errorf("%s is not installed (.ci/run installs the peers)", tool)
		}
	}
	if work == "" {
		d, err := os.MkdirTemp("", "sbxbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		work = d
	}
	spec := workload.Default()
	if quick {
		spec = workload.Quick()
		if largeMiB > 256 {
			largeMiB = 256
		}
	}
	rep := &report{Started: time.Now().UTC().Format(time.RFC3339), Go: runtime.Version(), CPUs: runtime.NumCPU(),
		byName: map[string]*row{}, Checks: map[string]string{}}

	// Prepare: the tree, the CLI binary.
	tree := filepath.Join(work, "tree")
	t0 := time.Now()
	st, err := workload.Generate(tree, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "generated %d files, %d symlinks, %.1f MB in %v\n", st.Files, st.Symlinks, float64(st.Bytes)/1e6, time.Since(t0).Round(time.Millisecond))
	rep.Tree = map[string]any{"files": st.Files, "symlinks": st.Symlinks, "dirs": st.Dirs, "bytes": st.Bytes, "spec": spec}
	cli := filepath.Join(work, "sbxdb")
	if out, err := exec.Command("go", "build", "-o", cli, "./cmd/sbxdb").CombinedOutput(); err != nil {
		rep.Checks["cli capture"] = fmt.Sprintf("not measured: building the CLI failed: %v: %s", err, bytes.TrimSpace(out))
		cli = ""
	}
	time.Sleep(2100 * time.Millisecond) // every file older than the stat cache's racy window

	// First capture: a fresh store / git dir / archive each run.
	var sbx, git, tz []float64
	var blobBytes, tarBytes, gitBytes int64
	for i := range runs {
		store := filepath.Join(work, fmt.Sprintf("store%d", i))
		d, err := timeCapture(ctx, store, tree, "bench")
		if err != nil {
			return err
		}
		sbx = append(sbx, d.Seconds())
		blobBytes, _ = peers.DirBytes(filepath.Join(store, "blobs"))
		d, err = gitCommit(filepath.Join(work, fmt.Sprintf("git%d", i)), tree, true)
		if err != nil {
			return err
		}
		git = append(git, d.Seconds())
		gitBytes, _ = peers.DirBytes(filepath.Join(work, fmt.Sprintf("git%d", i), "objects"))
		res, err := peers.TarZstd(tree, filepath.Join(work, fmt.Sprintf("tree%d.tar.zst", i)), 1)
		if err != nil {
			return err
		}
		tz = append(tz, res.Elapsed.Seconds())
		tarBytes = res.Bytes
	}
	fmt.Fprintln(os.Stderr, "first capture:")
	rep.add("sbxdb first capture", "s", sbx, "Open + Capture in process, fsync on")
	rep.add("git add -A && git commit (first)", "s", git, "")
	rep.add("tar | zstd -1 (first)", "s", tz, "")
	rep.compare("sbxdb first capture", "git add -A && git commit (first)")
	rep.add("sbxdb vs tar|zstd, first capture", "x", ratios(sbx, tz), "per-run ratio; target ≤ 2")
	rep.add("sbxdb blob bytes", "MB", []float64{float64(blobBytes) / 1e6}, "packs + large files")
	rep.add("tar | zstd -1 archive", "MB", []float64{float64(tarBytes) / 1e6}, "")
	rep.add("git objects", "MB", []float64{float64(gitBytes) / 1e6}, "")
	rep.compare("sbxdb blob bytes", "tar | zstd -1 archive")

	// Unchanged tree: store0 and git0 again. The first repeat is a warm-up.
	store := filepath.Join(work, "store0")
	db, err := engine.Open(store, nil)
	if err != nil {
		return err
	}
	w, err := db.AcquireWriter(ctx, "bench")
	if err != nil {
		return err
	}
	capture := func() (*engine.CaptureResult, time.Duration, error) {
		t := time.Now()
		res, err := db.Capture(ctx, engine.CaptureInput{Writer: w.Writer, Dir: tree})
		return res, time.Since(t), err
	}
	if _, _, err := capture(); err != nil {
		return err
	}
	var unch, unchRead, gitUnch []float64
	for range runs {
		res, d, err := capture()
		if err != nil {
			return err
		}
		unch = append(unch, d.Seconds()*1000)
		unchRead = append(unchRead, float64(res.Stats.BytesRead))
		d, err = gitCommit(filepath.Join(work, "git0"), tree, false)
		if err != nil {
			return err
		}
		gitUnch = append(gitUnch, d.Seconds()*1000)
	}
	fmt.Fprintln(os.Stderr, "unchanged tree:")
	rep.add("sbxdb capture, unchanged", "ms", unch, "in process; target ≤ 100 ms")
	rep.add("sbxdb capture, unchanged: bytes read", "B", unchRead, "target 0")
	rep.add("git add -A && git commit (unchanged)", "ms", gitUnch, "")
	rep.compare("sbxdb capture, unchanged", "git add -A && git commit (unchanged)")

	// 1% edit: the same edit for every tool, then 2.1 s, so the edit is
	// older than the racy window as after any real agent run.
	var edit, gitEdit, hashComp, growth, changed []float64
	for i := range runs {
		paths, nbytes, err := workload.Edit(tree, spec, 0.01, i+1)
		if err != nil {
			return err
		}
		hc, compressed, err := hashCompress(tree, paths)
		if err != nil {
			return err
		}
		time.Sleep(2100 * time.Millisecond)
		before, _ := peers.DirBytes(filepath.Join(store, "blobs"))
		res, d, err := capture()
		if err != nil {
			return err
		}
		after, _ := peers.DirBytes(filepath.Join(store, "blobs"))
		edit = append(edit, d.Seconds()*1000)
		hashComp = append(hashComp, hc.Seconds()*1000)
		growth = append(growth, float64(after-before)/float64(max(compressed, 1)))
		changed = append(changed, float64(nbytes)/1e6)
		if res.Stats.FilesRead > len(paths) {
			rep.Checks[fmt.Sprintf("edit round %d", i+1)] = fmt.Sprintf("read %d files for %d edited", res.Stats.FilesRead, len(paths))
		}
		gd, err := gitCommit(filepath.Join(work, "git0"), tree, false)
		if err != nil {
			return err
		}
		gitEdit = append(gitEdit, gd.Seconds()*1000)
	}
	fmt.Fprintln(os.Stderr, "1% edit:")
	rep.add("sbxdb capture after 1% edit", "ms", edit, "")
	rep.add("hash + compress the changed bytes", "ms", hashComp, "sha256 + zstd, one core")
	rep.add("changed bytes", "MB", changed, "")
	rep.add("git add -A && git commit (1% edit)", "ms", gitEdit, "")
	rep.compare("sbxdb capture after 1% edit", "git add -A && git commit (1% edit)")
	rep.add("blob growth / changed bytes compressed", "x", growth, "target ≤ 2")
	budget := 2*median(unch) + median(hashComp)
	rep.Checks["1% edit budget (2x unchanged + hash/compress)"] = fmt.Sprintf("%.1f ms, measured %.1f ms", budget, median(edit))

	// The CLI as a whole process, unchanged tree, on its own thread.
	db.Close()
	var cliUnch []float64
	for i := range runs + 2 {
		if cli == "" {
			break
		}
		t := time.Now()
		out, err := exec.Command(cli, "capture", tree, "--thread", "cli", "--db", store).CombinedOutput()
		if err != nil {
			rep.Checks["cli capture"] = fmt.Sprintf("failed: %v: %s", err, bytes.TrimSpace(out))
			break
		}
		if i >= 2 { // two warm-ups fill the CLI thread's stat cache
			cliUnch = append(cliUnch, time.Since(t).Seconds()*1000)
		}
	}
	if len(cliUnch) > 0 {
		rep.add("sbxdb CLI capture, unchanged (whole process)", "ms", cliUnch, "")
	}

	// Restore: store0's head vs the first archive, each into a new dir.
	db, err = engine.Open(store, &engine.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	head, err := db.Head(ctx, "bench")
	if err != nil {
		return err
	}
	// The archive of the edited tree, so both restore the same bytes.
	if _, err := peers.TarZstd(tree, filepath.Join(work, "edited.tar.zst"), 1); err != nil {
		return err
	}
	var rs, untar []float64
	for i := range runs {
		t := time.Now()
		if _, err := db.Restore(ctx, head, filepath.Join(work, fmt.Sprintf("restore%d", i)), nil); err != nil {
			return err
		}
		rs = append(rs, time.Since(t).Seconds())
		res, err := peers.UntarZstd(filepath.Join(work, "edited.tar.zst"), filepath.Join(work, fmt.Sprintf("untar%d", i)))
		if err != nil {
			return err
		}
		untar = append(untar, res.Elapsed.Seconds())
	}
	db.Close()
	if err := sameTree(tree, filepath.Join(work, "restore0")); err != nil {
		rep.Checks["restore round trip"] = err.Error()
	} else {
		rep.Checks["restore round trip"] = "byte-exact"
	}
	fmt.Fprintln(os.Stderr, "restore:")
	rep.add("sbxdb restore", "s", rs, "no fsync, like tar")
	rep.add("zstd -d | tar -x", "s", untar, "")
	rep.compare("sbxdb restore", "zstd -d | tar -x")

	if largeMiB > 0 {
		if err := large(rep, work, largeMiB, runs); err != nil {
			return err
		}
	}
	printTable(rep)
	if jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

// timeCapture opens a new store and captures tree into it.
func timeCapture(ctx context.Context, store, tree, thread string) (time.Duration, error) {
	t := time.Now()
	db, err := engine.Open(store, nil)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	w, err := db.AcquireWriter(ctx, thread)
	if err != nil {
		return 0, err
	}
	if _, err := db.Capture(ctx, engine.CaptureInput{Writer: w.Writer, Dir: tree}); err != nil {
		return 0, err
	}
	d := time.Since(t)
	return d, w.Release(ctx)
}

// gitCommit times `git add -A && git commit` of tree into the git directory
// gitDir (kept outside the tree so every tool sees the same tree).
func gitCommit(gitDir, tree string, init bool) (time.Duration, error) {
	g := func(args ...string) error {
		cmd := exec.Command("git", append([]string{"--git-dir=" + gitDir, "--work-tree=" + tree,
			"-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "gc.auto=0",
			"-c", "commit.gpgsign=false", "-c", "core.fsync=none"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+filepath.Dir(gitDir))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
		return nil
	}
	if init {
		if err := g("init", "-q"); err != nil {
			return 0, err
		}
	}
	t := time.Now()
	if err := g("add", "-A"); err != nil {
		return 0, err
	}
	if err := g("commit", "-q", "--allow-empty", "--no-verify", "-m", "bench"); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

// hashCompress times sha256 and zstd of the given files on one core, at the
// level the blob store packs small blobs with (zstd.SpeedDefault, see
// cas.Open): the floor under capturing them. It returns the compressed size.
func hashCompress(tree string, paths []string) (time.Duration, int64, error) {
	var data [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(tree, filepath.FromSlash(p)))
		if err != nil {
			return 0, 0, err
		}
		data = append(data, b)
	}
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	defer enc.Close()
	var n int64
	t := time.Now()
	for _, b := range data {
		sha256.Sum256(b)
		n += int64(len(enc.EncodeAll(b, nil)))
	}
	return time.Since(t), n, nil
}

// sameTree compares two trees: paths, kinds, modes, symlink targets and
// bytes.
func sameTree(a, b string) error {
	ta, err := fstree.Read(a)
	if err != nil {
		return err
	}
	tb, err := fstree.Read(b)
	if err != nil {
		return err
	}
	if d := fstree.Diff(ta, tb); d != nil {
		return fmt.Errorf("%d differences, first: %s", len(d), d[0])
	}
	return nil
}

// large captures one big compressible file in a child process limited to
// one core, and reports throughput and the child's peak RSS.
func large(rep *report, work string, mib, runs int) error {
	file := filepath.Join(work, "large", "big.log")
	if err := writeLarge(file, int64(mib)<<20); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	time.Sleep(2100 * time.Millisecond)
	var rate, rss []float64
	for i := range runs {
		cmd := exec.Command(self, "large-child", filepath.Dir(file), filepath.Join(work, fmt.Sprintf("large-store%d", i)))
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("large capture: %v", err)
		}
		var secs, hwmKB float64
		if _, err := fmt.Sscan(string(out), &secs, &hwmKB); err != nil {
			return fmt.Errorf("large capture printed %q", out)
		}
		rate = append(rate, float64(int64(mib)<<20)/1e6/secs)
		rss = append(rss, hwmKB/1024)
	}
	fmt.Fprintf(os.Stderr, "large file (%d MiB):\n", mib)
	rep.add(fmt.Sprintf("large file capture, GOMAXPROCS=1 (%d MiB)", mib), "MB/s", rate, "target ≥ 150")
	rep.add("large file capture, peak RSS", "MiB", rss, "target < 100; the child's VmHWM")
	return nil
}

// writeLarge writes a compressible log file of n bytes whose lines do not
// repeat (a counter, a hashed request id and derived fields change on every
// line), so zstd finds ordinary log redundancy, not one block copied over.
func writeLarge(path string, n int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	levels := []string{"INFO", "INFO", "INFO", "DEBUG", "WARN"}
	var line []byte
	for i, written := uint64(0), int64(0); written < n; i++ {
		h := i * 0x9E3779B97F4A7C15
		line = append(line[:0], "2026-11-30T10:"...)
		line = strconv.AppendUint(line, 10+i/60000%50, 10)
		line = append(line, ':')
		line = strconv.AppendUint(line, 10+i/1000%50, 10)
		line = append(line, '.')
		line = strconv.AppendUint(line, 100+i%900, 10)
		line = append(line, "Z "...)
		line = append(line, levels[h>>61%5]...)
		line = append(line, " worker="...)
		line = strconv.AppendUint(line, h>>59, 10)
		line = append(line, " request="...)
		line = strconv.AppendUint(line, h>>16, 16)
		line = append(line, " took="...)
		line = strconv.AppendUint(line, h>>40%997, 10)
		line = append(line, "ms path=/api/v1/items/"...)
		line = strconv.AppendUint(line, h>>20%100003, 10)
		line = append(line, '\n')
		k := min(int64(len(line)), n-written)
		if _, err := w.Write(line[:k]); err != nil {
			return err
		}
		written += k
	}
	return w.Flush()
}

// largeChild captures dir into a new store and prints the seconds it took
// and its own peak resident set (VmHWM, kB). The peak is read here, not from
// the parent's rusage: Linux carries ru_maxrss across exec, so a child's
// Maxrss includes the memory of the benchmark process that started it.
func largeChild(dir, store string) int {
	d, err := timeCapture(context.Background(), store, dir, "large")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(d.Seconds(), peakRSSkB())
	return 0
}

// peakRSSkB returns this process's VmHWM from /proc/self/status, or -1
// where there is none.
func peakRSSkB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

func printTable(rep *report) {
	fmt.Printf("| figure | median | min–max | vs | ratio | note |\n|---|---:|---:|---|---:|---|\n")
	for _, r := range rep.Rows {
		ratio := ""
		if r.Peer != "" {
			ratio = fmt.Sprintf("%.2fx", r.Ratio)
		}
		esc := func(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
		fmt.Printf("| %s | %.3g %s | %.3g–%.3g | %s | %s | %s |\n", esc(r.Name), r.Median, r.Unit, r.Min, r.Max, esc(r.Peer), ratio, esc(r.Note))
	}
	keys := make([]string, 0, len(rep.Checks))
	for k := range rep.Checks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Println()
	for _, k := range keys {
		fmt.Printf("- %s: %s\n", k, rep.Checks[k])
	}
}
