package peers

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/bench/workload"
	"github.com/sbxdb/sbxdb/internal/fstree"
)

// small is the tree the tests run the peers on: a few hundred files, one
// binary, and every entry kind.
var small = workload.Spec{Seed: 7, TextFiles: 300, Binaries: 1, DupFraction: 0.03, EmptyDirs: 3, Symlinks: 3, Executables: 3}

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if !Available(tool) {
			t.Skipf("%s not found on PATH", tool)
		}
	}
}

func generate(t *testing.T) (string, workload.Stats) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	st, err := workload.Generate(dir, small)
	if err != nil {
		t.Fatal(err)
	}
	return dir, st
}

// tree reads dir for comparison, anything under skip excluded.
func tree(t *testing.T, dir string, skip ...string) map[string]fstree.Node {
	t.Helper()
	out, err := fstree.Read(dir, skip...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTarZstdRoundTrip(t *testing.T) {
	need(t, "bash", "tar", "zstd")
	dir, st := generate(t)
	archive := filepath.Join(t.TempDir(), "ws.tar.zst")

	res, err := TarZstd(dir, archive, 1)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(archive)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != fi.Size() || res.Bytes <= 0 || res.Elapsed <= 0 || res.Name != "tar | zstd -1" {
		t.Errorf("TarZstd result %+v, archive has %d bytes", res, fi.Size())
	}
	if res.Bytes >= st.Bytes {
		t.Errorf("archive of %d bytes for %d bytes of files: not compressed", res.Bytes, st.Bytes)
	}
	// tar and zstd run under bash: their CPU time is counted.
	if res.CPU <= 0 {
		t.Errorf("TarZstd CPU time %v", res.CPU)
	}
	// -f: a second run overwrites the archive.
	if _, err := TarZstd(dir, archive, 3); err != nil {
		t.Fatalf("overwriting the archive: %v", err)
	}
	if _, err := TarZstd(dir, archive, 0); err == nil {
		t.Error("level 0: no error")
	}

	out := filepath.Join(t.TempDir(), "a", "restored") // parents created
	res, err = UntarZstd(archive, out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != st.Bytes || res.Elapsed <= 0 {
		t.Errorf("UntarZstd result %+v, want %d bytes", res, st.Bytes)
	}
	want, got := tree(t, dir), tree(t, out)
	if len(want) != st.Files+st.Dirs+st.Symlinks {
		t.Fatalf("source tree has %d entries, stats say %+v", len(want), st)
	}
	for p, e := range want {
		if g, ok := got[p]; !ok || g != e {
			t.Errorf("%s: restored %+v (present %v), want %+v", p, g, ok, e)
		}
	}
	if len(got) != len(want) {
		t.Errorf("restored %d entries, want %d", len(got), len(want))
	}

	if _, err := UntarZstd(archive, out); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("UntarZstd into a non-empty directory: %v", err)
	}
	if _, err := UntarZstd(filepath.Join(t.TempDir(), "missing.tar.zst"), filepath.Join(t.TempDir(), "x")); err == nil {
		t.Error("UntarZstd of a missing archive: no error")
	}
}

func TestGitCommitAll(t *testing.T) {
	need(t, "git")
	dir, st := generate(t)
	if err := GitInit(dir); err != nil {
		t.Fatal(err)
	}
	r1, err := GitCommitAll(dir, "first")
	if err != nil {
		t.Fatal(err)
	}
	if r1.Bytes <= 0 || r1.Elapsed <= 0 {
		t.Errorf("first commit: %+v", r1)
	}
	if _, _, err := workload.Edit(dir, small, 0.05, 1); err != nil {
		t.Fatal(err)
	}
	r2, err := GitCommitAll(dir, "second")
	if err != nil {
		t.Fatal(err)
	}
	if r2.Bytes <= r1.Bytes {
		t.Errorf("objects grew from %d to %d bytes after an edit", r1.Bytes, r2.Bytes)
	}
	r3, err := GitCommitAll(dir, "nothing changed")
	if err != nil {
		t.Fatalf("empty commit: %v", err)
	}

	if n := gitOut(t, dir, "rev-list", "--count", "HEAD"); n != "3" {
		t.Errorf("%s commits, want 3", n)
	}
	if s := gitOut(t, dir, "status", "--porcelain"); s != "" {
		t.Errorf("work tree not clean after commit:\n%s", s)
	}
	// Every file and symlink is tracked (git has no empty directories).
	files := strings.Split(gitOut(t, dir, "ls-files"), "\n")
	if len(files) != st.Files+st.Symlinks {
		t.Errorf("git tracks %d paths, want %d files + %d symlinks", len(files), st.Files, st.Symlinks)
	}
	// No gc ran: no packs.
	packs, _ := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "*.pack"))
	if len(packs) > 0 {
		t.Errorf("packs appeared: %v", packs)
	}
	// The repository's config is what GitInit wrote.
	if v := gitOut(t, dir, "config", "--local", "gc.auto"); v != "0" {
		t.Errorf("gc.auto = %q", v)
	}
	if r3.Bytes <= r2.Bytes {
		t.Errorf("an empty commit added no object: %d then %d bytes", r2.Bytes, r3.Bytes)
	}

	// DirBytes and DiskUsage of the work tree, .git excluded by subtraction.
	total, err := DirBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	gitBytes, err := DirBytes(filepath.Join(dir, ".git"))
	if err != nil {
		t.Fatal(err)
	}
	edited := tree(t, dir, ".git")
	var sum int64
	for p, e := range edited {
		if e.Mode.IsRegular() {
			fi, err := os.Stat(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			sum += fi.Size()
		}
	}
	if total-gitBytes != sum {
		t.Errorf("DirBytes: %d - %d, want %d", total, gitBytes, sum)
	}
	du, err := DiskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if du <= 0 {
		t.Errorf("DiskUsage = %d", du)
	}
	if out, err := exec.Command("du", "-s", "--block-size=1", dir).Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) > 0 && f[0] != strconv.FormatInt(du, 10) {
			t.Errorf("DiskUsage = %d, du -s says %s", du, f[0])
		}
	}
}

