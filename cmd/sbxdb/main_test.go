package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// t0 is the fixture's clock: leases taken at t0 have long expired.
var t0 = time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)

func ms(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

func key(prefix, content string) string {
	h := sha256.Sum256([]byte(content))
	return prefix + hex.EncodeToString(h[:])
}

var (
	readme = chain.Entry{Path: "README.md", Kind: chain.KindFile, Size: 6, BlobKey: key(chain.FilePrefix, "hello\n")}
	script = chain.Entry{Path: "bin/run.sh", Kind: chain.KindFile, Size: 10, BlobKey: key(chain.FilePrefix, "#!/bin/sh\n"), Executable: true}
	report = chain.Artifact{ArtifactID: "art-1", Name: "report.md", MimeType: "text/markdown", Size: 42,
		BlobKey: key(chain.ArtifactPrefix, "report"), CreatedAt: ms(2 * time.Second)}
	msgs = []json.RawMessage{
		json.RawMessage(`{"role":"user","content":"build it"}`),
		json.RawMessage(`{"role":"assistant","content":"done"}`),
		json.RawMessage(`{"role":"user","content":"ship it"}`),
	}
)

// fixture is the store the tests read:
//
//	main    c1 ← c2 ← c3 (head; label, symlink, dir, artifact); lease released
//	pruned  p2 ← p3 (head); retention deleted p1, which p2 still names; lease expired
//	loop    l1 ← l2 ← l1: l1 was deleted and its id reused on top of l2; lease expired
//	live    no checkpoints; a live lease
var fixture = []*chain.Checkpoint{
	{ID: "c1", ThreadID: "main", CreatedAt: ms(0), Reason: chain.ReasonAutomatic, SourceRunID: "run-1",
		Files: []chain.Entry{readme}, Conversation: msgs[:1]},
	{ID: "c2", ThreadID: "main", ParentID: "c1", CreatedAt: ms(time.Second), Reason: chain.ReasonAutomatic, SourceRunID: "run-2",
		Files: []chain.Entry{readme, script}, Conversation: msgs[:2]},
	{ID: "c3", ThreadID: "main", ParentID: "c2", CreatedAt: ms(2 * time.Second), Reason: chain.ReasonNamed, Label: "release 1", SourceRunID: "run-3",
		Files:        []chain.Entry{readme, script, {Path: "docs", Kind: chain.KindDir}, {Path: "latest", Kind: chain.KindSymlink, Target: "bin/run.sh"}},
		Conversation: msgs, Artifacts: []chain.Artifact{report}},
}

// newStore builds the fixture in a new directory and returns it, closed.
func newStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	newStoreAt(t, dir)
	return dir
}

// newStoreAt builds the fixture in dir, which must not hold a store, and
// leaves it closed.
func newStoreAt(t *testing.T, dir string) {
	t.Helper()
	clock := t0
	db, err := engine.Open(dir, &engine.Options{Now: func() time.Time { return clock }, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	appendAll := func(w chain.Writer, cps ...*chain.Checkpoint) {
		t.Helper()
		for _, cp := range cps {
			_, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: cp.ParentID, Writer: w})
			must(err)
		}
	}
	cp := func(id, thread, parent string, at time.Duration) *chain.Checkpoint {
		return &chain.Checkpoint{ID: id, ThreadID: thread, ParentID: parent, CreatedAt: ms(at), Reason: chain.ReasonAutomatic}
	}

	w, err := db.AcquireWriter(ctx, "main")
	must(err)
	appendAll(w.Writer, fixture...)
	must(w.Release(ctx))

	w, err = db.AcquireWriter(ctx, "pruned")
	must(err)
	appendAll(w.Writer, cp("p1", "pruned", "", 10*time.Second), cp("p2", "pruned", "p1", 11*time.Second), cp("p3", "pruned", "p2", 12*time.Second))
	_, err = db.DeleteCheckpoints(ctx, "pruned", 2, w.Writer)
	must(err)

	w, err = db.AcquireWriter(ctx, "loop")
	must(err)
	appendAll(w.Writer, cp("l1", "loop", "", 20*time.Second), cp("l2", "loop", "l1", 21*time.Second))
	_, err = db.DeleteCheckpoints(ctx, "loop", 1, w.Writer)
	must(err)
	appendAll(w.Writer, cp("l1", "loop", "l2", 22*time.Second))

	clock = time.Now()
	_, err = db.AcquireWriter(ctx, "live")
	must(err)
}

