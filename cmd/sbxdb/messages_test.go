package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// longPath is a path of about 330 runes, some of them multi-byte, under
// root.
func longPath(root string) string {
	p := root
	for i := range 12 {
		p = filepath.Join(p, "répertoire-très-long-"+string(rune('a'+i)))
	}
	return filepath.Join(p, "tail", "file.txt")
}

func TestShortenPath(t *testing.T) {
	if got := shortenPath("/short/path.txt", 200); got != "/short/path.txt" {
		t.Errorf("a short path: %q", got)
	}
	exact := strings.Repeat("x/", 100)
	if got := shortenPath(exact, 200); got != exact {
		t.Errorf("a path of exactly 200 runes: %q", got)
	}

	p := "/very/long/" + strings.Repeat("middle-part/", 30) + "tail/file.txt"
	got := shortenPath(p, 200)
	if !strings.HasPrefix(got, "/very/long/") || !strings.HasSuffix(got, "/tail/file.txt") || strings.Count(got, "…") != 1 {
		t.Errorf("shortenPath(%q) = %q", p, got)
	}
	// Cut at slashes: "…" stands for whole names.
	head, tail, _ := strings.Cut(got, "…")
	if !strings.HasSuffix(head, "/") || !strings.HasPrefix(tail, "/") || !strings.HasPrefix(p, head) || !strings.HasSuffix(p, tail) {
		t.Errorf("not cut at slashes: %q", got)
	}
	if n := utf8.RuneCountInString(got); n > 200 || n < 150 {
		t.Errorf("%d runes: %q", n, got)
	}

	for _, p := range []string{
		longPath("/tmp"),
		strings.Repeat("é", 500),                // no slash: cut between runes anyway
		"/" + strings.Repeat("日本語/", 120),       // three-byte runes
		"/a/" + strings.Repeat("🎉", 300) + "/z", // four-byte runes, one long name
	} {
		got := shortenPath(p, 200)
		if n := utf8.RuneCountInString(got); !utf8.ValidString(got) || n > 200 || n < 100 || !strings.Contains(got, "…") {
			t.Errorf("shortenPath(%.20q…) = %q: %d runes, valid UTF-8 %v", p, got, n, utf8.ValidString(got))
		}
		head, tail, _ := strings.Cut(got, "…")
		if !strings.HasPrefix(p, head) || !strings.HasSuffix(p, tail) || head == "" || tail == "" {
			t.Errorf("shortenPath(%.20q…) = %q does not keep the start and the end", p, got)
		}
	}
}

func TestShortenPaths(t *testing.T) {
	long := longPath("/work")
	msg := "open " + long + ": permission denied; see " + long + ", or /short/one"
	got := shortenPaths(msg)
	short := shortenPath(long, maxPathRunes)
	if want := "open " + short + ": permission denied; see " + short + ", or /short/one"; got != want {
		t.Errorf("shortenPaths:\n got %q\nwant %q", got, want)
	}
	// Long words without a slash are not paths.
	word := strings.Repeat("k", 300)
	if got := shortenPaths("key " + word + " is damaged"); got != "key "+word+" is damaged" {
		t.Errorf("a long word: %q", got)
	}
}

// An error naming a path longer than about 200 characters prints it
// shortened in the middle, keeping its start and its end.
func TestErrorShortensLongPaths(t *testing.T) {
	missing := longPath(t.TempDir())
	code, out, errOut := runArgs([]string{"threads", "--db", missing})
	want := "sbxdb: no sbxdb store at " + shortenPath(missing, maxPathRunes) + "\n"
	if code != exitNoStore || out != "" || errOut != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if strings.Contains(errOut, missing) || !strings.HasSuffix(errOut, "/tail/file.txt\n") {
		t.Errorf("the path is not shortened, or lost its end: %q", errOut)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("the store was made: %v", err)
	}
}

