package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb/bench/peers"
	"github.com/sbxdb/sbxdb/bench/workload"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
)

const noRestic = "restic not installed: not measured (`apt-get install restic` adds it)"

// captureBench runs the capture and restore benchmarks on the
// generated tree against git, tar | zstd and restic (when installed).
// Every run of every tool writes into a fresh store, git directory,
// archive, repository or restore target; nothing is deleted.
func captureBench(ctx context.Context, rep *Report, cfg *config, tree string, spec workload.Spec, st workload.Stats, cli string) error {
	work, runs := cfg.work, cfg.runs
	restic := peers.Available("restic")
	mb := fmt.Sprintf("%.1f MB", float64(st.Bytes)/1e6)
	rep.setSection(fmt.Sprintf("First capture of the tree (%s files, %s), fresh store each run", num(float64(st.Files)), mb))

	// Prepare: the restic repositories, concurrently (init derives a key
	// with scrypt, seconds each; not timed).
	resticCache := filepath.Join(work, "restic-cache")
	if restic {
		errs := make([]error, runs)
		var wg sync.WaitGroup
		for i := range runs {
			wg.Go(func() { errs[i] = peers.ResticInit(filepath.Join(work, fmt.Sprintf("restic%d", i)), resticCache) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}

	var sbx, git, tz, rs []float64
	var blobBytes, tarBytes, gitBytes, resticBytes int64
	for i := range runs {
		progress("first capture, run %d of %d", i+1, runs)
		store := filepath.Join(work, fmt.Sprintf("store%d", i))
		settle()
		d, err := timeCapture(ctx, store, tree, "bench")
		if err != nil {
			return err
		}
		sbx = append(sbx, d.Seconds())
		blobBytes, _ = peers.DirBytes(filepath.Join(store, "blobs"))
		gitDir := filepath.Join(work, fmt.Sprintf("git%d", i))
		settle()
		if d, err = gitCommit(gitDir, tree, true); err != nil {
			return err
		}
		git = append(git, d.Seconds())
		gitBytes, _ = peers.DirBytes(filepath.Join(gitDir, "objects"))
		settle()
		res, err := peers.TarZstd(tree, filepath.Join(work, fmt.Sprintf("tree%d.tar.zst", i)), 1)
		if err != nil {
			return err
		}
		tz = append(tz, res.Elapsed.Seconds())
		tarBytes = res.Bytes
		if restic {
			settle()
			res, err := peers.ResticBackup(filepath.Join(work, fmt.Sprintf("restic%d", i)), resticCache, tree)
			if err != nil {
				return err
			}
			rs = append(rs, res.Elapsed.Seconds())
			resticBytes = res.Bytes
		}
	}
	rate := func(s []float64) string { return fmt.Sprintf("%s MB/s", num(float64(st.Bytes)/1e6/median(s))) }
	row := rep.add("capture.first.sbxdb", "sbxdb capture (Open + Capture, in process)", "s", sbx, "fsync on; "+rate(sbx))
	rep.add("capture.first.git", "git add -A && git commit", "s", git, "no fsync; "+rate(git))
	rep.add("capture.first.tar", "tar -cf - . | zstd -1 -T1", "s", tz, "no fsync; "+rate(tz))
	if restic {
		rep.add("capture.first.restic", "restic backup (fresh repository)", "s", rs, "fsync on; "+rate(rs))
	} else {
		rep.missing("capture.first.restic", "restic backup (fresh repository)", "s", noRestic)
	}
	rep.ratio(row, "capture.first.git", "÷ git")
	rep.ratio(row, "capture.first.tar", "÷ tar|zstd").want("<=", 2)
	rep.ratio(row, "capture.first.restic", "÷ restic")
	rep.series("first capture", "sbxdb", st.Bytes, sbx)
	rep.series("first capture", "git", st.Bytes, git)
	rep.series("first capture", "tar | zstd -1", st.Bytes, tz)
	rep.series("first capture", "restic", st.Bytes, rs)

	rep.setSection("Bytes stored after the first capture")
	sizes := rep.add("size.sbxdb", "sbxdb blob bytes (packs + large files)", "MB", []float64{float64(blobBytes) / 1e6}, "")
	rep.add("size.tar", "tar | zstd -1 archive", "MB", []float64{float64(tarBytes) / 1e6}, "")
	rep.add("size.git", "git objects (loose, zlib)", "MB", []float64{float64(gitBytes) / 1e6}, "")
	if restic {
		rep.add("size.restic", "restic repository", "MB", []float64{float64(resticBytes) / 1e6}, "")
	} else {
		rep.missing("size.restic", "restic repository", "MB", noRestic)
	}
	rep.ratio(sizes, "size.tar", "÷ tar|zstd").want("<=", 1)
	rep.ratio(sizes, "size.git", "÷ git")
	rep.ratio(sizes, "size.restic", "÷ restic")

	// Unchanged tree: store0, git0 and restic0 again. The first repeat of
	// sbxdb is a warm-up (it opens the store and fills its stat cache).
	rep.setSection("Capture of the unchanged tree (the same store, repository and archive as run 1)")
	store := filepath.Join(work, "store0")
	db, err := engine.Open(store, nil)
	if err != nil {
		return err
	}
	w, err := db.AcquireWriter(ctx, "bench")
	if err != nil {
		db.Close()
		return err
	}
	capture := func() (*engine.CaptureResult, time.Duration, error) {
		t := time.Now()
		res, err := db.Capture(ctx, engine.CaptureInput{Writer: w.Writer, Dir: tree})
		return res, time.Since(t), err
	}
	if _, _, err := capture(); err != nil {
		db.Close()
		return err
	}
	progress("unchanged tree")
	var unch, unchRead, gitUnch, resticUnch []float64
	for range runs {
		res, d, err := capture()
		if err != nil {
			db.Close()
			return err
		}
		unch = append(unch, d.Seconds()*1000)
		unchRead = append(unchRead, float64(res.Stats.BytesRead))
		if d, err = gitCommit(filepath.Join(work, "git0"), tree, false); err != nil {
			db.Close()
			return err
		}
		gitUnch = append(gitUnch, d.Seconds()*1000)
		if restic {
			r, err := peers.ResticBackup(filepath.Join(work, "restic0"), resticCache, tree)
			if err != nil {
				db.Close()
				return err
			}
			resticUnch = append(resticUnch, r.Elapsed.Seconds()*1000)
		}
	}
	row = rep.add("capture.unchanged.sbxdb", "sbxdb capture, unchanged tree (in process)", "ms", unch, "")
	row.want("<=", 100)
	rep.add("capture.unchanged.bytes_read", "sbxdb capture, unchanged tree: file bytes read", "B", unchRead, "").want("<=", 0)
	rep.add("capture.unchanged.git", "git add -A && git commit, unchanged tree", "ms", gitUnch, "")
	if restic {
		rep.add("capture.unchanged.restic", "restic backup, unchanged tree (parent snapshot)", "ms", resticUnch, "")
	} else {
		rep.missing("capture.unchanged.restic", "restic backup, unchanged tree (parent snapshot)", "ms", noRestic)
	}
	rep.ratio(row, "capture.unchanged.git", "÷ git")
	rep.ratio(row, "capture.unchanged.restic", "÷ restic")

	// 1% edit: the same edit for every tool, then 2.1 s, so the edit is
	// older than the racy window as after any real agent run.
	rep.setSection("Capture after editing 1 % of the files (a new edit each run)")
	var edit, gitEdit, resticEdit, hashComp, growth, changed []float64
	for i := range runs {
		progress("1 %% edit, run %d of %d", i+1, runs)
		paths, nbytes, err := workload.Edit(tree, spec, 0.01, i+1)
		if err != nil {
			db.Close()
			return err
		}
		hc, compressed, err := hashCompress(tree, paths)
		if err != nil {
			db.Close()
			return err
		}
		time.Sleep(2100 * time.Millisecond)
		before, _ := peers.DirBytes(filepath.Join(store, "blobs"))
		res, d, err := capture()
		if err != nil {
			db.Close()
			return err
		}
		after, _ := peers.DirBytes(filepath.Join(store, "blobs"))
		edit = append(edit, d.Seconds()*1000)
		hashComp = append(hashComp, hc.Seconds()*1000)
		growth = append(growth, float64(after-before)/float64(max(compressed, 1)))
		changed = append(changed, float64(nbytes)/1e6)
		if res.Stats.FilesRead > len(paths) {
			rep.check(fmt.Sprintf("edit round %d", i+1), fmt.Sprintf("read %d files for %d edited", res.Stats.FilesRead, len(paths)))
		}
		gd, err := gitCommit(filepath.Join(work, "git0"), tree, false)
		if err != nil {
			db.Close()
			return err
		}
		gitEdit = append(gitEdit, gd.Seconds()*1000)
		if restic {
			r, err := peers.ResticBackup(filepath.Join(work, "restic0"), resticCache, tree)
			if err != nil {
				db.Close()
				return err
			}
			resticEdit = append(resticEdit, r.Elapsed.Seconds()*1000)
		}
	}
	db.Close()
	row = rep.add("capture.edit.sbxdb", "sbxdb capture after a 1 % edit", "ms", edit, "")
	rep.add("capture.edit.git", "git add -A && git commit after the same edit", "ms", gitEdit, "")
	if restic {
		rep.add("capture.edit.restic", "restic backup after the same edit", "ms", resticEdit, "")
	} else {
		rep.missing("capture.edit.restic", "restic backup after the same edit", "ms", noRestic)
	}
	rep.ratio(row, "capture.edit.git", "÷ git").want("<=", 1)
	rep.ratio(row, "capture.edit.restic", "÷ restic")
	rep.add("capture.edit.changed", "bytes of the edited files", "MB", changed, "")
	rep.add("capture.edit.hash_compress", "sha256 + zstd of the edited files, one core", "ms", hashComp, "the floor under capturing them")
	rep.add("capture.edit.growth", "blob growth ÷ the edited files compressed", "x", growth, "").want("<=", 2)
	budget := 2*median(unch) + median(hashComp)
	verdict := "met"
	if median(edit) > budget {
		verdict = "not met"
	}
	rep.check("1 % edit ≤ 2x unchanged + hash/compress of the changed bytes",
		fmt.Sprintf("budget %.1f ms, measured %.1f ms: %s", budget, median(edit), verdict))

	// The CLI as a whole process, unchanged tree, on its own thread.
	progress("CLI capture")
	var cliUnch []float64
	for i := range runs + 2 {
		if cli == "" {
			break
		}
		t := time.Now()
		out, err := exec.Command(cli, "capture", tree, "--thread", "cli", "--db", store).CombinedOutput()
		if err != nil {
			rep.check("CLI capture", fmt.Sprintf("failed: %v: %s", err, bytes.TrimSpace(out)))
			cliUnch = nil
			break
		}
		if i >= 2 { // two warm-ups fill the CLI thread's stat cache
			cliUnch = append(cliUnch, time.Since(t).Seconds()*1000)
		}
	}
	if len(cliUnch) > 0 {
		rep.setSection("sbxdb CLI as a whole process (`sbxdb capture`, unchanged tree, after two warm-ups)")
		rep.add("capture.unchanged.cli", "sbxdb CLI capture, unchanged tree (whole process)", "ms", cliUnch, "includes Open's page check")
	}

	// Restore: store0's head vs the archive of the edited tree, git0's
	// HEAD and restic0's latest snapshot, each into a new directory.
	rep.setSection("Restore of the edited tree into an empty directory")
	edited, err := peers.DirBytes(tree)
	if err != nil {
		return err
	}
	rdb, err := engine.Open(store, &engine.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer rdb.Close()
	head, err := rdb.Head(ctx, "bench")
	if err != nil {
		return err
	}
	if _, err := peers.TarZstd(tree, filepath.Join(work, "edited.tar.zst"), 1); err != nil {
		return err
	}
	var rsb, untar, gitRs, resticRs []float64
	for i := range runs {
		progress("restore, run %d of %d", i+1, runs)
		settle()
		t := time.Now()
		if _, err := rdb.Restore(ctx, head, filepath.Join(work, fmt.Sprintf("restore%d", i)), nil); err != nil {
			return err
		}
		rsb = append(rsb, time.Since(t).Seconds())
		settle()
		res, err := peers.UntarZstd(filepath.Join(work, "edited.tar.zst"), filepath.Join(work, fmt.Sprintf("untar%d", i)))
		if err != nil {
			return err
		}
		untar = append(untar, res.Elapsed.Seconds())
		settle()
		d, err := gitRestore(filepath.Join(work, "git0"), filepath.Join(work, fmt.Sprintf("gitrestore%d", i)))
		if err != nil {
			return err
		}
		gitRs = append(gitRs, d.Seconds())
		if restic {
			settle()
			res, err := peers.ResticRestore(filepath.Join(work, "restic0"), resticCache, filepath.Join(work, fmt.Sprintf("resticrestore%d", i)))
			if err != nil {
				return err
			}
			resticRs = append(resticRs, res.Elapsed.Seconds())
		}
	}
	if err := sameTree(tree, filepath.Join(work, "restore0")); err != nil {
		rep.check("sbxdb restore round trip", err.Error())
	} else {
		rep.check("sbxdb restore round trip", "byte-exact (paths, kinds, modes, symlink targets, bytes)")
	}
	rate = func(s []float64) string { return fmt.Sprintf("%s MB/s", num(float64(edited)/1e6/median(s))) }
	row = rep.add("restore.sbxdb", "sbxdb restore (in process)", "s", rsb, "every byte hashed and checked; no fsync; "+rate(rsb))
	rep.add("restore.tar", "zstd -d | tar -x", "s", untar, "no fsync; "+rate(untar))
	rep.add("restore.git", "git checkout -f HEAD -- . (into an empty work tree)", "s", gitRs, "no fsync; no empty directories; "+rate(gitRs))
	if restic {
		rep.add("restore.restic", "restic restore latest", "s", resticRs, rate(resticRs))
	} else {
		rep.missing("restore.restic", "restic restore latest", "s", noRestic)
	}
	rep.ratio(row, "restore.tar", "÷ tar|zstd").want("<=", 1)
	rep.ratio(row, "restore.git", "÷ git")
	rep.ratio(row, "restore.restic", "÷ restic")
	rep.series("restore", "sbxdb", edited, rsb)
	rep.series("restore", "git", edited, gitRs)
	rep.series("restore", "tar | zstd -1", edited, untar)
	rep.series("restore", "restic", edited, resticRs)

	if cfg.largeMiB > 0 {
		return large(rep, work, cfg.largeMiB, runs)
	}
	return nil
}

// settle writes back every dirty page before a timed bulk step: a first
// capture or a restore leaves up to the whole tree (307 MB at full scale)
// dirty in the page cache, as none of the peers fsyncs its output. Without
// it the next contender's time would include writing back the previous
// one's output, and which one paid would depend on the order they run in.
func settle() { syscall.Sync() }

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

// git runs git on the git directory gitDir and work tree tree, isolated
// from the user's configuration, with automatic gc off.
func git(gitDir, tree string, env []string, args ...string) error {
	cmd := exec.Command("git", append([]string{"--git-dir=" + gitDir, "--work-tree=" + tree,
		"-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "gc.auto=0",
		"-c", "maintenance.auto=false", "-c", "commit.gpgsign=false", "-c", "core.fsync=none"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "HOME="+filepath.Dir(gitDir))
	cmd.Env = append(cmd.Env, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %v: %v: %s", args, err, out)
	}
	return nil
}

// gitCommit times `git add -A && git commit` of tree into the git directory
// gitDir (kept outside the tree so every tool sees the same tree).
func gitCommit(gitDir, tree string, init bool) (time.Duration, error) {
	if init {
		if err := git(gitDir, tree, nil, "init", "-q"); err != nil {
			return 0, err
		}
	}
	t := time.Now()
	if err := git(gitDir, tree, nil, "add", "-A"); err != nil {
		return 0, err
	}
	if err := git(gitDir, tree, nil, "commit", "-q", "--allow-empty", "--no-verify", "-m", "bench"); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

// gitRestore times `git checkout -f HEAD -- .` of gitDir's HEAD into the
// new directory target, with an index file of its own beside it (so the
// repository's index is not touched).
func gitRestore(gitDir, target string) (time.Duration, error) {
	if err := os.Mkdir(target, 0o755); err != nil {
		return 0, err
	}
	env := []string{"GIT_INDEX_FILE=" + target + ".index"}
	t := time.Now()
	if err := git(gitDir, target, env, "checkout", "-q", "-f", "HEAD", "--", "."); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

// hashCompress times sha256 and zstd of the given files on one core, at the
// level the blob store packs small blobs with while capturing
// (cas.CaptureLevel): the floor under capturing them. It returns the compressed size.
func hashCompress(tree string, paths []string) (time.Duration, int64, error) {
	var data [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(tree, filepath.FromSlash(p)))
		if err != nil {
			return 0, 0, err
		}
		data = append(data, b)
	}
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(cas.CaptureLevel), zstd.WithEncoderConcurrency(1))
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
func large(rep *Report, work string, mib, runs int) error {
	progress("large file: writing %d MiB", mib)
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
	rep.setSection(fmt.Sprintf("Large file: one %s MiB log file, its own process, GOMAXPROCS=1", num(float64(mib))))
	rep.add("large.throughput", "sbxdb capture of the large file", "MB/s", rate, "lines never repeat").want(">=", 150)
	rep.add("large.peak_rss", "peak RSS of that process", "MiB", rss, "VmHWM of the child").want("<=", 100)
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
