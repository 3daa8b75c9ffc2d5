package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The quickstart's report counts in the singular for one: a first run on
// a workspace of one file says "1 file", "1 new blob", "1 checkpoint".
func TestRunReportsCounts(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "store")
	out := filepath.Join(t.TempDir(), "restored")
	var buf bytes.Buffer
	if err := run(t.Context(), &buf, dir, "qs", ws, out); err != nil {
		t.Fatal(err)
	}
	want := `^captured \S+: 1 file \(0\.0 MB\), 0 empty dirs, 0 symlinks; 0 unchanged, 1 read, 1 new blob \(0\.0 MB stored\)
restored into ` + regexp.QuoteMeta(out) + `: 1 file \(0\.0 MB\), byte-exact
thread qs: 1 checkpoint in ` + regexp.QuoteMeta(dir) + "\n$"
	if !regexp.MustCompile(want).MatchString(buf.String()) {
		t.Errorf("first run:\n%s\nwant a match of\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := run(t.Context(), &buf, dir, "qs", ws, ""); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^thread qs: 2 checkpoints in `).MatchString(buf.String()) {
		t.Errorf("second run:\n%s", buf.String())
	}
}