// gitOut runs git in dir, in the package's isolated environment, and
// returns its trimmed output.
func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func TestAvailable(t *testing.T) {
	if Available("no-such-tool-sbxdb-bench") {
		t.Error("a missing tool is available")
	}
	if _, err := exec.LookPath("sh"); err == nil && !Available("sh") {
		t.Error("sh is on PATH but not available")
	}
}

func TestResticRoundTrip(t *testing.T) {
	need(t, "restic")
	dir, st := generate(t)
	repo, cache := filepath.Join(t.TempDir(), "repo"), filepath.Join(t.TempDir(), "cache")
	if err := ResticInit(repo, cache); err != nil {
		t.Fatal(err)
	}
	res, err := ResticBackup(repo, cache, dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes <= 0 || res.Bytes >= st.Bytes || res.Elapsed <= 0 || res.Name != "restic backup" {
		t.Errorf("ResticBackup result %+v for %d bytes of files", res, st.Bytes)
	}
	out := filepath.Join(t.TempDir(), "restored")
	res, err = ResticRestore(repo, cache, out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != st.Bytes || res.Elapsed <= 0 {
		t.Errorf("ResticRestore result %+v, want %d bytes", res, st.Bytes)
	}
	// restic recreates the absolute path of the backed-up directory.
	want, got := tree(t, dir), tree(t, filepath.Join(out, dir))
	if d := fstree.Diff(want, got); d != nil {
		t.Errorf("%d differences, first: %s", len(d), d[0])
	}
	if _, err := ResticRestore(repo, cache, out); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("ResticRestore into a non-empty directory: %v", err)
	}
}

func TestKopiaRoundTrip(t *testing.T) {
	need(t, "kopia")
	dir, st := generate(t)
	k, err := KopiaInit(filepath.Join(t.TempDir(), "repo"), filepath.Join(t.TempDir(), "client"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := k.Snapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes <= 0 || res.Bytes >= st.Bytes || res.Elapsed <= 0 || res.CPU <= 0 || res.Name != "kopia snapshot create" {
		t.Errorf("Snapshot result %+v for %d bytes of files", res, st.Bytes)
	}
	out := filepath.Join(t.TempDir(), "restored")
	res, err = k.Restore(dir, out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != st.Bytes || res.Elapsed <= 0 {
		t.Errorf("Restore result %+v, want %d bytes", res, st.Bytes)
	}
	if d := fstree.Diff(tree(t, dir), tree(t, out)); d != nil {
		t.Errorf("%d differences, first: %s", len(d), d[0])
	}
	if _, err := k.Restore(dir, out); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Restore into a non-empty directory: %v", err)
	}
}
