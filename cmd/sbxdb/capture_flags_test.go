package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
)

// nodeTree is a workspace holding what the default policy leaves out.
var nodeTree = tree{
	"src/app.js":                   "app\n",
	"node_modules/left-pad/idx.js": "pad\n",
	"node_modules/.bin/pad":        "-> ../left-pad/idx.js",
	".env":                         "SECRET=1\n",
	".git/HEAD":                    "ref: refs/heads/main\n",
	"empty":                        "/",
}

// --no-default-excludes records what the default policy leaves out, and
// restore, which applies the capture's policy, needs it too: without it
// the restore refuses the checkpoint and writes nothing.
func TestNoDefaultExcludes(t *testing.T) {
	store, ws := filepath.Join(t.TempDir(), "store"), filepath.Join(t.TempDir(), "ws")
	makeTree(t, ws, nodeTree)

	js := decode[captureJSON](t, ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "d1", "--json"))
	if want := (sbxdb.CaptureStats{Files: 1, Dirs: 1, Bytes: 4, FilesRead: 1, BytesRead: 4, BlobsNew: 1, Excluded: 3,
		ExcludedByRule: map[string]int{".env*": 1, ".git": 1, "node_modules": 1}}); !reflect.DeepEqual(js.Stats, withoutBytesNew(js.Stats, want)) {
		t.Errorf("default policy stats %+v, want %+v", js.Stats, want)
	}

	out := ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "n1", "--no-default-excludes")
	wantMatch(t, out, `^captured n1 on thread main: 4 files \(38 B\), .*, \d+ deduplicated in \d+\.\d\ds\n$`)

	dst := filepath.Join(t.TempDir(), "out")
	msg := fail(t, "restore", "n1", dst, "--db", store)
	wantMatch(t, msg, `^sbxdb: SANDBOX_SNAPSHOT_INVALID_PATH: manifest path "\.env" is excluded by the restore policy\n$`)
	if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused restore left %s: %v", dst, err)
	}

	ok(t, "restore", "n1", dst, "--db", store, "--no-default-excludes")
	wantTree(t, readTree(t, dst), readTree(t, ws))
}

// withoutBytesNew returns got with BytesNew of want: the compressed size
// is not this test's business.
func withoutBytesNew(got, want sbxdb.CaptureStats) sbxdb.CaptureStats {
	want.BytesNew = got.BytesNew
	return want
}

// --include that matches no file is an error that records nothing: no
// checkpoint, the head as it was. --allow-empty records the empty
// checkpoint; without --include an empty workspace is captured as before.
func TestCaptureEmptyInclude(t *testing.T) {
	store, ws := filepath.Join(t.TempDir(), "store"), filepath.Join(t.TempDir(), "ws")
	makeTree(t, ws, nodeTree)
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "c1")

	msg := fail(t, "capture", ws, "--db", store, "--thread", "main", "--id", "e1", "--include", "*.py", "--include", "docs/")
	want := `sbxdb: capture would record no file: includes "*.py", "docs/" match no file in ` + ws +
		" (4 entries excluded by policy); --allow-empty records the empty checkpoint\n"
	if msg != want {
		t.Errorf("empty include:\n got %q\nwant %q", msg, want)
	}
	if code, message := jsonFailure(t, exitError, "capture", ws, "--db", store, "--thread", "main", "--id", "e1", "--include", "*.py", "--json"); code != "SBXDB_EMPTY_CAPTURE" || message == "" {
		t.Errorf("empty include --json: %s %q", code, message)
	}
	// Nothing changed: the head is c1, e1 is no checkpoint.
	db, err := engine.Open(store, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	head, err := db.Head(context.Background(), "main")
	if err != nil || head != "c1" {
		t.Errorf("head after a refused capture: %q, %v", head, err)
	}
	if cp, err := db.Get(context.Background(), "e1"); cp != nil || err != nil {
		t.Errorf("a refused capture stored checkpoint e1: %v, %v", cp, err)
	}
	db.Close()

	js := decode[captureJSON](t, ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "e1", "--include", "*.py", "--allow-empty", "--json"))
	if js.ID != "e1" || deref(js.ParentID) != "c1" || js.Stats.Files != 0 || js.Stats.ExcludedByRule["not included"] != 1 {
		t.Errorf("--allow-empty: %+v", js)
	}

	empty := t.TempDir()
	ok(t, "capture", empty, "--db", store, "--thread", "bare", "--id", "b1")
	ok(t, "capture", empty, "--db", store, "--thread", "bare", "--id", "b2", "--allow-empty")
}

