package server

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/vfs"
)

// raceFS is the operating system's FS that, once armed, runs swap before
// the first directory it is asked to make: what another request (or a
// local user) may do to the tree between the server's check of a
// directory and the engine's use of it.
type raceFS struct {
	vfs.FS
	armed atomic.Bool
	swap  func()
}

func (f *raceFS) fire() {
	if f.armed.CompareAndSwap(true, false) {
		f.swap()
	}
}

func (f *raceFS) MkdirAll(name string, perm fs.FileMode) error {
	f.fire()
	return f.FS.MkdirAll(name, perm)
}

func (f *raceFS) MkdirTemp(dir, pattern string) (string, error) {
	f.fire()
	return f.FS.MkdirTemp(dir, pattern)
}

// TestRestoreStaysBelowAllowDirsWhenTheTreeChanges: a restore over TCP is
// checked against --allow-dirs, and the path it resolved is handed to the
// engine as a string. If a directory on that path becomes a symlink after
// the check (another restore with allowEscapingSymlinks creates one, or a
// local user renames one), the restore must still write nothing outside
// the allowed prefix: the tree is opened beneath the prefix without
// following symlinks, or the request fails and changes nothing.
func TestRestoreStaysBelowAllowDirsWhenTheTreeChanges(t *testing.T) {
	root := t.TempDir()
	allowed := filepath.Join(root, "allowed")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(allowed, "a"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rfs := &raceFS{FS: vfs.OS, swap: func() {
		// allowed/a/x was a directory at the check (or made then); now it
		// is elsewhere, and in its place a symlink leads outside.
		x := filepath.Join(allowed, "a", "x")
		if _, err := os.Lstat(x); err == nil {
			if err := os.Rename(x, x+".moved"); err != nil {
				t.Error(err)
			}
		}
		if err := os.Symlink(outside, x); err != nil {
			t.Error(err)
		}
	}}
	db, err := engine.Open(filepath.Join(root, "store"), &engine.Options{NoSync: true, FS: rfs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	w := writer(t, db, "main")
	if _, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: w, Dir: tree(t, 2, 10), ID: "cp1"}); err != nil {
		t.Fatal(err)
	}

	c, _ := tcp(t, New(db, Options{AllowDirs: []string{allowed}}), "")
	rfs.armed.Store(true)
	target := filepath.Join(allowed, "a", "x", "out")
	st, err := c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: target})
	if rfs.armed.Load() {
		t.Fatal("the restore made no directory: the race was not run")
	}
	entries, rerr := os.ReadDir(outside)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(entries) != 0 {
		t.Fatalf("restore to %s (checked below %s) wrote %s outside it: %d entries (restore %+v, %v)",
			target, allowed, outside, len(entries), st, err)
	}
}

// TestRestoreIntoADirectoryNamedByBytes: a directory's name on Linux is
// bytes, not necessarily UTF-8. Through a server, a restore (and a
// capture) must touch the directory the caller named, as the embedded
// store does, or refuse it; never another one whose name has U+FFFD in
// place of the bytes.
func TestRestoreIntoADirectoryNamedByBytes(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	w := writer(t, db, "main")
	if _, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: w, Dir: tree(t, 2, 10), ID: "cp1"}); err != nil {
		t.Fatal(err)
	}
	u := serveUnix(t, New(db, Options{}))
	base := t.TempDir()
	named := filepath.Join(base, "out\xff")
	_, err := u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: named})
	entries, rerr := os.ReadDir(base)
	if rerr != nil {
		t.Fatal(rerr)
	}
	for _, e := range entries {
		if e.Name() != "out\xff" {
			t.Errorf("restore to %q (err %v) made %q instead", named, err, e.Name())
		}
	}
	if err == nil && len(entries) != 1 {
		t.Errorf("restore to %q succeeded but made nothing there", named)
	}
}
