package engine_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/proc"
)

// pathsTree writes a workspace with files at several depths, an empty
// directory and a symlink, and returns it.
func pathsTree(t *testing.T, f *captureFixture) string {
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "a/b/c.txt", []byte("c"), 0o644)
	write(t, ws, "a/b/c.txt.orig", []byte("orig"), 0o644)
	write(t, ws, "a/d.txt", []byte("dd"), 0o755)
	write(t, ws, "e/f.txt", []byte("fff"), 0o644)
	write(t, ws, "top.txt", []byte("top"), 0o644)
	if err := os.MkdirAll(filepath.Join(ws, "g/h"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a/d.txt", filepath.Join(ws, "l")); err != nil {
		t.Fatal(err)
	}
	return ws
}

// only returns the nodes of tree that keep admits, with the directories
// above them.
func only(tree map[string]fstree.Node, keep ...string) map[string]fstree.Node {
	out := map[string]fstree.Node{}
	for p, n := range tree {
		for _, k := range keep {
			if p == k || strings.HasPrefix(p, k+"/") {
				out[p] = n
				for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
					out[d] = tree[d]
				}
			}
		}
	}
	return out
}

func TestRestorePaths(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := pathsTree(t, f)
	id := f.capture(t, ws).Checkpoint.ID
	tree := snapshot(t, ws)
	for _, tc := range []struct {
		name  string
		paths []string
		want  []string // the selected paths of tree
		stats sbxdb.RestoreStats
	}{
		{"a file", []string{"e/f.txt"}, []string{"e/f.txt"}, sbxdb.RestoreStats{Files: 1, Bytes: 3}},
		{"a symlink", []string{"l"}, []string{"l"}, sbxdb.RestoreStats{Symlinks: 1}},
		{"an empty directory", []string{"g/h"}, []string{"g/h"}, sbxdb.RestoreStats{Dirs: 1}},
		{"a directory implied by its files", []string{"a/b"}, []string{"a/b"}, sbxdb.RestoreStats{Files: 2, Bytes: 5}},
		{"a directory implied by a directory", []string{"g"}, []string{"g"}, sbxdb.RestoreStats{Dirs: 1}},
		{"a name that prefixes another", []string{"a/b/c.txt"}, []string{"a/b/c.txt"}, sbxdb.RestoreStats{Files: 1, Bytes: 1}},
		{"nested and duplicate paths", []string{"a", "a/b", "a/b/c.txt", "a", "top.txt"}, []string{"a", "top.txt"},
			sbxdb.RestoreStats{Files: 4, Bytes: 10}},
		{"paths cleaned", []string{"./e//f.txt", "a/b/", "g/./h//"}, []string{"e/f.txt", "a/b", "g/h"},
			sbxdb.RestoreStats{Files: 3, Bytes: 8, Dirs: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, existing := range []bool{false, true} {
				out := filepath.Join(t.TempDir(), "out")
				if existing {
					if err := os.Mkdir(out, 0o700); err != nil {
						t.Fatal(err)
					}
				}
				st, err := f.db.Restore(ctx, id, out, &sbxdb.RestoreOptions{Paths: tc.paths})
				if err != nil {
					t.Fatal(err)
				}
				if !equalStats(st, tc.stats) {
					t.Errorf("stats %+v, want %+v", st, tc.stats)
				}
				if diff := fstree.Diff(only(tree, tc.want...), snapshot(t, out)); diff != nil {
					t.Errorf("restored (into an existing directory: %v):\n%s", existing, strings.Join(diff, "\n"))
				}
			}
		})
	}
}