// cli runs the command line and returns its exit status and outputs. It
// runs it through a server too, on a copy of the store (twin), and fails
// t when the two runs differ.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	tw := newTwin(t, args)
	if tw != nil {
		defer tw.stop(t)
		tw.run(t)
	}
	code, stdout, stderr = runArgs(args)
	if tw != nil {
		tw.compare(t, code, stdout, stderr)
	}
	return code, stdout, stderr
}

// runArgs runs a command line in this process, and returns its exit status
// and outputs.
func runArgs(args []string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// ok runs a command line that must succeed, and returns its output.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, args...)
	if code != 0 || errOut != "" {
		t.Fatalf("sbxdb %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
	}
	return out
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON %q: %v", s, err)
	}
	return v
}

// rows splits table output into lines of fields, header first.
func rows(out string) [][]string {
	var rs [][]string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rs = append(rs, strings.Fields(line))
	}
	return rs
}

func wantFields(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("line %q, want %q", got, want)
	}
}

func TestThreads(t *testing.T) {
	dir := newStore(t)
	out := ok(t, "threads", "--db", dir)
	rs := rows(out)
	if len(rs) != 5 {
		t.Fatalf("want header and 4 threads:\n%s", out)
	}
	wantFields(t, rs[0], "THREAD", "HEAD", "CHECKPOINTS", "LATEST", "WRITER")
	if live := rs[1]; len(live) != 7 || strings.Join(live[:6], " ") != "live - 0 - live until" {
		t.Errorf("live thread: %q", live)
	} else if exp, err := time.Parse(time.RFC3339, live[6]); err != nil || time.Until(exp) < time.Minute {
		t.Errorf("live lease expiry %q: %v", live[6], err)
	}
	wantFields(t, rs[2], "loop", "l1", "2", "2023-11-14T22:13:42Z", "expired")
	wantFields(t, rs[3], "main", "c3", "3", "2023-11-14T22:13:22Z", "none")
	wantFields(t, rs[4], "pruned", "p3", "2", "2023-11-14T22:13:32Z", "expired")

	type writer struct {
		State     string `json:"state"`
		Fence     uint64 `json:"fence"`
		ExpiresAt int64  `json:"expiresAt"`
	}
	js := decode[[]struct {
		ThreadID        string  `json:"threadId"`
		HeadID          *string `json:"headId"`
		Checkpoints     int     `json:"checkpoints"`
		LatestCreatedAt *int64  `json:"latestCreatedAt"`
		Writer          writer  `json:"writer"`
	}](t, ok(t, "threads", "--db", dir, "--json"))
	if len(js) != 4 {
		t.Fatalf("want 4 threads, got %+v", js)
	}
	if l := js[0]; l.ThreadID != "live" || l.HeadID != nil || l.Checkpoints != 0 || l.LatestCreatedAt != nil ||
		l.Writer.State != "live" || l.Writer.Fence != 1 || l.Writer.ExpiresAt <= time.Now().UnixMilli() {
		t.Errorf("live: %+v", l)
	}
	if m := js[2]; m.ThreadID != "main" || *m.HeadID != "c3" || m.Checkpoints != 3 || *m.LatestCreatedAt != ms(2*time.Second) ||
		m.Writer != (writer{State: "none"}) {
		t.Errorf("main: %+v", m)
	}
	if p := js[3]; p.Writer != (writer{State: "expired", Fence: 1, ExpiresAt: ms(sbxdb.DefaultLeaseDuration)}) {
		t.Errorf("pruned writer: %+v", p.Writer)
	}
}

