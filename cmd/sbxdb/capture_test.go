package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
)

// A tree spec maps slash paths to what is there: "/" an empty directory,
// "-> T" a symlink to T, "x:BYTES" an executable file, else a file's bytes
// (mode 0644).
type tree map[string]string

// makeTree creates spec under root.
func makeTree(t *testing.T, root string, spec tree) {
	t.Helper()
	for p, v := range spec {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case v == "/":
			err = os.MkdirAll(full, 0o755)
		case strings.HasPrefix(v, "-> "):
			err = os.Symlink(v[3:], full)
		case strings.HasPrefix(v, "x:"):
			if err = os.WriteFile(full, []byte(v[2:]), 0o755); err == nil {
				err = os.Chmod(full, 0o755)
			}
		default:
			if err = os.WriteFile(full, []byte(v), 0o644); err == nil {
				err = os.Chmod(full, 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// readTree describes every entry under root in the spec's terms, with "/"
// for every directory and an unusual file mode spelled out.
func readTree(t *testing.T, root string) tree {
	t.Helper()
	out := tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			out[rel] = "/"
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "-> " + target
		case mode.IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			switch mode.Perm() {
			case 0o644:
				out[rel] = string(b)
			case 0o755:
				out[rel] = "x:" + string(b)
			default:
				out[rel] = mode.Perm().String() + ":" + string(b)
			}
		default:
			out[rel] = "?" + mode.String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantTree(t *testing.T, got, want tree) {
	t.Helper()
	for _, p := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[p]; !ok {
			t.Errorf("%s missing, want %q", p, want[p])
		} else if g != want[p] {
			t.Errorf("%s is %q, want %q", p, g, want[p])
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[p]; !ok {
			t.Errorf("%s is %q, want nothing", p, got[p])
		}
	}
}

// fail runs a command line that must fail with exit status 1 and nothing on
// standard output, and returns its one line of standard error.
func fail(t *testing.T, args ...string) string {
	t.Helper()
	return failWith(t, exitError, args...)
}

// failWith runs a command line that must fail with exit status want and
// nothing on standard output, and returns its one line of standard error.
func failWith(t *testing.T, want int, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, args...)
	if code != want || out != "" || !strings.HasPrefix(errOut, "sbxdb: ") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("sbxdb %s: exit %d, stdout %q, stderr %q; want exit %d and one error line", strings.Join(args, " "), code, out, errOut, want)
	}
	return errOut
}

func wantMatch(t *testing.T, got, pattern string) {
	t.Helper()
	if !regexp.MustCompile(pattern).MatchString(got) {
		t.Errorf("got %q, want a match of %q", got, pattern)
	}
}

// sampleTree is the workspace most tests capture. Captured with --exclude '*.log'
// --exclude 'tmp/' it records 4 files of 43 bytes in 3 distinct blobs, 4
// empty directories (empty, deep/er, and config and src/gen, whose only
// entries are excluded) and 2 symlinks.
var sampleTree = tree{
	"README.md":               "hello\n",
	"copy.md":                 "hello\n", // deduplicated
	"src/main.go":             "package main\n",
	"bin/run.sh":              "x:#!/bin/sh\necho hi\n",
	"bin/up":                  "-> ../README.md",
	"link":                    "-> src/main.go",
	"empty":                   "/",
	"deep/er":                 "/",
	".env":                    "SECRET=1\n", // excluded by default
	"config/.env.local":       "X=1\n",      // excluded by default
	"node_modules/m/index.js": "x\n",        // excluded by default
	"build.log":               "log\n",      // --exclude '*.log'
	"src/gen/out.log":         "log\n",      // --exclude '*.log'
	"tmp/scratch.txt":         "tmp\n",      // --exclude 'tmp/'
}

// excluded lists the workspace paths the capture leaves out; everything
// beneath them goes too.
var excluded = []string{".env", "config/.env.local", "node_modules", "build.log", "src/gen/out.log", "tmp"}

// recorded is the part of the workspace tree at root that a capture
// records, as readTree describes it.
func recorded(t *testing.T, root string) tree {
	t.Helper()
	all := readTree(t, root)
	for p := range all {
		for _, x := range excluded {
			if p == x || strings.HasPrefix(p, x+"/") {
				delete(all, p)
			}
		}
	}
	return all
}

// captured makes the workspace in a new directory and captures it as
// checkpoint id on thread main of a new store. It returns the store and the
// workspace.
func captured(t *testing.T, id string) (store, ws string) {
	t.Helper()
	store, ws = filepath.Join(t.TempDir(), "store"), filepath.Join(t.TempDir(), "ws")
	makeTree(t, ws, sampleTree)
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", id, "--exclude", "*.log", "--exclude", "tmp/")
	return store, ws
}

func TestCaptureRestore(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store") // capture creates it
	ws := filepath.Join(t.TempDir(), "ws")
	makeTree(t, ws, sampleTree)
	out := ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp1", "--exclude", "*.log", "--exclude", "tmp/")
	wantMatch(t, out, `^captured cp1 on thread main: 4 files \(43 B\), 0 unchanged, 4 read \(43 B\), `+
		`3 new blobs \(200 B stored\), 1 deduplicated, 6 excluded by policy in \d+\.\d\ds\n$`)

	show := ok(t, "show", "cp1", "--db", store)
	for _, s := range []string{"parent      (root)\n", "reason      automatic\n", "entries: 10 (4 files, 4 empty dirs, 2 symlinks)\n"} {
		if !strings.Contains(show, s) {
			t.Errorf("show cp1 lacks %q:\n%s", s, show)
		}
	}
	// The lease is released.
	if th := ok(t, "threads", "--db", store); !strings.Contains(th, " none\n") {
		t.Errorf("writer lease not released:\n%s", th)
	}

	want := recorded(t, ws)
	if want["config"] != "/" || want["src/gen"] != "/" || want["bin/run.sh"] != "x:#!/bin/sh\necho hi\n" || want["link"] != "-> src/main.go" {
		t.Fatalf("fixture: %q", want)
	}
	dst := filepath.Join(t.TempDir(), "a", "restored") // parents are created
	out = ok(t, "restore", "cp1", dst, "--db", store, "--exclude", "*.log", "--exclude", "tmp/")
	wantMatch(t, out, `^restored cp1 into `+regexp.QuoteMeta(dst)+`: 4 files \(43 B\), 4 empty dirs, 2 symlinks in \d+\.\d\ds\n$`)
	wantTree(t, readTree(t, dst), want)

	// --thread restores the head; an empty directory is a good target.
	dst2 := t.TempDir()
	out = ok(t, "restore", "--thread", "main", dst2, "--db", store, "--exclude", "*.log", "--exclude", "tmp/", "--json")
	r := decode[restoreJSON](t, out)
	if r.ID != "cp1" || r.Dir != dst2 || r.Files != 4 || r.Dirs != 4 || r.Symlinks != 2 || r.Bytes != 43 {
		t.Errorf("restore --json: %+v", r)
	}
	wantTree(t, readTree(t, dst2), want)

	// A target that is not empty is refused, and left alone.
	busy := t.TempDir()
	makeTree(t, busy, tree{"keep.txt": "mine\n"})
	msg := fail(t, "restore", "cp1", busy, "--db", store, "--exclude", "*.log", "--exclude", "tmp/")
	if msg != "sbxdb: SANDBOX_SNAPSHOT_INVALID_WORKSPACE: restore target "+busy+" is not empty\n" {
		t.Errorf("restore into a non-empty directory: %q", msg)
	}
	wantTree(t, readTree(t, busy), tree{"keep.txt": "mine\n"})

	// The restore's policy must be the capture's.
	ok(t, "capture", ws, "--db", store, "--thread", "all", "--id", "all1")
	msg = fail(t, "restore", "all1", filepath.Join(t.TempDir(), "x"), "--db", store, "--exclude", "*.log")
	if !strings.HasPrefix(msg, "sbxdb: SANDBOX_SNAPSHOT_INVALID_PATH: ") || !strings.Contains(msg, `"build.log"`) {
		t.Errorf("restore under another policy: %q", msg)
	}
}

func TestCaptureAgain(t *testing.T) {
	store, ws := captured(t, "cp1")
	// Files older than the racy window are taken from the stat cache at the
	// capture after the one that read them.
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{"README.md", "copy.md", "src/main.go", "bin/run.sh"} {
		if err := os.Chtimes(filepath.Join(ws, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp2", "--exclude", "*.log", "--exclude", "tmp/")
	js := decode[captureJSON](t, ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp3",
		"--exclude", "*.log", "--exclude", "tmp/", "--label", "v1", "--json"))
	if js.ID != "cp3" || js.ThreadID != "main" || deref(js.ParentID) != "cp2" || js.Reason != chain.ReasonNamed || js.Label != "v1" || js.Seconds <= 0 {
		t.Errorf("capture --json: %+v", js)
	}
	if s := js.Stats; !reflect.DeepEqual(s, sbxdb.CaptureStats{Files: 4, Dirs: 4, Symlinks: 2, Bytes: 43, Unchanged: 4, Excluded: 6,
		ExcludedByRule: map[string]int{".env*": 2, "node_modules": 1, "--exclude *.log": 2, "--exclude tmp/": 1}}) {
		t.Errorf("capture --json stats: %+v", s)
	}
	m := decode[map[string]any](t, ok(t, "capture", ws, "--db", store, "--thread", "fresh", "--json", "--exclude", "*.log", "--exclude", "tmp/"))
	if p, present := m["parentCheckpointId"]; !present || p != nil || m["reason"] != "automatic" || len(m["id"].(string)) != 36 {
		t.Errorf("root capture --json: %v", m)
	}
}

func TestDiff(t *testing.T) {
	store, ws := captured(t, "cp1")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(ws, "README.md"), []byte("hello, world\n"), 0o644))
	must(os.Chmod(filepath.Join(ws, "src/main.go"), 0o755))
	must(os.Remove(filepath.Join(ws, "bin/run.sh")))
	must(os.Remove(filepath.Join(ws, "empty")))
	must(os.Remove(filepath.Join(ws, "link")))
	makeTree(t, ws, tree{"link": "-> README.md", "notes/new.txt": "new\n"})
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp2", "--exclude", "*.log", "--exclude", "tmp/")

	out := ok(t, "diff", "cp1", "cp2", "--db", store)
	want := `M README.md (6 B -> 13 B)
- bin/run.sh (18 B, executable)
- empty (dir)
M link (symlink to src/main.go -> symlink to README.md)
+ notes/new.txt (4 B)
M src/main.go (13 B -> 13 B, executable)
1 added, 2 removed, 3 changed
`
	if out != want {
		t.Errorf("diff cp1 cp2:\n%s\nwant:\n%s", out, want)
	}
	out = ok(t, "diff", "--db", store, "cp2", "cp1")
	if !strings.HasPrefix(out, "M README.md (13 B -> 6 B)\n+ bin/run.sh (18 B, executable)\n+ empty (dir)\n") ||
		!strings.HasSuffix(out, "\n- notes/new.txt (4 B)\nM src/main.go (13 B, executable -> 13 B)\n2 added, 1 removed, 3 changed\n") {
		t.Errorf("diff cp2 cp1:\n%s", out)
	}
	if out := ok(t, "diff", "cp1", "cp1", "--db", store); out != "0 added, 0 removed, 0 changed\n" {
		t.Errorf("diff cp1 cp1: %q", out)
	}

	d := decode[diffJSON](t, ok(t, "diff", "cp1", "cp2", "--db", store, "--json"))
	if d.From != "cp1" || d.To != "cp2" || d.Added != 1 || d.Removed != 2 || d.Changed != 3 || len(d.Changes) != 6 {
		t.Fatalf("diff --json: %+v", d)
	}
	readme := d.Changes[0]
	if readme.Op != "M" || readme.Path != "README.md" || readme.Old.BlobKey != testkit.FileKeyOf("hello\n") || readme.New.BlobKey != testkit.FileKeyOf("hello, world\n") || readme.New.Size != 13 {
		t.Errorf("diff --json README.md: %+v %+v %+v", readme, readme.Old, readme.New)
	}
	if c := d.Changes[4]; c.Op != "+" || c.Path != "notes/new.txt" || c.Old != nil || c.New.Kind != chain.KindFile {
		t.Errorf("diff --json notes/new.txt: %+v", c)
	}
	if c := d.Changes[1]; c.Op != "-" || c.New != nil || !c.Old.Executable {
		t.Errorf("diff --json bin/run.sh: %+v", c)
	}
	m := decode[map[string]any](t, ok(t, "diff", "cp1", "cp1", "--db", store, "--json"))
	if cs, isList := m["changes"].([]any); !isList || len(cs) != 0 {
		t.Errorf("diff --json of equal checkpoints: %v", m)
	}

	if msg := fail(t, "diff", "cp1", "nope", "--db", store); msg != "sbxdb: SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND: no checkpoint id is or starts with \"nope\"\n" {
		t.Errorf("diff with a missing checkpoint: %q", msg)
	}
}

func TestCat(t *testing.T) {
	store, _ := captured(t, "cp1")
	for path, want := range map[string]string{"README.md": "hello\n", "./src/main.go": "package main\n", "bin/run.sh": "#!/bin/sh\necho hi\n"} {
		if out := ok(t, "cat", "cp1", path, "--db", store); out != want {
			t.Errorf("cat %s: %q, want %q", path, out, want)
		}
	}
	for _, tc := range [][3]string{
		{"cp1", "nope.txt", "sbxdb: nope.txt is not in checkpoint cp1\n"},
		{"cp1", ".env", "sbxdb: .env is not in checkpoint cp1\n"},
		{"cp1", "empty", "sbxdb: empty is a directory in checkpoint cp1, not a file\n"},
		{"cp1", "src", "sbxdb: src is not in checkpoint cp1\n"},
		{"cp1", "link", "sbxdb: link is a symlink in checkpoint cp1, not a file\n"},
		{"nope", "README.md", "sbxdb: SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND: no checkpoint id is or starts with \"nope\"\n"},
	} {
		if msg := fail(t, "cat", tc[0], tc[1], "--db", store); msg != tc[2] {
			t.Errorf("cat %s %s: %q, want %q", tc[0], tc[1], msg, tc[2])
		}
	}
}

// flipLast inverts the last byte of the file at path.
func flipLast(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func only(t *testing.T, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) != 1 {
		t.Fatalf("%s: %q, %v; want one file", pattern, m, err)
	}
	return m[0]
}

func TestCatDamagedBlob(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) // incompressible bytes
	noise := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return string(b)
	}
	small, big, gone := noise(300), noise(2<<20), "gone\n"
	store, ws := filepath.Join(t.TempDir(), "store"), t.TempDir()
	// A capture writes one pack: the first holds small.bin alone.
	makeTree(t, ws, tree{"small.bin": small})
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp0")
	pack := only(t, filepath.Join(store, "blobs", "packs", "*.pack"))
	makeTree(t, ws, tree{"big.bin": big, "gone.txt": gone})
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp1")
	for name, content := range map[string]string{"small.bin": small, "big.bin": big, "gone.txt": gone} {
		if out := ok(t, "cat", "cp1", name, "--db", store); out != content {
			t.Fatalf("cat %s before the damage: %d bytes, want %d", name, len(out), len(content))
		}
	}

	// big.bin is a large blob, a file of its own. Flip the last byte of
	// small.bin's pack and of big.bin's file, and drop gone.txt's blob from
	// the index.
	flipLast(t, pack)
	flipLast(t, only(t, filepath.Join(store, "blobs", "large", "files", "*", "*")))
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Blobs().Delete(t.Context(), testkit.FileKeyOf(gone)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	// Packed blobs are checked before any byte is written.
	code, out, errOut := cli(t, "cat", "cp1", "small.bin", "--db", store)
	if want := "sbxdb: SANDBOX_SNAPSHOT_INVALID_BLOB: \"small.bin\": blob " + testkit.FileKeyOf(small) + " is damaged: "; code != exitDamaged || out != "" || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 {
		t.Errorf("cat of a damaged packed blob: exit %d, %d bytes out, stderr %q; want %q…", code, len(out), errOut, want)
	}
	// A large blob streams: the damage shows at its end, after bytes were
	// written; the exit status says to discard them.
	code, out, errOut = cli(t, "cat", "cp1", "big.bin", "--db", store)
	if want := "sbxdb: SANDBOX_SNAPSHOT_INVALID_BLOB: \"big.bin\": blob " + testkit.FileKeyOf(big) + " is damaged: "; code != exitDamaged || len(out) > len(big) || !strings.HasPrefix(errOut, want) {
		t.Errorf("cat of a damaged large blob: exit %d, %d bytes out, stderr %q; want %q…", code, len(out), errOut, want)
	}
	t.Logf("damaged large blob: %d of %d bytes written before the error", len(out), len(big))
	if msg := failWith(t, exitDamaged, "cat", "cp1", "gone.txt", "--db", store); msg != "sbxdb: SANDBOX_SNAPSHOT_MISSING_BLOB: \"gone.txt\": blob "+testkit.FileKeyOf(gone)+" is missing\n" {
		t.Errorf("cat of a missing blob: %q", msg)
	}

	// restore refuses them too, and leaves nothing behind.
	dst := filepath.Join(t.TempDir(), "out")
	if msg := failWith(t, exitDamaged, "restore", "cp1", dst, "--db", store); !strings.Contains(msg, "SANDBOX_SNAPSHOT_INVALID_BLOB") && !strings.Contains(msg, "SANDBOX_SNAPSHOT_MISSING_BLOB") {
		t.Errorf("restore of damaged blobs: %q", msg)
	}
	if _, err := os.Lstat(dst); !os.IsNotExist(err) {
		t.Errorf("failed restore left %s: %v", dst, err)
	}
}

func TestSecretEnv(t *testing.T) {
	const secret = "hunter2-s3cr3t"
	t.Setenv("SBXDB_TEST_TOKEN", secret)
	store, ws := filepath.Join(t.TempDir(), "store"), t.TempDir()
	makeTree(t, ws, tree{"app.cfg": "token=" + secret + "; again " + secret + "\n", "plain.txt": "nothing here\n"})
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp1", "--secret-env", "SBXDB_TEST_TOKEN")
	zeros := strings.Repeat("\x00", len(secret))
	if out := ok(t, "cat", "cp1", "app.cfg", "--db", store); out != "token="+zeros+"; again "+zeros+"\n" {
		t.Errorf("cat of a redacted file: %q", out)
	}
	if out := ok(t, "cat", "cp1", "plain.txt", "--db", store); out != "nothing here\n" {
		t.Errorf("cat plain.txt: %q", out)
	}
	// Not a byte of the secret reached the store.
	filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the secret", p)
			}
		}
		return nil
	})

	if msg := fail(t, "capture", ws, "--db", store, "--thread", "main", "--secret-env", "SBXDB_TEST_UNSET_VAR"); msg != "sbxdb: --secret-env SBXDB_TEST_UNSET_VAR: the environment variable is not set\n" {
		t.Errorf("unset secret variable: %q", msg)
	}
	t.Setenv("SBXDB_TEST_EMPTY", "")
	if msg := fail(t, "capture", ws, "--db", store, "--thread", "main", "--secret-env", "SBXDB_TEST_EMPTY"); msg != "sbxdb: --secret-env SBXDB_TEST_EMPTY: the environment variable is empty\n" {
		t.Errorf("empty secret variable: %q", msg)
	}
	if rs := rows(ok(t, "log", "main", "--db", store)); len(rs) != 2 {
		t.Errorf("failed captures appended: %q", rs)
	}
}

