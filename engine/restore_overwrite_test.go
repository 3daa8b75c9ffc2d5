package engine_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
)

// overwriteTarget writes a target that differs from pathsTree's workspace
// in every way --overwrite handles: a file with other bytes, one with
// another mode, an identical one, a symlink where a directory belongs
// (pointing out of the target), an extra file and directory, and a .git
// directory the default policy protects.
func overwriteTarget(t *testing.T, f *captureFixture, ws string) (target, outside string) {
	target = filepath.Join(f.dir, "target")
	outside = filepath.Join(f.dir, "outside")
	write(t, outside, "keep.txt", []byte("outside"), 0o644)
	write(t, target, "a/b/c.txt", []byte("changed"), 0o644)                 // other bytes
	write(t, target, "a/d.txt", []byte("dd"), 0o644)                        // other mode (0755 recorded)
	write(t, target, "top.txt", []byte("top"), 0o644)                       // identical
	write(t, target, "extra.txt", []byte("extra"), 0o644)                   // not in the checkpoint
	write(t, target, "x/y.txt", []byte("y"), 0o644)                         // not in the checkpoint
	write(t, target, ".git/HEAD", []byte("ref"), 0o644)                     // excluded: kept
	if err := os.Symlink(outside, filepath.Join(target, "e")); err != nil { // e/f.txt must not go through it
		t.Fatal(err)
	}
	return target, outside
}