func TestLog(t *testing.T) {
	dir := newStore(t)
	out := ok(t, "log", "main", "--db", dir)
	if list := ok(t, "list", "main", "--db", dir); list != out {
		t.Errorf("list (log's alias) printed\n%s\nlog printed\n%s", list, out)
	}
	rs := rows(out)
	if len(rs) != 4 {
		t.Fatalf("want header and 3 checkpoints:\n%s", out)
	}
	// FILES counts regular files as capture and restore do (c3: two files,
	// a directory and a symlink); ENTRIES counts the manifest.
	wantFields(t, rs[0], "ID", "CREATED", "REASON", "LABEL", "SOURCE", "RUN", "FILES", "ENTRIES", "ARTIFACTS")
	wantFields(t, rs[1], "c3", "(head)", "2023-11-14T22:13:22Z", "named", "release", "1", "run-3", "2", "4", "1")
	wantFields(t, rs[2], "c2", "2023-11-14T22:13:21Z", "automatic", "-", "run-2", "2", "2", "0")
	wantFields(t, rs[3], "c1", "2023-11-14T22:13:20Z", "automatic", "-", "run-1", "1", "1", "0")

	js := decode[[]struct {
		ID          string  `json:"id"`
		ParentID    *string `json:"parentCheckpointId"`
		CreatedAt   int64   `json:"createdAt"`
		Reason      string  `json:"reason"`
		Label       string  `json:"label"`
		SourceRunID string  `json:"sourceRunId"`
		Files       int     `json:"files"`
		Entries     int     `json:"entries"`
		Artifacts   int     `json:"artifacts"`
		Head        bool    `json:"head"`
	}](t, ok(t, "log", "--json", "--db", dir, "main"))
	if len(js) != 3 {
		t.Fatalf("want 3 rows, got %+v", js)
	}
	if h := js[0]; h.ID != "c3" || *h.ParentID != "c2" || h.CreatedAt != ms(2*time.Second) || h.Reason != "named" ||
		h.Label != "release 1" || h.SourceRunID != "run-3" || h.Files != 2 || h.Entries != 4 || h.Artifacts != 1 || !h.Head {
		t.Errorf("head row: %+v", h)
	}
	if r := js[2]; r.ID != "c1" || r.ParentID != nil || r.Head {
		t.Errorf("root row: %+v", r)
	}

	out = ok(t, "log", "pruned", "--db", dir)
	if rs := rows(out); len(rs) != 4 || rs[1][0] != "p3" || rs[2][0] != "p2" || !strings.HasSuffix(out, "\nparent p1 missing (pruned)\n") {
		t.Errorf("pruned log:\n%s", out)
	}
	out = ok(t, "log", "loop", "--db", dir)
	if rs := rows(out); len(rs) != 4 || rs[1][0] != "l1" || rs[2][0] != "l2" || !strings.HasSuffix(out, "\ncheckpoint l1 repeats: the chain loops\n") {
		t.Errorf("loop log:\n%s", out)
	}
}

func TestShow(t *testing.T) {
	dir := newStore(t)
	out := ok(t, "show", "c3", "--db", dir)
	want := `checkpoint  c3
thread      main
parent      c2
created     2023-11-14T22:13:22Z
reason      named
label       release 1
source run  run-3

entries: 4 (2 files, 1 empty dir, 1 symlink)
KIND     SIZE  X  PATH        BLOB/TARGET
file     6        README.md   ` + readme.BlobKey[len(chain.FilePrefix):][:12] + `
file     10    x  bin/run.sh  ` + script.BlobKey[len(chain.FilePrefix):][:12] + `
dir      -        docs        -
symlink  -        latest      -> bin/run.sh

artifacts: 1
ID     NAME       MIME TYPE      SIZE  CREATED               BLOB
art-1  report.md  text/markdown  42    2023-11-14T22:13:22Z  ` + report.BlobKey[len(chain.ArtifactPrefix):][:12] + `

conversation: 3 messages, ` + fmt.Sprint(len(msgs[0])+len(msgs[1])+len(msgs[2])) + ` bytes
`
	if out != want {
		t.Errorf("show c3:\n%s\nwant:\n%s", out, want)
	}

	out = ok(t, "show", "--db", dir, "c1")
	for _, s := range []string{"parent      (root)\n", "label       -\n", "artifacts: 0\n", fmt.Sprintf("conversation: 1 message, %d bytes\n", len(msgs[0]))} {
		if !strings.Contains(out, s) {
			t.Errorf("show c1 lacks %q:\n%s", s, out)
		}
	}

	// --json prints the checkpoint's own wire JSON.
	for _, cp := range fixture {
		out := ok(t, "show", cp.ID, "--json", "--db="+dir)
		wire, err := json.Marshal(cp)
		if err != nil {
			t.Fatal(err)
		}
		if out != string(wire)+"\n" {
			t.Errorf("show %s --json:\n%s\nwant:\n%s", cp.ID, out, wire)
		}
		got, err := chain.ParseCheckpoint([]byte(out))
		if err != nil || got.ID != cp.ID || got.ParentID != cp.ParentID || len(got.Files) != len(cp.Files) {
			t.Errorf("show %s --json does not parse back: %+v, %v", cp.ID, got, err)
		}
	}
	m := decode[map[string]any](t, ok(t, "show", "c1", "--json", "--db", dir))
	if p, present := m["parentCheckpointId"]; !present || p != nil || m["createdAt"] != float64(ms(0)) {
		t.Errorf("root wire shape: %v", m)
	}
}