func TestCaptureWriterConflict(t *testing.T) {
	store, ws := captured(t, "cp1")
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.AcquireWriter(t.Context(), "main"); err != nil { // live for two minutes
		t.Fatal(err)
	}
	db.Close()
	msg := failWith(t, exitBusy, "capture", ws, "--db", store, "--thread", "main")
	if want := `sbxdb: SANDBOX_SNAPSHOT_WRITER_CONFLICT: thread "main" has a live writer (fence 2)`; !strings.HasPrefix(msg, want) {
		t.Errorf("capture under another writer: %q, want %q…", msg, want)
	}
	if rs := rows(ok(t, "log", "main", "--db", store)); len(rs) != 2 {
		t.Errorf("conflicting capture appended: %q", rs)
	}
	// Other threads are free.
	ok(t, "capture", ws, "--db", store, "--thread", "other", "--id", "o1")
	th := decode[[]threadRow](t, ok(t, "threads", "--db", store, "--json"))
	if len(th) != 2 || th[0].ThreadID != "main" || th[0].Writer.State != "live" || th[1].ThreadID != "other" || th[1].Writer.State != "none" {
		t.Errorf("threads after the conflict: %+v", th)
	}
}

// TestCommandsOnABusyStore: every command that opens the store says it is
// busy, naming the holder, instead of waiting for it.
func TestCommandsOnABusyStore(t *testing.T) {
	localOnly(t) // a store this process holds; a server holding it is no busy store
	store, ws := captured(t, "cp1")
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	defer func(d time.Duration) { lockTimeout = d }(lockTimeout)
	lockTimeout = 100 * time.Millisecond
	for _, args := range [][]string{
		{"capture", ws, "--thread", "main"},
		{"restore", "cp1", filepath.Join(t.TempDir(), "out")},
		{"diff", "cp1", "cp1"},
		{"cat", "cp1", "README.md"},
		{"threads"},
		{"log", "main"},
		{"show", "cp1"},
		{"refs"},
		{"stats"},
		{"check"},
		{"gc", "--older-than", "1h"},
		{"compact"},
		{"migrate"},
	} {
		start := time.Now()
		msg := failWith(t, exitBusy, append(args, "--db", store)...)
		if want := "sbxdb: store " + store + " is busy: held by another process (" + proc.Self().String() + ")\n"; msg != want {
			t.Errorf("%s on a busy store: %q, want %q", args[0], msg, want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s on a busy store took %v", args[0], d)
		}
	}
}

func TestCaptureInterrupted(t *testing.T) {
	store, ws := captured(t, "cp1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code := runContext(ctx, []string{"capture", ws, "--db", store, "--thread", "main"}, &out, &errOut)
	if code != exitInterrupted || out.Len() != 0 || errOut.String() != "sbxdb: interrupted\n" {
		t.Errorf("interrupted capture: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	th := decode[[]threadRow](t, ok(t, "threads", "--db", store, "--json"))
	if len(th) != 1 || th[0].Checkpoints != 1 || th[0].Writer.State != "none" {
		t.Errorf("threads after the interrupt: %+v", th)
	}
}

func TestWorkspaceUsage(t *testing.T) {
	store, ws := captured(t, "cp1")
	for _, tc := range []struct {
		args []string
		err  string // first line of stderr
	}{
		{[]string{"capture", ws}, "sbxdb capture: missing --thread THREAD"},
		{[]string{"capture", "--thread", "main"}, "sbxdb capture: missing DIR"},
		{[]string{"capture", ws, ws, "--thread", "main"}, `sbxdb capture: unexpected argument "` + ws + `"`},
		{[]string{"capture", ws, "--thread", "main", "--exclude", "src/[a"}, `sbxdb capture: workspace: exclude pattern "src/[a": malformed segment "[a" (unclosed [ class or trailing \): syntax error in pattern`},
		{[]string{"restore"}, "sbxdb restore: missing CHECKPOINT DIR"},
		{[]string{"restore", "cp1"}, "sbxdb restore: missing DIR"},
		{[]string{"restore", "--thread", "main"}, "sbxdb restore: missing DIR"},
		{[]string{"restore", "--thread", "main", "cp1", "out"}, "sbxdb restore: give CHECKPOINT or --thread THREAD, not both"},
		{[]string{"restore", "cp1", "out", "--include", ""}, `sbxdb restore: workspace: include pattern "": empty pattern: syntax error in pattern`},
		{[]string{"diff", "cp1"}, "sbxdb diff: missing B"},
		{[]string{"cat", "cp1"}, "sbxdb cat: missing PATH"},
		{[]string{"cat", "cp1", "README.md", "--jsn"}, "sbxdb cat: unknown flag: --jsn; did you mean --json?"},
	} {
		code, out, errOut := cli(t, append(tc.args, "--db", store)...)
		first, rest, _ := strings.Cut(errOut, "\n")
		if code != 2 || out != "" || first != tc.err || !strings.HasPrefix(rest, "usage: sbxdb "+tc.args[0]+" ") || strings.Count(rest, "\n") != 1 {
			t.Errorf("sbxdb %q: exit %d, stdout %q, stderr %q; want exit 2, %q and a usage line", tc.args, code, out, errOut, tc.err)
		}
	}
	for _, tc := range [][2][]string{
		{{"restore", "--thread", "nope", filepath.Join(t.TempDir(), "x")}, {"sbxdb: thread nope has no head checkpoint\n"}},
		{{"restore", "nope", filepath.Join(t.TempDir(), "x")}, {`sbxdb: SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND: no checkpoint id is or starts with "nope"` + "\n"}},
		{{"capture", filepath.Join(ws, "README.md"), "--thread", "main"}, {"sbxdb: SANDBOX_SNAPSHOT_INVALID_WORKSPACE: workspace " + filepath.Join(ws, "README.md") + " is not a directory\n"}},
	} {
		if msg := fail(t, append(tc[0], "--db", store)...); msg != tc[1][0] {
			t.Errorf("sbxdb %q: %q, want %q", tc[0], msg, tc[1][0])
		}
	}
	if msg := fail(t, "capture", ws, "--thread", "main", "--id", "cp1", "--db", store); !strings.HasPrefix(msg, "sbxdb: SANDBOX_SNAPSHOT_DUPLICATE_ID: ") {
		t.Errorf("capture with a used id: %q", msg)
	}
	// read-only commands never create a store.
	missing := filepath.Join(t.TempDir(), "nothing")
	for _, args := range [][]string{{"restore", "cp1", filepath.Join(t.TempDir(), "x")}, {"diff", "a", "b"}, {"cat", "a", "b"}} {
		if msg := failWith(t, exitNoStore, append(args, "--db", missing)...); msg != "sbxdb: no sbxdb store at "+missing+"\n" {
			t.Errorf("%s without a store: %q", args[0], msg)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a read-only command created %s", missing)
	}
}

// TestWithLease holds leases of the store's files and, through the API,
// of a server: both renew, release on an interrupt and report a lost
// lease the same way.
func TestWithLease(t *testing.T) {
	t.Run("files", func(t *testing.T) { testWithLease(t, false) })
	t.Run("server", func(t *testing.T) { testWithLease(t, true) })
}

func testWithLease(t *testing.T, served bool) {
	var skew atomic.Int64 // added to the store's clock
	store := filepath.Join(t.TempDir(), "store")
	db, err := engine.Open(store, &engine.Options{
		NoSync: true, LeaseDuration: time.Second, RenewAfter: 5 * time.Millisecond,
		Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var via leaser = db
	if served {
		sock := filepath.Join(store, socketName)
		serveOnSocket(t, db, sock, nil)
		c, err := client.New("unix:"+sock, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		via = c
	}
	held := func(thread string) bool {
		t.Helper()
		ws, err := db.Writers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return ws[thread].Held
	}

	// Interrupted: the lease is released all the same.
	ctx, cancel := context.WithCancel(t.Context())
	err = withLease(ctx, via, "main", io.Discard, func(ctx context.Context, w lease.Writer) error {
		if w.ThreadID != "main" || !held("main") {
			t.Errorf("no lease held: %+v", w)
		}
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || held("main") {
		t.Errorf("interrupted: %v, lease held %v", err, held("main"))
	}

	// Renewed while the work runs, past the lease duration.
	err = withLease(t.Context(), via, "main", io.Discard, func(ctx context.Context, w lease.Writer) error {
		// The clock passes the first expiry in steps shorter than the
		// lease, each followed by renewals.
		for range 10 {
			skew.Add(int64(200 * time.Millisecond))
			time.Sleep(20 * time.Millisecond)
		}
		return ctx.Err()
	})
	if err != nil || held("main") {
		t.Errorf("renewed: %v, lease held %v", err, held("main"))
	}

	// Lost: a renewal fails once the lease has expired; the work is
	// cancelled and the loss is the error.
	err = withLease(t.Context(), via, "lost", io.Discard, func(ctx context.Context, w lease.Writer) error {
		skew.Add(int64(time.Hour))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("not cancelled")
		}
	})
	if want := "renewing the writer lease of thread lost: SANDBOX_SNAPSHOT_WRITER_LOST: "; err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, chain.ErrWriterLost) {
		t.Errorf("lost lease: %v, want %q…", err, want)
	}

	// The work's error wins; a conflict acquires nothing.
	boom := errors.New("boom")
	if err := withLease(t.Context(), via, "main", io.Discard, func(context.Context, lease.Writer) error { return boom }); err != boom || held("main") {
		t.Errorf("failing work: %v, lease held %v", err, held("main"))
	}
	l, err := db.AcquireWriter(t.Context(), "taken")
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	err = withLease(t.Context(), via, "taken", io.Discard, func(context.Context, lease.Writer) error { ran = true; return nil })
	if ran || !errors.Is(err, chain.ErrWriterConflict) || !held("taken") {
		t.Errorf("conflict: ran %v, %v", ran, err)
	}
	l.Release(t.Context())
}

// A store whose directory is the workspace captures the workspace without
// the store's own entries, its server's socket among them, locally and
// through a server, as it leaves out a store beneath the workspace.
func TestCaptureStoreIsWorkspace(t *testing.T) {
	store := newStore(t)
	if err := os.WriteFile(filepath.Join(store, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(how string, code int, out, errOut string) {
		t.Helper()
		if code != 0 || errOut != "" || !strings.Contains(out, ": 1 file (2 B),") {
			t.Fatalf("capture of the store's directory %s: exit %d, stdout %q, stderr %q; want 1 file", how, code, out, errOut)
		}
	}
	code, out, errOut := runArgs([]string{"--db", store, "capture", "--thread", "w", "--id", "cp-local", store})
	check("locally", code, out, errOut)
	ls := ok(t, "--db", store, "ls", "cp-local")
	if strings.Contains(ls, "sbx") || strings.Contains(ls, "blobs") || !strings.Contains(ls, "a.txt") {
		t.Errorf("ls of the capture:\n%s", ls)
	}

	p := startServe(t, 1, "--db", store)
	code, out, errOut = runArgs([]string{"--server", p.addrs[0], "capture", "--thread", "w", "--id", "cp-served", store})
	check("through a server", code, out, errOut)
}
