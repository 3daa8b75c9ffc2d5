// Package peers runs and times the tools that sbxdb's checkpoint benchmarks
// compare it with, on the same directory in the same run:
//
//   - git: `git add -A && git commit` into a repository in the tree
//     (GitInit, GitCommitAll);
//   - tar and zstd: `tar -cf - . | zstd -<level> -T0` into an archive and
//     back (TarZstd, UntarZstd);
//   - restic, when installed: `restic backup` into a local repository and
//     `restic restore` out of it (ResticInit, ResticBackup, ResticRestore;
//     see restic.go);
//   - kopia, when installed: `kopia snapshot create` into a filesystem
//     repository and `kopia snapshot restore` out of it (KopiaInit,
//     KopiaSnapshot, KopiaRestore; see kopia.go).
//
// Each runs through os/exec (bash for the pipelines), found on PATH, and
// the returned Result holds the wall-clock time of the commands, process
// start-up included, their CPU time and the bytes they left on disk.
//
// Durability is not equal between the sides, and this package does not try
// to make it so: nothing here calls fsync or sync. tar | zstd syncs nothing;
// restic syncs the files it writes to its repository; kopia's filesystem
// storage does not.
// Git with its default core.fsync fsyncs packs and their indexes but not
// loose objects, refs or the index, and `git add` and `git commit` write
// only loose objects, so nothing of a timed commit is fsynced either; only
// the kernel's writeback makes these files durable, later. sbxdb fsyncs its store, so a
// benchmark must either say so next to these numbers or time sbxdb with a
// comparable setting.
//
// Git runs isolated from the user's and the system's configuration:
// GIT_CONFIG_NOSYSTEM=1, GIT_CONFIG_GLOBAL=/dev/null, HOME and
// XDG_CONFIG_HOME pointing at /dev/null (so no global ignore or attributes
// file applies), every other inherited GIT_* variable removed, LC_ALL=C.
// Automatic gc and maintenance are off (in the repository config and again
// on every command line), so no packing happens during a timed commit; git
// keeps its default object compression (core.loosecompression 1).
package peers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Result is one timed run of a peer command.
type Result struct {
	// Name says which command ran, e.g. "git add -A && git commit" or
	// "tar | zstd -1".
	Name string
	// Elapsed is the wall-clock time of the command(s), process start-up
	// included, measured with the monotonic clock.
	Elapsed time.Duration
	// CPU is the user plus system time of the command's processes and of
	// every descendant they waited for (tar and zstd under bash), from the
	// rusage wait4 returns.
	CPU time.Duration
	// Bytes is the size of what the command left on disk (apparent size, as
	// DirBytes counts it): the archive, the .git/objects directory, the
	// extracted tree; 0 when not applicable.
	Bytes int64
}

// Available reports whether tool ("git", "zstd", "tar", "bash", "restic",
// "kopia") is found on PATH.
func Available(tool string) bool {
	_, err := exec.LookPath(tool)
	return err == nil
}

// gitConfig is the repository configuration GitInit writes.
var gitConfig = [][2]string{
	{"user.name", "sbxdb bench"},
	{"user.email", "bench@sbxdb.invalid"},
	{"commit.gpgsign", "false"},
	{"gc.auto", "0"},
	{"gc.autoDetach", "false"},
	{"maintenance.auto", "false"},
	{"core.hooksPath", os.DevNull},
	{"core.autocrlf", "false"},
	{"core.safecrlf", "false"},
}

// gitFlags go on every git command line, so that a repository that GitInit
// did not set up never gcs during a timed run either.
var gitFlags = []string{"-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "commit.gpgsign=false"}

// gitEnv returns the environment of every git command: the process's,
// without GIT_* variables, isolated from global and system configuration.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "GIT_"), k == "HOME", k == "XDG_CONFIG_HOME", k == "LC_ALL":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_TERMINAL_PROMPT=0",
		"HOME="+os.DevNull,
		"XDG_CONFIG_HOME="+os.DevNull,
		"LC_ALL=C",
	)
}