func TestRefs(t *testing.T) {
	dir := newStore(t)
	out := ok(t, "refs", "--db", dir)
	rs := rows(out)
	if len(rs) != 5 {
		t.Fatalf("want header, 3 keys and a total:\n%s", out)
	}
	wantFields(t, rs[0], "BLOB", "KEY", "REFS")
	wantFields(t, rs[1], report.BlobKey, "1")
	// Sorted by key: the two file keys in hash order.
	fileRefs := map[string]int64{readme.BlobKey: 3, script.BlobKey: 2}
	for _, r := range rs[2:4] {
		if len(r) != 2 || fmt.Sprint(fileRefs[r[0]]) != r[1] {
			t.Errorf("file ref line %q", r)
		}
	}
	wantFields(t, rs[4], "total:", "3", "keys", "6")

	js := decode[[]struct {
		Key        string `json:"key"`
		References int64  `json:"references"`
	}](t, ok(t, "refs", "--json", "--db", dir))
	if len(js) != 3 || js[0].Key != report.BlobKey || js[0].References != 1 || js[1].Key > js[2].Key {
		t.Errorf("refs --json: %+v", js)
	}
	for _, r := range js[1:] {
		if fileRefs[r.Key] != r.References {
			t.Errorf("ref %+v", r)
		}
	}
}

func TestDefaultDir(t *testing.T) {
	dir := newStore(t)
	t.Setenv(dirEnv, dir)
	if out := ok(t, "refs"); !strings.Contains(out, "total: 3 keys") {
		t.Errorf("refs with $%s:\n%s", dirEnv, out)
	}
	t.Setenv(dirEnv, "")
	t.Chdir(t.TempDir())
	if code, _, errOut := cli(t, "refs"); code != exitNoStore || errOut != "sbxdb: no sbxdb store at .sbxdb\n" {
		t.Errorf("refs without a store: exit %d, %q", code, errOut)
	}
}

// singleDash is a long flag written with one dash, as Go's flag package
// prints them: sbxdb's help writes two.
var singleDash = regexp.MustCompile(`(^|[\s\[(,])-[a-z][a-z]`)

