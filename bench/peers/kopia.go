package peers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Kopia, when installed (Available("kopia"): found on PATH), is a
// backup-tool peer: `kopia snapshot create` into a local filesystem
// repository and `kopia snapshot restore` out of it. A Kopia value names
// one repository and the files of its client: every command runs with
// KOPIA_PASSWORD (KopiaPassword), its own config file, cache and log
// directories beside the repository, update checks off and no progress
// output, and nothing from the caller's KOPIA_* environment. Kopia keeps
// its defaults (content-defined splitting, deduplication, the previous
// snapshot of the same path as the base of the next, so an unchanged file
// is not read again) except compression, set for the repository to
// zstd-fastest by KopiaInit. Its filesystem storage does not fsync what it
// writes.
type Kopia struct {
	// Repo is the repository directory; Client holds the config file,
	// cache and logs.
	Repo, Client string
}

// KopiaPassword is the password of every benchmark repository.
const KopiaPassword = "sbxdb-bench"

func (k Kopia) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command("kopia", append(args,
		"--config-file", filepath.Join(k.Client, "repository.config"),
		"--log-dir", filepath.Join(k.Client, "logs"),
		"--no-progress")...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KOPIA_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "KOPIA_PASSWORD="+KopiaPassword, "KOPIA_CHECK_FOR_UPDATES=false",
		"KOPIA_CACHE_DIRECTORY="+filepath.Join(k.Client, "cache"))
	return cmd
}

// KopiaInit creates a new filesystem repository at repo, its client files
// in client, and sets its global policy's compression to zstd-fastest.
// It is not timed.
func KopiaInit(repo, client string) (Kopia, error) {
	k := Kopia{Repo: repo, Client: client}
	for _, d := range []string{repo, client} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return k, err
		}
	}
	if err := run(k.cmd("repository", "create", "filesystem", "--path", repo)); err != nil {
		return k, err
	}
	return k, run(k.cmd("policy", "set", "--global", "--compression", "zstd-fastest"))
}

// Snapshot times `kopia snapshot create dir`. Bytes is the apparent size
// of the repository afterwards (DirBytes).
func (k Kopia) Snapshot(dir string) (Result, error) {
	res := Result{Name: "kopia snapshot create"}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return res, err
	}
	if res.Elapsed, res.CPU, err = timed(k.cmd("snapshot", "create", abs)); err != nil {
		return res, err
	}
	res.Bytes, err = DirBytes(k.Repo)
	return res, err
}

// Restore times `kopia snapshot restore dir target`: the latest snapshot
// of dir (absolute) into target, which is created if missing and must be
// empty. Bytes is the apparent size of the restored tree.
func (k Kopia) Restore(dir, target string) (Result, error) {
	res := Result{Name: "kopia snapshot restore"}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return res, err
	}
	if err := mustBeEmpty(target); err != nil {
		return res, err
	}
	if res.Elapsed, res.CPU, err = timed(k.cmd("snapshot", "restore", abs, target)); err != nil {
		return res, err
	}
	res.Bytes, err = DirBytes(target)
	return res, err
}