func TestRestoreOverwrite(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := pathsTree(t, f)
	id := f.capture(t, ws).Checkpoint.ID
	want := snapshot(t, ws)
	for _, del := range []bool{false, true} {
		t.Run(map[bool]string{false: "overwrite", true: "delete"}[del], func(t *testing.T) {
			f.dir = t.TempDir()
			target, outside := overwriteTarget(t, f, ws)
			topBefore, _ := os.Stat(filepath.Join(target, "top.txt"))
			st, err := f.db.Restore(ctx, id, target, &sbxdb.RestoreOptions{Overwrite: true, Delete: del})
			if err != nil {
				t.Fatal(err)
			}
			got := snapshot(t, target)
			if _, err := os.Stat(filepath.Join(target, ".git/HEAD")); err != nil {
				t.Errorf(".git/HEAD, excluded by the policy, is gone: %v", err)
			}
			for p := range maps.Keys(got) {
				if p == ".git" || p == ".git/HEAD" {
					delete(got, p)
				}
			}
			extra := []string{"extra.txt", "x", "x/y.txt"}
			for _, p := range extra {
				if _, ok := got[p]; ok == del {
					t.Errorf("%s present = %v with Delete = %v", p, ok, del)
				}
				delete(got, p)
			}
			if !maps.Equal(got, want) {
				t.Errorf("target differs from the workspace:\n got %v\nwant %v", got, want)
			}
			topAfter, _ := os.Stat(filepath.Join(target, "top.txt"))
			if !os.SameFile(topBefore, topAfter) {
				t.Error("the identical top.txt was rewritten")
			}
			if b, err := os.ReadFile(filepath.Join(outside, "keep.txt")); err != nil || string(b) != "outside" {
				t.Errorf("outside/keep.txt: %q %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(outside, "f.txt")); err == nil {
				t.Error("a write went through the target's symlink e")
			}
			// Written: a/b/c.txt, a/b/c.txt.orig, a/d.txt, e/f.txt; the
			// symlink l; g/h made; top.txt unchanged.
			wantSt := sbxdb.RestoreStats{Files: 4, Bytes: 1 + 4 + 2 + 3, Symlinks: 1, Dirs: 1, Unchanged: 1}
			if del {
				wantSt.Deleted = 2 // extra.txt, x
			}
			if !equalStats(st, wantSt) {
				t.Errorf("stats %+v, want %+v", st, wantSt)
			}
			// Again: everything is identical now.
			st, err = f.db.Restore(ctx, id, target, &sbxdb.RestoreOptions{Overwrite: true, Delete: del})
			if err != nil || st.Files != 0 || st.Unchanged != 6 || st.Deleted != 0 {
				t.Errorf("second restore: %+v, %v", st, err)
			}
		})
	}
}

func equalStats(a, b sbxdb.RestoreStats) bool {
	return a.Files == b.Files && a.Dirs == b.Dirs && a.Symlinks == b.Symlinks && a.Bytes == b.Bytes &&
		a.Unchanged == b.Unchanged && a.Deleted == b.Deleted && slices.Equal(a.Skipped, b.Skipped)
}

// A failure while the staged entries are moved into place puts back
// everything replaced or deleted: the target is as it was.
func TestRestoreOverwriteUndo(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := pathsTree(t, f)
	id := f.capture(t, ws).Checkpoint.ID
	target, _ := overwriteTarget(t, f, ws)
	before := snapshot(t, target)
	n := 0
	defer f.db.OnPoint("restore.overwrite.move", func() error {
		if n++; n == 3 {
			return errors.New("injected")
		}
		return nil
	})()
	if _, err := f.db.Restore(ctx, id, target, &sbxdb.RestoreOptions{Overwrite: true, Delete: true}); err == nil {
		t.Fatal("restore succeeded despite the injected failure")
	}
	if after := snapshot(t, target); !maps.Equal(before, after) {
		t.Errorf("target changed:\nbefore %v\n after %v", before, after)
	}
}

func TestRestoreOverwriteRefuses(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := pathsTree(t, f)
	id := f.capture(t, ws).Checkpoint.ID
	target := filepath.Join(f.dir, "target")
	write(t, target, "top.txt/inner", []byte("a directory where a file belongs"), 0o644)
	write(t, target, "a/d.txt", []byte("old"), 0o644)
	before := snapshot(t, target)
	_, err := f.db.Restore(ctx, id, target, &sbxdb.RestoreOptions{Overwrite: true})
	if !errors.Is(err, chain.ErrInvalidWorkspace) {
		t.Fatalf("err = %v, want INVALID_WORKSPACE", err)
	}
	if after := snapshot(t, target); !maps.Equal(before, after) {
		t.Error("the refused restore changed the target")
	}
	if _, err := f.db.Restore(ctx, id, target, &sbxdb.RestoreOptions{Delete: true}); err == nil {
		t.Error("Delete without Overwrite accepted")
	}
	if _, err := f.db.Restore(ctx, id, target, &sbxdb.RestoreOptions{Overwrite: true, Delete: true}); err != nil {
		t.Fatalf("with Delete: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(target, "top.txt")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("top.txt not replaced by the file: %v %v", fi, err)
	}
}

// KeepGoing restores every file whose blob is intact, names the others,
// and leaves a target's copy of a skipped file as it was.
func TestRestoreKeepGoing(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "a.txt", []byte("intact a"), 0o644)
	write(t, ws, "b/gone.txt", []byte("this blob is deleted"), 0o644)
	write(t, ws, "b/gone-copy.txt", []byte("this blob is deleted"), 0o644)
	write(t, ws, "c.txt", []byte("intact c"), 0o644)
	cp := f.capture(t, ws).Checkpoint
	var gone string
	for _, e := range cp.Files {
		if e.Path == "b/gone.txt" {
			gone = e.BlobKey
		}
	}
	if err := f.db.Blobs().Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(f.dir, "target")
	if _, err := f.db.Restore(ctx, cp.ID, target, nil); !errors.Is(err, chain.ErrMissingBlob) {
		t.Fatalf("without KeepGoing: %v, want MISSING_BLOB", err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Fatalf("a failed restore left %s: %v", target, err)
	}
	st, err := f.db.Restore(ctx, cp.ID, target, &sbxdb.RestoreOptions{KeepGoing: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 2 || len(st.Skipped) != 2 || st.Skipped[0].Path != "b/gone-copy.txt" || st.Skipped[1].Path != "b/gone.txt" ||
		st.Skipped[0].Code != chain.CodeMissingBlob {
		t.Errorf("stats %+v", st)
	}
	for _, p := range []string{"a.txt", "c.txt"} {
		if b, err := os.ReadFile(filepath.Join(target, p)); err != nil || string(b) != "intact "+p[:1] {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(target, "b/gone.txt")); !os.IsNotExist(err) {
		t.Errorf("b/gone.txt restored: %v", err)
	}
	// Over a target holding an old copy: it stays; the rest is restored.
	target2 := filepath.Join(f.dir, "target2")
	write(t, target2, "b/gone.txt", []byte("old copy"), 0o644)
	write(t, target2, "a.txt", []byte("old a"), 0o644)
	st, err = f.db.Restore(ctx, cp.ID, target2, &sbxdb.RestoreOptions{KeepGoing: true, Overwrite: true, Delete: true})
	if err != nil || len(st.Skipped) != 2 {
		t.Fatalf("overwrite: %+v %v", st, err)
	}
	if b, _ := os.ReadFile(filepath.Join(target2, "b/gone.txt")); string(b) != "old copy" {
		t.Errorf("the old copy of a skipped file: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(target2, "a.txt")); string(b) != "intact a" {
		t.Errorf("a.txt: %q", b)
	}
}

// A damaged large blob (found only as it is read) is skipped too, and its
// half-written file removed.
func TestRestoreKeepGoingDamaged(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "small.txt", []byte("small"), 0o644)
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i * 7 % 251)
	}
	write(t, ws, "big.bin", big, 0o644)
	cp := f.capture(t, ws).Checkpoint
	f.db.Blobs().Close()
	damaged := false
	filepath.WalkDir(filepath.Join(f.db.Blobs().Dir(), "large"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 1
			os.WriteFile(p, b, 0o644)
			damaged = true
		}
		return nil
	})
	if !damaged {
		t.Fatal("no large blob to damage")
	}
	target := filepath.Join(f.dir, "target")
	st, err := f.db.Restore(ctx, cp.ID, target, &sbxdb.RestoreOptions{KeepGoing: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Skipped) != 1 || st.Skipped[0].Path != "big.bin" || st.Skipped[0].Code != chain.CodeInvalidBlob || st.Files != 1 {
		t.Errorf("stats %+v", st)
	}
	if _, err := os.Lstat(filepath.Join(target, "big.bin")); !os.IsNotExist(err) {
		t.Errorf("big.bin left: %v", err)
	}
}