// A store path naming a regular file says so, for every command that opens
// a store, and leaves the file as it was.
func TestStorePathIsARegularFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("not a store"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	for _, args := range [][]string{
		{"threads"}, {"log", "main"}, {"show", "c1"}, {"refs"}, {"stats"}, {"check"}, {"check", "--repair"},
		{"capture", "--thread", "t", ws}, {"restore", "c1", filepath.Join(dir, "out")},
		{"gc", "--older-than", "1h"}, {"compact"}, {"migrate"}, {"unlock", "main"},
	} {
		code, out, errOut := runArgs(append(args, "--db", file))
		if want := "sbxdb: --db " + file + " is a regular file, not a store directory\n"; code != exitNoStore || out != "" || errOut != want {
			t.Errorf("sbxdb %q: exit %d, stdout %q, stderr %q; want %q", args, code, out, errOut, want)
		}
	}
	t.Setenv(dirEnv, file)
	if code, _, errOut := runArgs([]string{"threads"}); code != exitNoStore || errOut != "sbxdb: $SBXDB_DIR ("+file+") is a regular file, not a store directory\n" {
		t.Errorf("$SBXDB_DIR: exit %d, stderr %q", code, errOut)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "not a store" {
		t.Errorf("the file is now %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the directory holds %d entries", len(ents))
	}
}

// An open failure on the database file names the file once, not
// "open D/sbx.db: open D/sbx.db: …"; one that is not a missing file is not
// reported as no store.
func TestOpenErrorNotDoubled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "sbx.db")
	// A link to itself cannot be opened, even by root (unlike a file
	// without read permission).
	if err := os.Symlink("sbx.db", db); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"capture", "--thread", "t", ws}, "sbxdb: open " + db + ": too many levels of symbolic links\n"},
		{[]string{"threads"}, "sbxdb: stat " + db + ": too many levels of symbolic links\n"},
		{[]string{"gc", "--older-than", "1h"}, "sbxdb: stat " + db + ": too many levels of symbolic links\n"},
	} {
		code, out, errOut := runArgs(append(tc.args, "--db", dir))
		if code != 1 || out != "" || errOut != tc.want {
			t.Errorf("sbxdb %q: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if target, err := os.Readlink(db); err != nil || target != "sbx.db" {
		t.Errorf("the link is now %q, %v", target, err)
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	// capture's Open takes the lock file before it reads sbx.db.
	if got := slices.DeleteFunc(names, func(n string) bool { return n == "sbx.lock" }); !slices.Equal(got, []string{"sbx.db"}) {
		t.Errorf("the store directory holds %v", names)
	}
}

// Counts take the singular for one: "1 more checkpoint … is", not
// "1 more checkpoint(s) … are".
func TestLogOffChainCount(t *testing.T) {
	for _, tc := range []struct {
		head string
		want string
	}{
		{"c2", "1 more checkpoint of thread main is not on the head chain\n"},
		{"c1", "2 more checkpoints of thread main are not on the head chain\n"},
	} {
		dir := newStore(t)
		b, err := bolt.Open(filepath.Join(dir, "sbx.db"), 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Update(func(tx *bolt.Tx) error { return meta.SetHead(kv.Bolt(tx), "main", tc.head) }); err != nil {
			t.Fatal(err)
		}
		b.Close()
		out := ok(t, "log", "main", "--db", dir)
		if !strings.HasSuffix(out, tc.want) {
			t.Errorf("head %s: log ends %q, want %q", tc.head, out[strings.LastIndex(out[:len(out)-1], "\n")+1:], tc.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 checkpoints"}, {1, "1 checkpoint"}, {2, "2 checkpoints"}, {-1, "-1 checkpoints"}} {
		if got := count(tc.n, "checkpoint"); got != tc.want {
			t.Errorf("count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// gc of a store missing one referenced blob says "1 referenced blob is
// missing".
func TestGCMissingBlobCount(t *testing.T) {
	store := versions(t, 3)
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	refs, _ := db.BlobReferences(t.Context())
	db.Blobs().Delete(t.Context(), refs[0].Key)
	db.Close()
	msg := failWith(t, exitDamaged, "gc", "--db", store, "--older-than", "0")
	if want := "sweep refused: 1 referenced blob is missing (" + refs[0].Key + ")"; !strings.Contains(msg, want) {
		t.Errorf("gc: %q, want %q in it", msg, want)
	}
}

// unreadStore is a store whose captures fail as the engine's do on an
// entry they cannot open (engine.TestCaptureUnreadable asserts the engine's
// message): root reads every file, so the failure is made here.
type unreadStore struct {
	store
	msg string
}

func (s unreadStore) Capture(ctx context.Context, in client.CaptureRequest) (*sbxdb.CaptureResult, error) {
	return nil, chain.Errorf(chain.ErrInvalidWorkspace, "%s", s.msg)
}

// An entry that cannot be read names its path once, and the error says
// how --skip-unsupported leaves it out, as that of a named pipe does; a
// workspace that does not exist is named once, without the hint.
func TestCaptureUnreadableMessages(t *testing.T) {
	dir, ws := captured(t, "cp1")
	missing := filepath.Join(t.TempDir(), "nonexist")
	code, _, errOut := cli(t, "capture", missing, "--db", dir, "--thread", "main")
	if want := "sbxdb: SANDBOX_SNAPSHOT_INVALID_WORKSPACE: workspace " + missing + ": no such file or directory\n"; code != 1 || errOut != want {
		t.Errorf("capture of a missing workspace: exit %d, stderr %q; want %q", code, errOut, want)
	}
	defer func(w func(store) store) { wrapStore = w }(wrapStore)
	for _, msg := range []string{`reading "unread": permission denied`, `reading directory "locked": permission denied`} {
		wrapStore = func(s store) store { return unreadStore{s, msg} }
		code, _, errOut := cli(t, "capture", ws, "--db", dir, "--thread", "main")
		if want := "sbxdb: SANDBOX_SNAPSHOT_INVALID_WORKSPACE: " + msg + "; --skip-unsupported leaves such entries out\n"; code != 1 || errOut != want {
			t.Errorf("capture of an unreadable entry: exit %d, stderr %q; want %q", code, errOut, want)
		}
	}
}

// TestCaptureUnreadableEACCES: the same with real permissions, for a user
// they bind.
func TestCaptureUnreadableEACCES(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files without read permission")
	}
	dir, ws := captured(t, "cp1")
	if err := os.WriteFile(filepath.Join(ws, "unread"), []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, "capture", ws, "--db", dir, "--thread", "main")
	if want := "sbxdb: SANDBOX_SNAPSHOT_INVALID_WORKSPACE: reading \"unread\": permission denied; --skip-unsupported leaves such entries out\n"; code != 1 || errOut != want {
		t.Errorf("capture of an unreadable file: exit %d, stderr %q; want %q", code, errOut, want)
	}
}
