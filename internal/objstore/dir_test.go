package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/internal/objstore/objstoretest"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

func openDir(t *testing.T) objstore.Store {
	d, err := objstore.OpenDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestDir(t *testing.T) {
	objstoretest.Run(t, openDir, objstoretest.Options{
		Many: 1100,
		// 1 GiB at SBXDB_LONG=1.
		Big:            testkit.ScaleShort(t, int64(32<<20), 200<<20, 1<<30),
		MaxHeap:        8 << 20,
		AtomicIfAbsent: true,
	})
}

// TestDirLayout checks that object names are paths below the root, that
// nothing but objects is left there, and that links out of the root are
// not followed.
func TestDirLayout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d, err := objstore.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Put(ctx, "large/01/ab/cdef", bytes.NewReader([]byte("blob")), 4, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "large/01/ab/cdef")); err != nil || string(b) != "blob" {
		t.Fatalf("object file: %q, %v", b, err)
	}
	tmps, err := os.ReadDir(filepath.Join(dir, objstore.ReservedPrefix+"tmp"))
	if err != nil || len(tmps) != 0 {
		t.Errorf("temporary files left: %v, %v", tmps, err)
	}

	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Stat(ctx, "escape/secret"); err == nil {
		t.Error("Stat followed a link out of the root")
	}
	if _, err := d.Open(ctx, "escape/secret", 0, -1); err == nil {
		t.Error("Open followed a link out of the root")
	}
	if err := d.Put(ctx, "escape/new", bytes.NewReader(nil), 0, objstore.PutOptions{}); err == nil {
		t.Error("Put wrote through a link out of the root")
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Put created a file outside the root: %v", err)
	}
	var names []string
	d.List(ctx, "", func(i objstore.Info) error { names = append(names, i.Name); return nil })
	if len(names) != 1 || names[0] != "large/01/ab/cdef" {
		t.Errorf("List = %q, want only the object (no links, no temporary files)", names)
	}
}

// TestDirRemovesStaleTemporaries checks that OpenDir clears what a crashed
// Put left, and only what is old enough not to be another process's.
func TestDirRemovesStaleTemporaries(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, objstore.ReservedPrefix+"tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"old", "young"} {
		if err := os.WriteFile(filepath.Join(tmp, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(tmp, "old"), old, old); err != nil {
		t.Fatal(err)
	}
	d, err := objstore.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := os.Stat(filepath.Join(tmp, "old")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "young")); err != nil {
		t.Errorf("young temporary file removed: %v", err)
	}
}