// A named pipe or a socket fails a capture, which records nothing;
// --skip-unsupported leaves each out with a warning line, and the exit
// status is 3 (with --json too, the warnings in the report).
func TestCaptureSkipUnsupported(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	ws, err := os.MkdirTemp("", "sbxws") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	makeTree(t, ws, tree{"a/file.txt": "x\n"})
	if err := mkfifo(filepath.Join(ws, "a", "fifo")); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no named pipes on this system")
	} else if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(ws, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	msg := fail(t, "capture", ws, "--db", store, "--thread", "main", "--id", "f1")
	wantMatch(t, msg, `^sbxdb: SANDBOX_SNAPSHOT_UNSUPPORTED_ENTRY: "(a/fifo" is a named pipe|sock" is a socket), not a regular file, directory or symlink; --skip-unsupported leaves such entries out\n$`)
	if out := ok(t, "threads", "--db", store); regexp.MustCompile(`(?m)^main `).MatchString(out) {
		t.Errorf("a failed capture made thread main:\n%s", out)
	}

	code, out, errOut := cli(t, "capture", ws, "--db", store, "--thread", "main", "--id", "f1", "--skip-unsupported")
	if code != exitWarnings {
		t.Errorf("--skip-unsupported: exit %d, want 3", code)
	}
	wantMatch(t, out, `^captured f1 on thread main: 1 file \(2 B\), .*, 0 deduplicated, 2 skipped as unsupported in \d+\.\d\ds\n$`)
	if want := "sbxdb: warning: \"a/fifo\" skipped: a named pipe\nsbxdb: warning: \"sock\" skipped: a socket\n"; errOut != want {
		t.Errorf("warning lines:\n got %q\nwant %q", errOut, want)
	}

	code, out, errOut = cli(t, "capture", ws, "--db", store, "--thread", "main", "--id", "f2", "--skip-unsupported", "--json")
	js := decode[captureJSON](t, out)
	if code != exitWarnings || js.Stats.Skipped != 2 || len(js.Warnings) != 2 || js.Warnings[1] != (sbxdb.CaptureWarning{Path: "sock", What: sbxdb.EntrySkipped, Detail: "a socket"}) {
		t.Errorf("--skip-unsupported --json: exit %d, %+v, stderr %q", code, js, errOut)
	}
}

// restore --path writes only the entries named, what lies beneath them
// and the directories above them; a path the checkpoint does not hold
// writes nothing, not even DIR, and leaves an empty DIR empty.
func TestRestorePaths(t *testing.T) {
	store, ws := filepath.Join(t.TempDir(), "store"), filepath.Join(t.TempDir(), "ws")
	makeTree(t, ws, nodeTree)
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "n1", "--no-default-excludes")

	dst := filepath.Join(t.TempDir(), "out")
	out := ok(t, "restore", "n1", dst, "--db", store, "--no-default-excludes", "--path", "node_modules/left-pad", "--path", "node_modules/.bin/pad", "--path", "empty")
	wantMatch(t, out, `^restored n1 into .*: 1 file \(4 B\), 1 empty dir, 1 symlink in`)
	wantTree(t, readTree(t, dst), tree{
		"node_modules": "/", "node_modules/left-pad": "/", "node_modules/.bin": "/",
		"node_modules/left-pad/idx.js": "pad\n", "node_modules/.bin/pad": "-> ../left-pad/idx.js", "empty": "/",
	})

	for _, p := range []string{"nope", "src/app.js/x", "../x", "/etc"} {
		missing := filepath.Join(t.TempDir(), "out")
		msg := fail(t, "restore", "n1", missing, "--db", store, "--no-default-excludes", "--path", "src", "--path", p)
		wantMatch(t, msg, `^sbxdb: SANDBOX_SNAPSHOT_INVALID_PATH: restore path "`+regexp.QuoteMeta(p)+`" `)
		if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("--path %s: a failed restore left %s: %v", p, missing, err)
		}
	}
	emptyDir := t.TempDir()
	fail(t, "restore", "n1", emptyDir, "--db", store, "--no-default-excludes", "--path", "nope")
	wantTree(t, readTree(t, emptyDir), tree{})
}

// The summary counts what the policy excluded and what was skipped, each
// only when there was any.
func TestSummaryLeftOut(t *testing.T) {
	for _, c := range []struct {
		st   sbxdb.CaptureStats
		want string
	}{
		{sbxdb.CaptureStats{}, ""},
		{sbxdb.CaptureStats{Excluded: 1}, ", 1 excluded by policy"},
		{sbxdb.CaptureStats{Excluded: 26, Skipped: 2}, ", 26 excluded by policy, 2 skipped as unsupported"},
		{sbxdb.CaptureStats{Skipped: 1}, ", 1 skipped as unsupported"},
	} {
		if got := leftOut(c.st); got != c.want {
			t.Errorf("leftOut(%+v) = %q, want %q", c.st, got, c.want)
		}
	}
}