// git runs one git command in dir.
func git(dir string, args ...string) error {
	cmd := exec.Command("git", append(slices.Clone(gitFlags), args...)...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	return run(cmd)
}

// run runs cmd and turns a failure into an error that carries its stderr.
func run(cmd *exec.Cmd) error {
	_, _, err := timed(cmd)
	return err
}

// timed runs cmd and returns its wall-clock time and its CPU time (user +
// system, its waited-for descendants included); a failure is an error
// that carries its stderr.
func timed(cmd *exec.Cmd) (elapsed, cpu time.Duration, err error) {
	var stderr bytes.Buffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("peers: %s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return time.Since(start), CPUTime(cmd.ProcessState), nil
}

// CPUTime returns the user plus system time of an exited process, its
// waited-for descendants included.
func CPUTime(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	return ps.UserTime() + ps.SystemTime()
}

// GitInit makes dir (which must exist) a git repository: `git init -q` on
// branch main, then, in the repository's own config, user.name and
// user.email, commit.gpgsign=false, gc.auto=0, gc.autoDetach=false,
// maintenance.auto=false, core.hooksPath=/dev/null (no hooks) and
// core.autocrlf=false. It is not timed.
func GitInit(dir string) error {
	if err := git(dir, "-c", "init.defaultBranch=main", "init", "-q"); err != nil {
		return err
	}
	for _, kv := range gitConfig {
		if err := git(dir, "config", "--local", kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}

// GitCommitAll times `git add -A && git commit -q --allow-empty
// --no-verify -m msg` in dir, a repository set up by GitInit: two git
// processes, run one after the other. Bytes is the apparent size of
// .git/objects afterwards (loose objects, zlib-compressed; no packs, since
// gc is off). Git does not fsync the objects (see the package comment).
func GitCommitAll(dir, msg string) (Result, error) {
	res := Result{Name: "git add -A && git commit"}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "--allow-empty", "--no-verify", "-m", msg}} {
		cmd := exec.Command("git", append(slices.Clone(gitFlags), args...)...)
		cmd.Dir = dir
		cmd.Env = gitEnv()
		elapsed, cpu, err := timed(cmd)
		if err != nil {
			return res, err
		}
		res.Elapsed += elapsed
		res.CPU += cpu
	}
	n, err := DirBytes(filepath.Join(dir, ".git", "objects"))
	res.Bytes = n
	return res, err
}

// TarZstd times `tar -cf - -C dir . | zstd -<level> -q -T0 -f -o archive`
// run by bash with pipefail. zstd compresses on as many threads as there
// are cores (-T0), while tar reads in its own process. -f overwrites an
// existing archive. level must be 1–19. Nothing is fsynced. Bytes is the
// archive's size.
func TarZstd(dir, archive string, level int) (Result, error) {
	res := Result{Name: "tar | zstd -" + strconv.Itoa(level)}
	if level < 1 || level > 19 {
		return res, fmt.Errorf("peers: zstd level %d not in 1–19", level)
	}
	cmd := exec.Command("bash", "-c",
		`set -o pipefail; tar -cf - -C "$1" . | zstd -"$2" -q -T0 -f -o "$3"`,
		"bash", dir, strconv.Itoa(level), archive)
	var err error
	if res.Elapsed, res.CPU, err = timed(cmd); err != nil {
		return res, err
	}
	fi, err := os.Stat(archive)
	if err != nil {
		return res, err
	}
	res.Bytes = fi.Size()
	return res, nil
}

// UntarZstd times `zstd -d -q -c archive | tar -xf - -C dir` run by bash
// with pipefail. dir is created (with its parents) if missing and must be
// empty; creating and checking it is not timed. tar restores modes,
// symlinks and empty directories (and owners when run as root). Nothing is
// fsynced. Bytes is the apparent size of the extracted tree (DirBytes).
func UntarZstd(archive, dir string) (Result, error) {
	res := Result{Name: "zstd -d | tar -x"}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	if err := mustBeEmpty(dir); err != nil {
		return res, err
	}
	cmd := exec.Command("bash", "-c",
		`set -o pipefail; zstd -d -q -c -- "$1" | tar -xf - -C "$2"`,
		"bash", archive, dir)
	var err error
	if res.Elapsed, res.CPU, err = timed(cmd); err != nil {
		return res, err
	}
	n, err := DirBytes(dir)
	res.Bytes = n
	return res, err
}

func mustBeEmpty(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("peers: %s is not empty", dir)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// DirBytes returns the sum of the sizes of the regular files under dir
// (apparent size, like `du -b` counting only files): symlinks are not
// followed and count nothing, nor do directories.
func DirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}