// A path that is malformed or names nothing in the checkpoint is
// INVALID_PATH, refused before anything is written: the target's parent
// stays empty, and an existing empty target stays as it was.
func TestRestorePathsRefused(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := pathsTree(t, f)
	id := f.capture(t, ws).Checkpoint.ID
	for _, tc := range []struct {
		path     string
		notFound bool
	}{
		{"", false},
		{"/a", false},
		{"/", false},
		{".", false},
		{"./", false},
		{"..", false},
		{"a/../a", false},
		{"a/..", false},
		{"a\\b", false},
		{"C:x", false},
		{"a\x00", false},
		{"nope", true},
		{"A", true},
		{"a/b/c", true},       // a prefix of a name, not a directory
		{"a/b/c.txt/x", true}, // beneath a file
		{"l/x", true},         // beneath a symlink
		{"g/h/i", true},       // beneath an empty directory
	} {
		for _, existing := range []bool{false, true} {
			parent := t.TempDir()
			out := filepath.Join(parent, "out")
			var before os.FileInfo
			if existing {
				if err := os.Mkdir(out, 0o711); err != nil {
					t.Fatal(err)
				}
				before, _ = os.Lstat(out)
			}
			_, err := f.db.Restore(ctx, id, out, &sbxdb.RestoreOptions{Paths: []string{"a", tc.path}})
			if !errors.Is(err, chain.ErrInvalidPath) || chain.Code(err) != chain.CodeInvalidPath {
				t.Fatalf("Restore of path %q = %v, want INVALID_PATH", tc.path, err)
			}
			if errors.Is(err, sbxdb.ErrPathNotFound) != tc.notFound {
				t.Errorf("Restore of path %q = %v: ErrPathNotFound is %v, want %v", tc.path, err, !tc.notFound, tc.notFound)
			}
			if !strings.Contains(err.Error(), strconv.Quote(tc.path)) {
				t.Errorf("error %q does not name the path %q", err, tc.path)
			}
			names, _ := os.ReadDir(parent)
			if !existing && len(names) != 0 {
				t.Errorf("a refused restore of %q left %v", tc.path, names)
			}
			if existing {
				after, _ := os.Lstat(out)
				inside, _ := os.ReadDir(out)
				if len(names) != 1 || !os.SameFile(before, after) || after.Mode() != before.Mode() || len(inside) != 0 {
					t.Errorf("a refused restore of %q changed the target: %v %v %v", tc.path, names, after.Mode(), inside)
				}
			}
		}
	}
	var pnf *sbxdb.PathNotFoundError
	_, err := f.db.Restore(ctx, id, filepath.Join(t.TempDir(), "out"), &sbxdb.RestoreOptions{Paths: []string{"x//y/"}})
	if !errors.As(err, &pnf) || pnf.Path != "x/y" || pnf.Checkpoint != id {
		t.Errorf("error %v: want a PathNotFoundError naming x/y in %s", err, id)
	}
}

// The rules of a whole restore hold for a partial one: the whole manifest
// is checked against the policy, and every blob written is verified before
// anything becomes visible.
func TestRestorePathsKeepTheRules(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	put := func(data string) string {
		key := cas.Files.Key(sha256.Sum256([]byte(data)))
		if err := f.db.Blobs().Put(ctx, key, []byte(data)); err != nil {
			t.Fatal(err)
		}
		return key
	}
	ok, gone := put("ok"), put("gone")
	appendFiles := func(id string, files ...chain.Entry) {
		head, _ := f.db.Head(ctx, "t1")
		cp := &chain.Checkpoint{ID: id, ThreadID: "t1", ParentID: head, CreatedAt: 1, Reason: chain.ReasonAutomatic, Files: files}
		if _, err := f.db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: f.w.Writer}); err != nil {
			t.Fatal(err)
		}
	}
	appendFiles("excluded", chain.Entry{Path: ".git/hooks/post-checkout", Kind: chain.KindFile, BlobKey: ok, Size: 2},
		chain.Entry{Path: "src/ok", Kind: chain.KindFile, BlobKey: ok, Size: 2})
	appendFiles("missing", chain.Entry{Path: "src/a", Kind: chain.KindFile, BlobKey: ok, Size: 2},
		chain.Entry{Path: "src/b", Kind: chain.KindFile, BlobKey: gone, Size: 4},
		chain.Entry{Path: "z", Kind: chain.KindFile, BlobKey: ok, Size: 2})
	if err := f.db.Blobs().Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id    string
		paths []string
		want  error
	}{
		{"excluded", []string{"src/ok"}, chain.ErrInvalidPath},
		{"missing", []string{"src"}, chain.ErrMissingBlob},
		{"missing", []string{"z", "src/b"}, chain.ErrMissingBlob},
	} {
		parent := t.TempDir()
		_, err := f.db.Restore(ctx, tc.id, filepath.Join(parent, "deep", "out"), &sbxdb.RestoreOptions{Paths: tc.paths})
		if !errors.Is(err, tc.want) {
			t.Fatalf("Restore %s %q = %v, want %v", tc.id, tc.paths, err, tc.want)
		}
		if names, _ := os.ReadDir(parent); len(names) != 0 {
			t.Errorf("a failed restore of %s %q left %v", tc.id, tc.paths, names)
		}
	}
	// The blob missing from what is not restored does not matter.
	out := filepath.Join(t.TempDir(), "out")
	if st, err := f.db.Restore(ctx, "missing", out, &sbxdb.RestoreOptions{Paths: []string{"src/a", "z"}}); err != nil || st.Files != 2 {
		t.Fatalf("Restore of the intact files = %+v, %v", st, err)
	}
}

