package engine_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// mountTmpfs mounts a small tmpfs for the test and returns its directory.
// It needs root: without it the test skips, unless $CI is set, where it
// fails.
func mountTmpfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("mounting a tmpfs needs root, and CI must run this test")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=32m"); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// statTimes returns the file's modification and change times.
func statTimes(t *testing.T, path string) (mtime, ctime syscall.Timespec) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mtim, st.Ctim
}

// A page changed through a shared mapping of sbx.db on tmpfs moves neither
// its modification nor its change time, so the record of the clean close
// still vouches for the file and Open trusts it. The first write must not
// commit on the damaged tree all the same: it waits for the page walk,
// which finds the page referenced twice, and fails with ErrCorrupt naming
// it; Check reports it, and the next Open refuses the file.
func TestCleanCloseMissesSharedMappingWrite(t *testing.T) {
	dir, head := cleanStoreAt(t, filepath.Join(mountTmpfs(t), "store"))
	path := filepath.Join(dir, engine.DBFile)
	// A writer lease taken before the damage, as a capture holds one.
	db, err := engine.Open(dir, &engine.Options{LeaseDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := db.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	pageSize, root := boltPages(t, dir, meta.BucketCheckpoints)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	mtime, ctime := statTimes(t, path)
	m, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoints bucket's root branch: its last element now names
	// the first element's child, which the tree then reaches twice.
	le := binary.LittleEndian
	b := m[int(root)*pageSize:]
	if flags, count := le.Uint16(b[8:]), int(le.Uint16(b[10:])); flags != 0x01 || count < 2 {
		syscall.Munmap(m)
		t.Fatalf("the checkpoints bucket's root page %d: flags %#x, %d elements; want a branch of 2 or more", root, flags, count)
	}
	last := 16 + (int(le.Uint16(b[10:]))-1)*16
	twice := le.Uint64(b[16+8:])
	le.PutUint64(b[last+8:], twice)
	if err := syscall.Munmap(m); err != nil {
		t.Fatal(err)
	}
	if mt, ct := statTimes(t, path); mt != mtime || ct != ctime {
		t.Fatalf("a write through a shared mapping on tmpfs moved the file's times (%v, %v → %v, %v): the gap this test covers is not there", mtime, ctime, mt, ct)
	}

	damage := fmt.Sprintf("page %d is referenced twice", twice)
	corrupt := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, chain.ErrCorrupt) || !strings.Contains(err.Error(), damage) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v; want ErrCorrupt naming %s and %q", what, err, path, damage)
		}
	}
	db, err = engine.Open(dir, &engine.Options{LeaseDuration: time.Hour})
	if err != nil {
		// Open's own first write (the blob store's, at open) waited for the
		// background walk, which found the damage first: refused as well,
		// and nothing was built on the damage.
		corrupt("Open of the damaged file", err)
	} else {
		if db.VerifiedAtOpen() {
			t.Fatal("Open walked every page: the record was not trusted, and the gap not reproduced")
		}
		_, err = db.AcquireWriter(ctx, "t2")
		corrupt("acquiring a writer on the damaged tree", err)
		cp := &chain.Checkpoint{ID: "cp40", ThreadID: "t1", ParentID: head, CreatedAt: 2000, Reason: chain.ReasonAutomatic,
			Files: []chain.Entry{{Path: "d", Kind: chain.KindDir}}}
		_, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: lease.Writer})
		corrupt("an append on the damaged tree", err)
		_, err = db.Check(ctx, sbxdb.CheckStoreOptions{})
		corrupt("Check", err)
		db.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, engine.CleanCloseName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a handle whose walk found damage recorded a clean close: %v", err)
	}
	_, err = engine.Open(dir, nil)
	corrupt("Open after the damaged session", err)
}
