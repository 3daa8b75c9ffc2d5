package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/workspace"
)

// The workspace's .sbxdbignore leaves out what it names, counted under its
// own rule; the checkpoint restores under the default policy.
func TestCaptureIgnoreFile(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, ".sbxdbignore", []byte("*.log\n!keep.log\ncache/\n"), 0o644)
	write(t, ws, "a.log", []byte("a"), 0o644)
	write(t, ws, "keep.log", []byte("k"), 0o644)
	write(t, ws, "cache/x", []byte("x"), 0o644)
	write(t, ws, "main.go", []byte("package main"), 0o644)
	res := f.capture(t, ws)
	for _, p := range []string{"a.log", "cache", "cache/x"} {
		if hasEntry(res.Checkpoint, p, chain.KindFile) || hasEntry(res.Checkpoint, p, chain.KindDir) {
			t.Errorf("%s recorded", p)
		}
	}
	for _, p := range []string{"keep.log", "main.go", ".sbxdbignore"} {
		if !hasEntry(res.Checkpoint, p, chain.KindFile) {
			t.Errorf("%s not recorded", p)
		}
	}
	if n := res.Stats.ExcludedByRule[workspace.RuleIgnoreFile]; n != 2 {
		t.Errorf("excluded by %s: %d, want 2 (%v)", workspace.RuleIgnoreFile, n, res.Stats.ExcludedByRule)
	}
	if _, err := f.db.Restore(ctx, res.Checkpoint.ID, filepath.Join(f.dir, "out"), nil); err != nil {
		t.Fatal(err)
	}
}

// A .sbxdbignore that is a symlink is not read: it could only lead out of
// the workspace.
func TestCaptureIgnoreFileSymlink(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, f.dir, "outside-ignore", []byte("*.go\n"), 0o644)
	write(t, ws, "main.go", []byte("package main"), 0o644)
	if err := os.Symlink(filepath.Join(f.dir, "outside-ignore"), filepath.Join(ws, ".sbxdbignore")); err != nil {
		t.Fatal(err)
	}
	res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, AllowEscapingSymlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	if !hasEntry(res.Checkpoint, "main.go", chain.KindFile) || res.Stats.ExcludedByRule[workspace.RuleIgnoreFile] != 0 {
		t.Errorf("the symlinked ignore file was read: %+v", res.Stats)
	}
}
