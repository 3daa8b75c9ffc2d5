package peers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Restic, when installed (Available("restic"): found on PATH, like every
// peer), is a backup-tool peer:
// `restic backup` into a local repository and `restic restore` out of it.
// Every command runs with RESTIC_PASSWORD set (ResticPassword), the
// repository and cache directory given on the command line, a fixed
// --host, and -q. Restic keeps its defaults otherwise: repository format 2
// with its default (auto) zstd compression, content-defined chunking and
// deduplication, a parent snapshot found by host and path so an unchanged
// file is not read again, and fsync of every file it writes to a local
// repository (restic's local backend syncs what it saves), so unlike git
// and tar | zstd its backups are durable, as sbxdb's captures are.

// ResticPassword is the password of every benchmark repository.
const ResticPassword = "sbxdb-bench"

// resticHost is the --host of every snapshot, so that the parent snapshot
// does not depend on the machine's name.
const resticHost = "sbxbench"

func restic(repo, cache string, args ...string) *exec.Cmd {
	cmd := exec.Command("restic", append([]string{"-q", "--repo", repo, "--cache-dir", cache}, args...)...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RESTIC_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "RESTIC_PASSWORD="+ResticPassword)
	return cmd
}

// ResticInit creates a new repository at repo (`restic init`), with its
// cache in cache. It is not timed.
func ResticInit(repo, cache string) error {
	return run(restic(repo, cache, "init"))
}

// ResticBackup times `restic backup --host sbxbench dir` into repo, a
// repository ResticInit made. Bytes is the apparent size of the repository
// afterwards (DirBytes).
func ResticBackup(repo, cache, dir string) (Result, error) {
	res := Result{Name: "restic backup"}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return res, err
	}
	cmd := restic(repo, cache, "backup", "--host", resticHost, abs)
	if res.Elapsed, res.CPU, err = timed(cmd); err != nil {
		return res, err
	}
	res.Bytes, err = DirBytes(repo)
	return res, err
}

// ResticRestore times `restic restore latest --target target` out of repo.
// target is created if missing and must be empty; restic recreates the
// backed-up directory's absolute path beneath it. Bytes is the apparent
// size of the restored tree.
func ResticRestore(repo, cache, target string) (Result, error) {
	res := Result{Name: "restic restore"}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return res, err
	}
	if err := mustBeEmpty(target); err != nil {
		return res, err
	}
	cmd := restic(repo, cache, "restore", "latest", "--host", resticHost, "--target", target)
	var err error
	if res.Elapsed, res.CPU, err = timed(cmd); err != nil {
		return res, err
	}
	n, err := DirBytes(target)
	res.Bytes = n
	return res, err
}
