//go:build linux

package server

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"golang.org/x/sys/unix"
)

// flagTree writes a workspace with a node_modules, a .env, two files, and
// a named pipe.
func flagTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	for p, b := range map[string]string{"node_modules/m/index.js": "x", ".env": "S=1", "a.txt": "a", "src/b.go": "b"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCaptureSkipUnsupported: through the server, a named pipe fails the
// capture in words and changes nothing; skipUnsupported leaves it out with
// a skipped warning, and the stats count it and what the policy excluded.
func TestCaptureSkipUnsupported(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	dir := flagTree(t)
	u := serveUnix(t, New(db, Options{}))
	ctx := context.Background()

	_, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir})
	wantCode(t, "capture of a named pipe", err, chain.CodeUnsupportedEntry, chain.ErrUnsupportedEntry)
	if !strings.Contains(err.Error(), `"pipe" is a named pipe`) {
		t.Errorf("error %q does not call the FIFO a named pipe", err)
	}
	if h := head(t, db, "main"); h != "" {
		t.Fatalf("a refused capture made %q the head", h)
	}
	res, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir, SkipUnsupported: true, Progress: func(sbxdb.Progress) {}})
	if err != nil {
		t.Fatal(err)
	}
	want := []sbxdb.CaptureWarning{{Path: "pipe", What: sbxdb.EntrySkipped, Detail: "a named pipe"}}
	if !slices.Equal(res.Warnings, want) || res.Stats.Skipped != 1 || res.Stats.Files != 2 || res.Stats.Excluded != 2 ||
		!maps.Equal(res.Stats.ExcludedByRule, map[string]int{"node_modules": 1, ".env*": 1}) {
		t.Errorf("warnings %v, stats %+v", res.Warnings, res.Stats)
	}

	// The raw result carries the counters under their wire names.
	r := do(t, u.http, "POST", "http://sbxdb/v1/capture", `{"writer": `+mustJSON(t, w)+`, "dir": "`+dir+`", "skipUnsupported": true, "excludes": ["*.txt"]}`)
	var raw struct {
		Stats    map[string]json.RawMessage
		Warnings []map[string]string
	}
	if err := json.Unmarshal(r.body, &raw); err != nil || r.status != 200 {
		t.Fatalf("%d %s (%v)", r.status, r.body, err)
	}
	if string(raw.Stats["excluded"]) != "3" || string(raw.Stats["skipped"]) != "1" ||
		string(raw.Stats["excludedByRule"]) != `{"--exclude *.txt":1,".env*":1,"node_modules":1}` ||
		len(raw.Warnings) != 1 || raw.Warnings[0]["what"] != "skipped" {
		t.Errorf("raw result %s", r.body)
	}
}

// TestCaptureWarningNotUTF8: a warning about an entry whose name is not
// UTF-8 names it through the server byte for byte, as the engine does on
// the files (a JSON string would carry U+FFFD instead).
func TestCaptureWarningNotUTF8(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	dir := filepath.Join(t.TempDir(), "ws")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ok.txt", "bad\xffname"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u := serveUnix(t, New(db, Options{}))
	res, err := u.c.Capture(context.Background(), client.CaptureRequest{Writer: w, Dir: dir, SkipUnsupported: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || res.Warnings[0].Path != "bad\xffname" || res.Warnings[0].What != sbxdb.EntrySkipped {
		t.Fatalf("warnings %q, want one skipped warning naming %q", res.Warnings, "bad\xffname")
	}
}

// TestCaptureNoDefaultExcludes: noDefaultExcludes records node_modules,
// and a restore must say it too.
func TestCaptureNoDefaultExcludes(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	dir := flagTree(t)
	os.Remove(filepath.Join(dir, "pipe"))
	u := serveUnix(t, New(db, Options{}))
	ctx := context.Background()

	res, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir, ID: "nm", NoDefaultExcludes: true, Includes: []string{"node_modules/**"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.Files != 1 || res.Checkpoint.Files[0].Path != "node_modules/m/index.js" ||
		!maps.Equal(res.Stats.ExcludedByRule, map[string]int{"not included": 3}) {
		t.Fatalf("captured %v, stats %+v", res.Checkpoint.Files, res.Stats)
	}
	out := filepath.Join(t.TempDir(), "out")
	_, err = u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "nm", Dir: out, Includes: []string{"node_modules/**"}})
	wantCode(t, "restore under the default exclusions", err, chain.CodeInvalidPath, chain.ErrInvalidPath)
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore made %s (%v)", out, err)
	}
	st, err := u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "nm", Dir: out, Includes: []string{"node_modules/**"}, NoDefaultExcludes: true})
	if err != nil || st.Files != 1 {
		t.Fatalf("restore with noDefaultExcludes: %+v, %v", st, err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "node_modules/m/index.js")); err != nil || string(b) != "x" {
		t.Errorf("restored %q, %v", b, err)
	}
}

// TestCaptureRequireFiles: requireFiles refuses a capture that would record
// no file with SBXDB_EMPTY_CAPTURE (400, or the stream's error line), and
// appends nothing.
func TestCaptureRequireFiles(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	dir := flagTree(t)
	u := serveUnix(t, New(db, Options{}))
	ctx := context.Background()

	for _, progress := range []func(sbxdb.Progress){nil, func(sbxdb.Progress) {}} {
		_, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir, Includes: []string{"*.rs"}, RequireFiles: true, Progress: progress})
		wantCode(t, "capture matching nothing", err, CodeEmptyCapture, sbxdb.ErrEmptyCapture)
		ce, _ := errors.AsType[*client.Error](err)
		if (progress == nil && ce.Status != 400) || !strings.Contains(ce.Message, `includes "*.rs" match no file`) {
			t.Errorf("error %+v", ce)
		}
		if h := head(t, db, "main"); h != "" {
			t.Fatalf("a refused capture made %q the head", h)
		}
	}
	res, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir, Includes: []string{"*.go"}, RequireFiles: true})
	if err != nil || res.Stats.Files != 1 {
		t.Fatalf("capture matching a file: %+v, %v", res, err)
	}
}

// TestCaptureFlagTypes: a flag that is not a boolean is a bad request
// that changes nothing.
func TestCaptureFlagTypes(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	dir := flagTree(t)
	u := serveUnix(t, New(db, Options{}))
	for _, member := range []string{`"noDefaultExcludes": "yes"`, `"skipUnsupported": 1`, `"requireFiles": []`} {
		body := `{"writer": ` + mustJSON(t, w) + `, "dir": "` + dir + `", ` + member + `}`
		if r := do(t, u.http, "POST", "http://sbxdb/v1/capture", body); r.status != 400 || r.code(t) != CodeBadRequest {
			t.Errorf("capture with %s: %d %s", member, r.status, r.body)
		}
		if h := head(t, db, "main"); h != "" {
			t.Fatalf("a refused capture made %q the head", h)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	if r := do(t, u.http, "POST", "http://sbxdb/v1/restore", `{"checkpointId": "x", "dir": "`+out+`", "noDefaultExcludes": "yes"}`); r.status != 400 || r.code(t) != CodeBadRequest {
		t.Errorf("restore with a string flag: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore made %s (%v)", out, err)
	}
}
