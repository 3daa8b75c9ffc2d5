package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
)

// --rehash reads every file although the stat cache vouches for them all,
// and the JSON stats carry the changed and vanished counts.
func TestCaptureRehashFlag(t *testing.T) {
	store, ws := captured(t, "cp1")
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{"README.md", "copy.md", "src/main.go", "bin/run.sh"} {
		if err := os.Chtimes(filepath.Join(ws, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"capture", ws, "--db", store, "--thread", "main", "--exclude", "*.log", "--exclude", "tmp/", "--json"}
	ok(t, args...)
	if s := decode[captureJSON](t, ok(t, args...)).Stats; s.FilesRead != 0 || s.Unchanged != 4 {
		t.Fatalf("unchanged capture: %+v", s)
	}
	out := ok(t, append(args, "--rehash")...)
	if s := decode[captureJSON](t, out).Stats; s.FilesRead != 4 || s.Unchanged != 0 || s.BlobsNew != 0 || s.Deduplicated != 4 {
		t.Fatalf("capture --rehash: %+v", s)
	}
	m := decode[map[string]any](t, out)
	stats, _ := m["stats"].(map[string]any)
	if stats["changed"] != 0.0 || stats["vanished"] != 0.0 {
		t.Errorf("capture --json stats lack the changed and vanished counts: %v", stats)
	}
	if _, present := m["warnings"]; present {
		t.Errorf("capture --json lists warnings without any: %v", m)
	}
}

// Each changed or vanished entry is a warning line on standard error, and
// the summary counts them; without any, the summary is as it always was.
func TestCaptureWarningLines(t *testing.T) {
	var buf bytes.Buffer
	printCaptureWarnings(&buf, []sbxdb.CaptureWarning{
		{Path: "a b/c", What: sbxdb.EntryChanged, Detail: "the file changed after the walk listed it; recorded as read"},
		{Path: "gone", What: sbxdb.EntryVanished, Detail: "the file vanished, or became a symlink, before it was read"},
	})
	want := `sbxdb: warning: "a b/c" changed: the file changed after the walk listed it; recorded as read
sbxdb: warning: "gone" vanished: the file vanished, or became a symlink, before it was read
`
	if buf.String() != want {
		t.Errorf("warning lines:\n%s\nwant\n%s", buf.String(), want)
	}
	if s := changedWhileRead(sbxdb.CaptureStats{Changed: 1, Vanished: 2}); s != ", 1 changed and 2 vanished while read" {
		t.Errorf("summary part %q", s)
	}
	if s := changedWhileRead(sbxdb.CaptureStats{}); s != "" {
		t.Errorf("summary part without changes %q", s)
	}
}
