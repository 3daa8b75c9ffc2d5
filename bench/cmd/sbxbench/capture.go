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
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/bench/peers"
	"github.com/sbxdb/sbxdb/bench/workload"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
)

const (
	noRestic = "restic not installed: not measured (`restic` on PATH adds it)"
	noKopia  = "kopia not installed: not measured (`kopia` on PATH adds it)"
)

// peer is one peer tool's rows: whether it is installed, and the note of
// its missing rows.
type peer struct {
	ok      bool
	missing string
}

// addOrMissing adds a row with values, or a missing row when the peer is
// not installed.
func (p peer) add(rep *Report, id, name, unit string, values []float64, note string) *Row {
	if !p.ok {
		return rep.missing(id, name, unit, p.missing)
	}
	return rep.add(id, name, unit, values, note)
}

// captureBench runs the capture and restore benchmarks on the generated
// tree against git, tar | zstd, restic and kopia (when installed). sbxdb
// captures and restores with no default exclusions (allFiles), so every
// tool stores the same files. Every run of every tool writes into a fresh
// store, git directory, archive, repository or restore target; nothing is
// deleted.
func captureBench(ctx context.Context, rep *Report, cfg *config, tree string, spec workload.Spec, st workload.Stats, cli string) error {
	work, runs := cfg.work, cfg.runs
	resticP := peer{peers.Available("restic"), noRestic}
	kopiaP := peer{peers.Available("kopia"), noKopia}
	restic, kopia := resticP.ok, kopiaP.ok
	mb := fmt.Sprintf("%.1f MB", float64(st.Bytes)/1e6)
	rep.setSection(fmt.Sprintf("First capture of the tree (%s files, %s), fresh store each run", num(float64(st.Files)), mb))

	// Prepare: the restic repositories, concurrently (init derives a key
	// with scrypt, seconds each), and the kopia repositories (not timed).
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
	kopias := make([]peers.Kopia, runs)
	if kopia {
		for i := range runs {
			k, err := peers.KopiaInit(filepath.Join(work, fmt.Sprintf("kopia%d", i)), filepath.Join(work, fmt.Sprintf("kopia%d-client", i)))
			if err != nil {
				return err
			}
			kopias[i] = k
		}
	}

	var sbx, sbxCPU, git, gitCPU, tz, tzCPU, rs, rsCPU, kp, kpCPU []float64
	var blobBytes, dbBytes, tarBytes, gitBytes, resticBytes, kopiaBytes int64
	for i := range runs {
		progress("first capture, run %d of %d", i+1, runs)
		store := filepath.Join(work, fmt.Sprintf("store%d", i))
		settle()
		d, cpu, err := timeCapture(ctx, store, tree, "bench")
		if err != nil {
			return err
		}
		sbx, sbxCPU = append(sbx, d.Seconds()), append(sbxCPU, cpu.Seconds())
		blobBytes, _ = peers.DirBytes(filepath.Join(store, "blobs"))
		if st, err := os.Stat(filepath.Join(store, engine.DBFile)); err == nil {
			dbBytes = st.Size()
		}
		gitDir := filepath.Join(work, fmt.Sprintf("git%d", i))
		settle()
		gr, err := gitCommit(gitDir, tree, true)
		if err != nil {
			return err
		}
		git, gitCPU = append(git, gr.Elapsed.Seconds()), append(gitCPU, gr.CPU.Seconds())
		gitBytes, _ = peers.DirBytes(filepath.Join(gitDir, "objects"))
		settle()
		res, err := peers.TarZstd(tree, filepath.Join(work, fmt.Sprintf("tree%d.tar.zst", i)), 1)
		if err != nil {
			return err
		}
		tz, tzCPU = append(tz, res.Elapsed.Seconds()), append(tzCPU, res.CPU.Seconds())
		tarBytes = res.Bytes
		if restic {
			settle()
			res, err := peers.ResticBackup(filepath.Join(work, fmt.Sprintf("restic%d", i)), resticCache, tree)
			if err != nil {
				return err
			}
			rs, rsCPU = append(rs, res.Elapsed.Seconds()), append(rsCPU, res.CPU.Seconds())
			resticBytes = res.Bytes
		}
		if kopia {
			settle()
			res, err := kopias[i].Snapshot(tree)
			if err != nil {
				return err
			}
			kp, kpCPU = append(kp, res.Elapsed.Seconds()), append(kpCPU, res.CPU.Seconds())
			kopiaBytes = res.Bytes
		}
	}
	rate := func(s []float64) string { return fmt.Sprintf("%s MB/s", num(float64(st.Bytes)/1e6/median(s))) }
	row := rep.add("capture.first.sbxdb", "sbxdb capture (Open + Capture, in process, no default exclusions)", "s", sbx, "fsync on; "+rate(sbx))
	rep.add("capture.first.git", "git add -A && git commit", "s", git, "no fsync; "+rate(git))
	rep.add("capture.first.tar", "tar -cf - . | zstd -1 -T0", "s", tz, "no fsync; "+rate(tz))
	resticP.add(rep, "capture.first.restic", "restic backup (fresh repository)", "s", rs, "fsync on; "+rate(rs))
	kopiaP.add(rep, "capture.first.kopia", "kopia snapshot create (fresh repository, zstd-fastest)", "s", kp, "no fsync; "+rate(kp))
	rep.ratio(row, "capture.first.tar", "÷ tar|zstd")
	rep.ratio(row, "capture.first.git", "÷ git")
	rep.ratio(row, "capture.first.restic", "÷ restic")
	rep.ratio(row, "capture.first.kopia", "÷ kopia")
	cpuRow := rep.add("capture.first.sbxdb.cpu", "  CPU time (user + sys): sbxdb capture", "s", sbxCPU, "getrusage of this process around the capture")
	rep.add("capture.first.git.cpu", "  CPU time: git add -A && git commit", "s", gitCPU, "rusage of the children")
	rep.add("capture.first.tar.cpu", "  CPU time: tar -cf - . | zstd -1 -T0", "s", tzCPU, "rusage of the children")
	resticP.add(rep, "capture.first.restic.cpu", "  CPU time: restic backup", "s", rsCPU, "rusage of the children")
	kopiaP.add(rep, "capture.first.kopia.cpu", "  CPU time: kopia snapshot create", "s", kpCPU, "rusage of the children")
	rep.ratio(cpuRow, "capture.first.tar.cpu", "÷ tar|zstd")
	rep.ratio(cpuRow, "capture.first.restic.cpu", "÷ restic")
	rep.ratio(cpuRow, "capture.first.kopia.cpu", "÷ kopia")
	rep.series("first capture", "sbxdb", st.Bytes, sbx)
	rep.series("first capture", "git", st.Bytes, git)
	rep.series("first capture", "tar | zstd -1 -T0", st.Bytes, tz)
	rep.series("first capture", "restic", st.Bytes, rs)
	rep.series("first capture", "kopia", st.Bytes, kp)

	rep.setSection("Bytes stored after the first capture")
	sizes := rep.add("size.sbxdb", "sbxdb blob bytes (packs + large files)", "MB", []float64{float64(blobBytes) / 1e6}, "")
	rep.add("size.tar", "tar | zstd -1 archive", "MB", []float64{float64(tarBytes) / 1e6}, "")
	rep.add("size.git", "git objects (loose, zlib)", "MB", []float64{float64(gitBytes) / 1e6}, "")
	resticP.add(rep, "size.restic", "restic repository", "MB", []float64{float64(resticBytes) / 1e6}, "")
	kopiaP.add(rep, "size.kopia", "kopia repository (zstd-fastest)", "MB", []float64{float64(kopiaBytes) / 1e6}, "")
	rep.ratio(sizes, "size.restic", "÷ restic")
	rep.ratio(sizes, "size.tar", "÷ tar|zstd")
	rep.ratio(sizes, "size.git", "÷ git")
	rep.ratio(sizes, "size.kopia", "÷ kopia")
	// Recompression on the last run's store, which nothing uses afterwards.
	rc, rcDB, err := recompressStore(ctx, filepath.Join(work, fmt.Sprintf("store%d", runs-1)))
	if err != nil {
		return err
	}
	r := rep.add("size.sbxdb.recompressed", "sbxdb blob bytes after gc recompression", "MB", []float64{float64(rc) / 1e6}, "blobs/ after Repack with Recompress")
	rep.ratio(r, "size.restic", "÷ restic")
	rep.ratio(r, "size.sbxdb", "÷ before")
	rep.add("size.sbxdb.db", "sbxdb sbx.db, after the first capture", "MB", []float64{float64(dbBytes) / 1e6}, "metadata beside the blobs (not in the rows above)")
	rep.add("size.sbxdb.db.recompressed", "sbxdb sbx.db, after recompression", "MB", []float64{float64(rcDB) / 1e6}, "the file keeps the pages the repack freed")

	// Peak RSS and CPU of a first capture in a process of its own.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var childWall, childCPU, childRSS []float64
	for i := range runs {
		progress("first capture in a child process, run %d of %d", i+1, runs)
		settle()
		c, err := runChild(self, "capture-child", tree, filepath.Join(work, fmt.Sprintf("child-store%d", i)))
		if err != nil {
			return err
		}
		childWall, childCPU, childRSS = append(childWall, c.wall), append(childCPU, c.cpu), append(childRSS, c.rssMiB)
	}

	// The walk floor and the unchanged tree: store0, git0, restic0 and
	// kopia0 again. The first repeat of sbxdb is a warm-up (it opens the
	// store and fills its stat cache); each run times both walks, then
	// every tool.
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
	capture := func() (*sbxdb.CaptureResult, time.Duration, error) {
		t := time.Now()
		res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: tree, Policy: allFiles})
		return res, time.Since(t), err
	}
	if _, _, err := capture(); err != nil {
		db.Close()
		return err
	}
	if _, err := walkSerial(tree); err != nil { // a warm-up, as capture has
		db.Close()
		return err
	}
	progress("unchanged tree")
	var walkS, walkP, unch, unchRead, gitUnch, resticUnch, kopiaUnch []float64
	var entries int
	for range runs {
		t := time.Now()
		if entries, err = walkSerial(tree); err != nil {
			db.Close()
			return err
		}
		walkS = append(walkS, time.Since(t).Seconds()*1000)
		t = time.Now()
		if _, err := walkParallel(tree); err != nil {
			db.Close()
			return err
		}
		walkP = append(walkP, time.Since(t).Seconds()*1000)
		res, d, err := capture()
		if err != nil {
			db.Close()
			return err
		}
		unch = append(unch, d.Seconds()*1000)
		unchRead = append(unchRead, float64(res.Stats.BytesRead))
		gr, err := gitCommit(filepath.Join(work, "git0"), tree, false)
		if err != nil {
			db.Close()
			return err
		}
		gitUnch = append(gitUnch, gr.Elapsed.Seconds()*1000)
		if restic {
			r, err := peers.ResticBackup(filepath.Join(work, "restic0"), resticCache, tree)
			if err != nil {
				db.Close()
				return err
			}
			resticUnch = append(resticUnch, r.Elapsed.Seconds()*1000)
		}
		if kopia {
			r, err := kopias[0].Snapshot(tree)
			if err != nil {
				db.Close()
				return err
			}
			kopiaUnch = append(kopiaUnch, r.Elapsed.Seconds()*1000)
		}
	}
	rep.setSection(fmt.Sprintf("Walk floor: open and read every directory, lstat every entry (%s entries), in process, nothing read", num(float64(entries))))
	rep.add("walk.parallel", "walk, up to 2 x GOMAXPROCS directories at once (as capture walks)", "ms", walkP, "ReadDir + fstatat(AT_SYMLINK_NOFOLLOW)")
	rep.add("walk.serial", "walk, one goroutine", "ms", walkS, "the same calls, depth first")

	rep.setSection("Capture of the unchanged tree (the same store, repository and archive as run 1)")
	row = rep.add("capture.unchanged.sbxdb", "sbxdb capture, unchanged tree (in process)", "ms", unch, "")
	rep.ratio(row, "walk.parallel", "÷ walk floor")
	rep.ratio(row, "walk.serial", "÷ serial walk")
	rep.add("capture.unchanged.bytes_read", "sbxdb capture, unchanged tree: file bytes read", "B", unchRead, "").want("<=", 0)
	rep.add("capture.unchanged.git", "git add -A && git commit, unchanged tree", "ms", gitUnch, "")
	resticP.add(rep, "capture.unchanged.restic", "restic backup, unchanged tree (parent snapshot)", "ms", resticUnch, "")
	kopiaP.add(rep, "capture.unchanged.kopia", "kopia snapshot create, unchanged tree", "ms", kopiaUnch, "")
	rep.ratio(row, "capture.unchanged.git", "÷ git")
	rep.ratio(row, "capture.unchanged.restic", "÷ restic")
	rep.ratio(row, "capture.unchanged.kopia", "÷ kopia")

	// The CLI as a whole process, unchanged tree, on its own thread, after
	// two warm-ups; then each git commit of the same unchanged tree.
	progress("CLI capture")
	var cliUnch, cliGitUnch []float64
	cliCapture := func() (float64, error) {
		t := time.Now()
		out, err := exec.Command(cli, "capture", tree, "--thread", "cli", "--no-default-excludes", "--db", store).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
		return time.Since(t).Seconds() * 1000, nil
	}
	if cli != "" {
		w.Release(ctx) // the CLI opens the store itself
		db.Close()
		for i := range runs + 2 {
			d, err := cliCapture()
			if err != nil {
				rep.check("CLI capture", "failed: "+err.Error())
				cliUnch, cli = nil, ""
				break
			}
			if i >= 2 {
				cliUnch = append(cliUnch, d)
				gr, err := gitCommit(filepath.Join(work, "git0"), tree, false)
				if err != nil {
					return err
				}
				cliGitUnch = append(cliGitUnch, gr.Elapsed.Seconds()*1000)
			}
		}
		if db, err = engine.Open(store, nil); err != nil {
			return err
		}
		if w, err = db.AcquireWriter(ctx, "bench"); err != nil {
			db.Close()
			return err
		}
	}

	// 1% edit: the same edit for every tool, then 2.1 s, so the edit is
	// older than the racy window as after any real agent run. The CLI
	// captures the same edit on its own thread right after the in-process
	// capture (the blobs are stored by then: it hashes the edited files
	// but writes no blob).
	rep.setSection("Capture after editing 1 % of the source files (a new edit each run)")
	var edit, cliEdit, gitEdit, resticEdit, kopiaEdit, hashComp, growth, changed []float64
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
		if cli != "" {
			w.Release(ctx)
			db.Close()
			d, err := cliCapture()
			if err != nil {
				return err
			}
			cliEdit = append(cliEdit, d)
			if db, err = engine.Open(store, nil); err != nil {
				return err
			}
			if w, err = db.AcquireWriter(ctx, "bench"); err != nil {
				db.Close()
				return err
			}
		}
		gr, err := gitCommit(filepath.Join(work, "git0"), tree, false)
		if err != nil {
			db.Close()
			return err
		}
		gitEdit = append(gitEdit, gr.Elapsed.Seconds()*1000)
		if restic {
			r, err := peers.ResticBackup(filepath.Join(work, "restic0"), resticCache, tree)
			if err != nil {
				db.Close()
				return err
			}
			resticEdit = append(resticEdit, r.Elapsed.Seconds()*1000)
		}
		if kopia {
			r, err := kopias[0].Snapshot(tree)
			if err != nil {
				db.Close()
				return err
			}
			kopiaEdit = append(kopiaEdit, r.Elapsed.Seconds()*1000)
		}
	}
	db.Close()
	row = rep.add("capture.edit.sbxdb", "sbxdb capture after a 1 % edit (in process)", "ms", edit, "")
	rep.ratio(row, "walk.parallel", "÷ walk floor")
	rep.ratio(row, "walk.serial", "÷ serial walk")
	rep.add("capture.edit.git", "git add -A && git commit after the same edit", "ms", gitEdit, "")
	resticP.add(rep, "capture.edit.restic", "restic backup after the same edit", "ms", resticEdit, "")
	kopiaP.add(rep, "capture.edit.kopia", "kopia snapshot create after the same edit", "ms", kopiaEdit, "")
	rep.ratio(row, "capture.edit.git", "÷ git")
	rep.ratio(row, "capture.edit.restic", "÷ restic")
	rep.ratio(row, "capture.edit.kopia", "÷ kopia")
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

	rep.setSection("sbxdb CLI as a whole process (`sbxdb capture --no-default-excludes`, its own thread) against `git add -A && git commit`")
	if len(cliUnch) > 0 {
		r := rep.add("capture.unchanged.cli", "sbxdb CLI capture, unchanged tree (after two warm-ups)", "ms", cliUnch, "includes Open")
		rep.add("capture.unchanged.cli_git", "git add -A && git commit, unchanged tree (after each CLI capture)", "ms", cliGitUnch, "")
		rep.ratio(r, "capture.unchanged.cli_git", "÷ git")
	} else {
		rep.missing("capture.unchanged.cli", "sbxdb CLI capture, unchanged tree", "ms", "not measured: the CLI did not build or run")
	}
	if len(cliEdit) > 0 {
		r := rep.add("capture.edit.cli", "sbxdb CLI capture after the 1 % edit", "ms", cliEdit, "the edit's blobs already stored")
		rep.ratio(r, "capture.edit.git", "÷ git")
	} else {
		rep.missing("capture.edit.cli", "sbxdb CLI capture after the 1 % edit", "ms", "not measured: the CLI did not build or run")
	}

	// Restore: store0's head vs the archive of the edited tree, git0's
	// HEAD, restic0's and kopia0's latest snapshot, each into a new
	// directory.
	rep.setSection("Restore of the edited tree into an empty directory")
	edited, err := peers.DirBytes(tree)
	if err != nil {
		return err
	}
	rdb, err := engine.Open(store, &engine.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	head, err := rdb.Head(ctx, "bench")
	if err != nil {
		rdb.Close()
		return err
	}
	if _, err := peers.TarZstd(tree, filepath.Join(work, "edited.tar.zst"), 1); err != nil {
		rdb.Close()
		return err
	}
	var rsb, untar, gitRs, resticRs, kopiaRs, rsbCPU, untarCPU, resticCPU, kopiaCPU []float64
	for i := range runs {
		progress("restore, run %d of %d", i+1, runs)
		settle()
		c0, t := cpuTime(), time.Now()
		if _, err := rdb.Restore(ctx, head, filepath.Join(work, fmt.Sprintf("restore%d", i)), &sbxdb.RestoreOptions{Policy: allFiles}); err != nil {
			rdb.Close()
			return err
		}
		rsb, rsbCPU = append(rsb, time.Since(t).Seconds()), append(rsbCPU, (cpuTime()-c0).Seconds())
		settle()
		res, err := peers.UntarZstd(filepath.Join(work, "edited.tar.zst"), filepath.Join(work, fmt.Sprintf("untar%d", i)))
		if err != nil {
			rdb.Close()
			return err
		}
		untar, untarCPU = append(untar, res.Elapsed.Seconds()), append(untarCPU, res.CPU.Seconds())
		settle()
		d, err := gitRestore(filepath.Join(work, "git0"), filepath.Join(work, fmt.Sprintf("gitrestore%d", i)))
		if err != nil {
			rdb.Close()
			return err
		}
		gitRs = append(gitRs, d.Seconds())
		if restic {
			settle()
			res, err := peers.ResticRestore(filepath.Join(work, "restic0"), resticCache, filepath.Join(work, fmt.Sprintf("resticrestore%d", i)))
			if err != nil {
				rdb.Close()
				return err
			}
			resticRs, resticCPU = append(resticRs, res.Elapsed.Seconds()), append(resticCPU, res.CPU.Seconds())
		}
		if kopia {
			settle()
			res, err := kopias[0].Restore(tree, filepath.Join(work, fmt.Sprintf("kopiarestore%d", i)))
			if err != nil {
				rdb.Close()
				return err
			}
			kopiaRs, kopiaCPU = append(kopiaRs, res.Elapsed.Seconds()), append(kopiaCPU, res.CPU.Seconds())
		}
	}
	rdb.Close()
	if err := sameTree(tree, filepath.Join(work, "restore0")); err != nil {
		rep.check("sbxdb restore round trip", err.Error())
	} else {
		rep.check("sbxdb restore round trip", "byte-exact (paths, kinds, modes, symlink targets, bytes)")
	}
	if kopia {
		if err := sameTree(tree, filepath.Join(work, "kopiarestore0")); err != nil {
			rep.check("kopia restore round trip", err.Error())
		}
	}
	rate = func(s []float64) string { return fmt.Sprintf("%s MB/s", num(float64(edited)/1e6/median(s))) }
	row = rep.add("restore.sbxdb", "sbxdb restore (in process)", "s", rsb, "every byte hashed and checked; no fsync; "+rate(rsb))
	rep.add("restore.tar", "zstd -d | tar -x", "s", untar, "no fsync; "+rate(untar))
	rep.add("restore.git", "git checkout -f HEAD -- . (into an empty work tree)", "s", gitRs, "no fsync; no empty directories; "+rate(gitRs))
	resticP.add(rep, "restore.restic", "restic restore latest", "s", resticRs, rate(resticRs))
	kopiaP.add(rep, "restore.kopia", "kopia snapshot restore (latest)", "s", kopiaRs, rate(kopiaRs))
	rep.ratio(row, "restore.tar", "÷ tar|zstd")
	rep.ratio(row, "restore.git", "÷ git")
	rep.ratio(row, "restore.restic", "÷ restic")
	rep.ratio(row, "restore.kopia", "÷ kopia")
	cpuRow = rep.add("restore.sbxdb.cpu", "  CPU time (user + sys): sbxdb restore", "s", rsbCPU, "getrusage of this process around the restore")
	rep.add("restore.tar.cpu", "  CPU time: zstd -d | tar -x", "s", untarCPU, "rusage of the children")
	resticP.add(rep, "restore.restic.cpu", "  CPU time: restic restore", "s", resticCPU, "rusage of the children")
	kopiaP.add(rep, "restore.kopia.cpu", "  CPU time: kopia snapshot restore", "s", kopiaCPU, "rusage of the children")
	rep.ratio(cpuRow, "restore.tar.cpu", "÷ tar|zstd")
	rep.series("restore", "sbxdb", edited, rsb)
	rep.series("restore", "git", edited, gitRs)
	rep.series("restore", "tar | zstd -1 -T0", edited, untar)
	rep.series("restore", "restic", edited, resticRs)
	rep.series("restore", "kopia", edited, kopiaRs)

	// Peak RSS and CPU of a restore in a process of its own.
	var rWall, rCPU, rRSS []float64
	for i := range runs {
		progress("restore in a child process, run %d of %d", i+1, runs)
		settle()
		c, err := runChild(self, "restore-child", store, filepath.Join(work, fmt.Sprintf("child-restore%d", i)))
		if err != nil {
			return err
		}
		rWall, rCPU, rRSS = append(rWall, c.wall), append(rCPU, c.cpu), append(rRSS, c.rssMiB)
	}
	rep.setSection("sbxdb in a process of its own (`sbxbench` re-executed): peak RSS (VmHWM) and CPU time")
	rep.add("child.capture.rss", "first capture (fresh store): peak RSS", "MiB", childRSS, "")
	r = rep.add("child.capture.cpu", "  CPU time (user + sys)", "s", childCPU, "the whole process")
	rep.ratio(r, "capture.first.tar.cpu", "÷ tar|zstd")
	rep.add("child.capture.wall", "  wall time", "s", childWall, "Open + Capture")
	rep.add("child.restore.rss", "restore of the edited tree: peak RSS", "MiB", rRSS, "")
	rep.add("child.restore.cpu", "  CPU time (user + sys)", "s", rCPU, "the whole process")
	rep.add("child.restore.wall", "  wall time", "s", rWall, "Open + Restore")

	if err := openBench(ctx, rep, cfg, tree, cli); err != nil {
		return err
	}
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

// timeCapture opens a new store and captures tree into it with no
// default exclusions; it returns the wall time and this process's CPU
// time (user + sys, every goroutine) across Open and Capture.
func timeCapture(ctx context.Context, store, tree, thread string) (wall, cpu time.Duration, err error) {
	c0 := cpuTime()
	t := time.Now()
	db, err := engine.Open(store, nil)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	w, err := db.AcquireWriter(ctx, thread)
	if err != nil {
		return 0, 0, err
	}
	if _, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: tree, Policy: allFiles}); err != nil {
		return 0, 0, err
	}
	wall, cpu = time.Since(t), cpuTime()-c0
	return wall, cpu, w.Release(ctx)
}