// Restoring into an existing empty directory keeps the directory: the same
// inode (a mount point cannot be renamed over), its mode and owner, and
// nothing else in it once done. A failed restore leaves it as it was.
func TestRestoreIntoEmptyDirKeepsIt(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := pathsTree(t, f)
	id := f.capture(t, ws).Checkpoint.ID
	tree := snapshot(t, ws)
	uid, gid := os.Geteuid(), os.Getegid()
	owned := os.Geteuid() == 0
	if !owned {
		t.Log("not root: the target is not given to another owner (chown needs root), only its mode and inode are checked")
	} else {
		uid, gid = 1234, 1234
	}
	mk := func() (string, os.FileInfo) {
		out := filepath.Join(t.TempDir(), "home")
		if err := os.Mkdir(out, 0o711); err != nil {
			t.Fatal(err)
		}
		os.Chmod(out, 0o711)
		if owned {
			if err := os.Chown(out, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		st, err := os.Lstat(out)
		if err != nil {
			t.Fatal(err)
		}
		return out, st
	}
	same := func(what, out string, before os.FileInfo) {
		t.Helper()
		after, err := os.Lstat(out)
		if err != nil {
			t.Fatal(err)
		}
		sys := after.Sys().(*syscall.Stat_t)
		if !os.SameFile(before, after) || after.Mode() != os.ModeDir|0o711 || int(sys.Uid) != uid || int(sys.Gid) != gid {
			t.Errorf("%s: the target is %v uid %d gid %d (same directory: %v), want the same 0711 directory of %d:%d",
				what, after.Mode(), sys.Uid, sys.Gid, os.SameFile(before, after), uid, gid)
		}
	}

	out, before := mk()
	if _, err := f.db.Restore(ctx, id, out, nil); err != nil {
		t.Fatal(err)
	}
	same("restored", out, before)
	if diff := fstree.Diff(tree, snapshot(t, out)); diff != nil {
		t.Errorf("restored into an existing directory:\n%s", strings.Join(diff, "\n"))
	}

	// A failure while writing (a missing blob) leaves it empty and as it was.
	out, before = mk()
	cp, err := f.db.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(cp.Files, func(e chain.Entry) bool { return e.Path == "e/f.txt" })
	if err := f.db.Blobs().Delete(ctx, cp.Files[i].BlobKey); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Restore(ctx, id, out, nil); !errors.Is(err, chain.ErrMissingBlob) {
		t.Fatalf("Restore with a missing blob = %v", err)
	}
	same("after a failed restore", out, before)
	if names, _ := os.ReadDir(out); len(names) != 0 {
		t.Errorf("a failed restore left %v in its target", names)
	}
}

// A restore killed while staging inside an existing empty directory leaves
// its staging directory there; the next restore into it removes it (its
// process is gone) instead of finding the target not empty.
func TestRestoreIntoDirRemovesStaleStaging(t *testing.T) {
	me := proc.Self()
	if me.Start == 0 || me.Host == "" {
		t.Skip("this system does not give a process's start time or host name: no staging directory can be proven stale")
	}
	f := newCaptureFixture(t)
	ws := pathsTree(t, f)
	id := f.capture(t, ws).Checkpoint.ID
	out := filepath.Join(t.TempDir(), "out")
	gone := me
	gone.Start++ // the same pid, started at another time: a later process
	write(t, filepath.Join(out, engine.StagingName(gone)+"1"), "a/partial", []byte("half"), 0o644)
	if _, err := f.db.Restore(context.Background(), id, out, nil); err != nil {
		t.Fatal(err)
	}
	if diff := fstree.Diff(snapshot(t, ws), snapshot(t, out)); diff != nil {
		t.Errorf("restored:\n%s", strings.Join(diff, "\n"))
	}
	// One a live process owns makes the target not empty.
	out = filepath.Join(t.TempDir(), "out")
	write(t, filepath.Join(out, engine.StagingName(me)+"1"), "a/partial", []byte("half"), 0o644)
	if _, err := f.db.Restore(context.Background(), id, out, nil); !errors.Is(err, chain.ErrInvalidWorkspace) {
		t.Fatalf("Restore into a directory holding a live restore's staging directory = %v", err)
	}
}