func TestHelp(t *testing.T) {
	list := ok(t, "help")
	if m := singleDash.FindString(list); m != "" {
		t.Errorf("help writes a long flag with one dash: %q", m)
	}
	for _, c := range commands {
		if !strings.Contains(list, c.summary) {
			t.Errorf("help lacks %s: %q", c.name, c.summary)
		}
		out := ok(t, c.name, "-h")
		if m := singleDash.FindString(out); m != "" {
			t.Errorf("%s -h writes a long flag with one dash: %q", c.name, m)
		}
		want := []string{"usage: " + c.usage() + "\n", c.summary, c.detail}
		if !c.noStore {
			want = append(want, "--db DIR")
		}
		if !c.serves {
			want = append(want, "--json")
		} else if strings.Contains(out, "--json") {
			t.Errorf("%s -h offers --json:\n%s", c.name, out)
		}
		for _, s := range want {
			if !strings.Contains(out, s) {
				t.Errorf("%s -h lacks %q:\n%s", c.name, s, out)
			}
		}
		if ok(t, c.name, "--help") != out || ok(t, "help", c.name) != out {
			t.Errorf("%s: --help and help %s differ from -h", c.name, c.name)
		}
	}
	if ok(t, "--help") != list {
		t.Error("--help differs from help")
	}
	for _, s := range []string{"--server ADDR", "$SBXDB_SERVER", "$SBXDB_TOKEN", "DIR/sbxdb.sock"} {
		if !strings.Contains(list, s) {
			t.Errorf("help lacks %q", s)
		}
	}
	for _, c := range commands {
		out := ok(t, c.name, "-h")
		if c.noStore {
			continue
		}
		if !strings.Contains(out, "sbxdb serve") || strings.Contains(out, "--server ADDR") == c.serves {
			t.Errorf("%s -h: the server and --server:\n%s", c.name, out)
		}
	}
	// The exit statuses are in sbxdb help, and help help is help's help.
	for _, s := range []string{"exit status:\n", "\n  130  interrupted", `{"error":{"code":CODE,"message":MESSAGE}}`} {
		if !strings.Contains(list, s) {
			t.Errorf("help lacks %q", s)
		}
	}
	if out := ok(t, "help", "help"); !strings.HasPrefix(out, "usage: sbxdb help [COMMAND]\n") {
		t.Errorf("help help:\n%s", out)
	}
	if code, out, errOut := cli(t); code != 2 || out != "" || errOut != list {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestFailures(t *testing.T) {
	dir := newStore(t)
	missing := filepath.Join(t.TempDir(), "nothing")
	empty := t.TempDir() // an empty sbx.db is no store either
	notDir := filepath.Join(empty, engine.DBFile)
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string // stderr, or its first line for usage errors
	}{
		{[]string{"frob"}, 2, `sbxdb: unknown command "frob"`},
		{[]string{"help", "frob"}, 2, `sbxdb help: unknown command "frob"`},
		{[]string{"help", "show", "frob"}, 2, `sbxdb help: unknown command "show frob"`},
		{[]string{"thread"}, 2, `sbxdb: unknown command "thread"; did you mean threads?`},
		{[]string{"shwo"}, 2, `sbxdb: unknown command "shwo"; did you mean show?`},
		{[]string{"show", "--db", dir}, 2, "sbxdb show: missing CHECKPOINT"},
		{[]string{"log"}, 2, "sbxdb log: missing THREAD"},
		{[]string{"refs", "extra"}, 2, `sbxdb refs: unexpected argument "extra"`},
		{[]string{"threads", "--verbose"}, 2, "sbxdb threads: unknown flag: --verbose"},
		{[]string{"threads", "-db", dir}, 2, "sbxdb threads: unknown flag -db: long flags take two dashes, --db"},
		{[]string{"log", "main", "--thred", "x"}, 2, "sbxdb log: unknown flag: --thred"},
		{[]string{"restore", "c1", "out", "--thred", "x"}, 2, "sbxdb restore: unknown flag: --thred; did you mean --thread?"},
		{[]string{"--db"}, 2, "sbxdb: flag needs an argument: --db"},
		{[]string{"show", "nope", "--db", dir}, 1, "sbxdb: SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND: no checkpoint id is or starts with \"nope\"\n"},
		{[]string{"log", "nope", "--db", dir}, 1, "sbxdb: thread nope not found\n"},
		{[]string{"threads", "--db", missing}, exitNoStore, "sbxdb: no sbxdb store at " + missing + "\n"},
		{[]string{"show", "c1", "--db", missing}, exitNoStore, "sbxdb: no sbxdb store at " + missing + "\n"},
		{[]string{"refs", "--db", empty}, exitNoStore, "sbxdb: no sbxdb store at " + empty + "\n"},
		{[]string{"refs", "--db", notDir}, exitNoStore, "sbxdb: --db " + notDir + " is a regular file, not a store directory\n"},
	} {
		code, out, errOut := cli(t, tc.args...)
		if tc.code == 2 {
			first, rest, _ := strings.Cut(errOut, "\n")
			if first != tc.err || !strings.HasPrefix(rest, "usage: sbxdb ") || strings.Count(rest, "\n") != 1 {
				t.Errorf("sbxdb %q: stderr %q, want %q and a usage line", tc.args, errOut, tc.err)
			}
		} else if errOut != tc.err {
			t.Errorf("sbxdb %q: stderr %q, want %q", tc.args, errOut, tc.err)
		}
		if code != tc.code || out != "" {
			t.Errorf("sbxdb %q: exit %d, stdout %q; want exit %d", tc.args, code, out, tc.code)
		}
	}
}

func TestBusy(t *testing.T) {
	localOnly(t) // a store this process holds; a server holding it is no busy store
	dir := newStore(t)
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	defer func(d time.Duration) { lockTimeout = d }(lockTimeout)
	lockTimeout = 100 * time.Millisecond

	code, out, errOut := cli(t, "threads", "--db", dir)
	if want := "sbxdb: store " + dir + " is busy: held by another process (pid "; code != exitBusy || out != "" ||
		!strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 {
		t.Errorf("busy store: exit %d, stdout %q, stderr %q; want exit 11 and %q…", code, out, errOut, want)
	}
}

// TestMessagePrefixes: message removes the engine's nested "sbxdb: "
// prefixes and leaves the same letters alone elsewhere, as in a database
// URL whose path is the database's name.
func TestMessagePrefixes(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"sbxdb: store must be reopened: sbxdb: an earlier sync failed", "store must be reopened: an earlier sync failed"},
		{"sbxdb: sbxdb: twice", "twice"},
		{"open postgres://db:55432/sbxdb: sbxdb: the metadata indexes blobs stored elsewhere",
			"open postgres://db:55432/sbxdb: the metadata indexes blobs stored elsewhere"},
		{"thread sbxdb: x\nline two", "thread sbxdb: x line two"},
	} {
		if got := message(errors.New(c.in)); got != c.want {
			t.Errorf("message(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