// cpuTime returns this process's user + system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// git runs git on the git directory gitDir and work tree tree, isolated
// from the user's configuration, with automatic gc off.
func git(gitDir, tree string, env []string, args ...string) (cpu time.Duration, err error) {
	cmd := exec.Command("git", append([]string{"--git-dir=" + gitDir, "--work-tree=" + tree,
		"-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "gc.auto=0",
		"-c", "maintenance.auto=false", "-c", "commit.gpgsign=false", "-c", "core.fsync=none"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "HOME="+filepath.Dir(gitDir))
	cmd.Env = append(cmd.Env, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("git %v: %v: %s", args, err, out)
	}
	return peers.CPUTime(cmd.ProcessState), nil
}

// gitCommit times `git add -A && git commit` of tree into the git directory
// gitDir (kept outside the tree so every tool sees the same tree): wall
// and CPU time of the two processes.
func gitCommit(gitDir, tree string, init bool) (peers.Result, error) {
	res := peers.Result{Name: "git add -A && git commit"}
	if init {
		if _, err := git(gitDir, tree, nil, "init", "-q"); err != nil {
			return res, err
		}
	}
	t := time.Now()
	cpu, err := git(gitDir, tree, nil, "add", "-A")
	if err != nil {
		return res, err
	}
	res.CPU += cpu
	if cpu, err = git(gitDir, tree, nil, "commit", "-q", "--allow-empty", "--no-verify", "-m", "bench"); err != nil {
		return res, err
	}
	res.Elapsed, res.CPU = time.Since(t), res.CPU+cpu
	return res, nil
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
	if _, err := git(gitDir, target, env, "checkout", "-q", "-f", "HEAD", "--", "."); err != nil {
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
	d, _, err := timeCapture(context.Background(), store, dir, "large")
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
