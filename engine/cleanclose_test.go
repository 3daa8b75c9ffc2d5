package engine_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// cleanStore writes a store whose checkpoints bucket spans a branch page
// and its leaves, and closes it cleanly.
func cleanStore(t *testing.T) (dir string, head string) {
	t.Helper()
	return cleanStoreAt(t, filepath.Join(t.TempDir(), "store"))
}

// cleanStoreAt is cleanStore in dir.
func cleanStoreAt(t *testing.T, dir string) (_ string, head string) {
	t.Helper()
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := db.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		files := make([]chain.Entry, 60)
		for j := range files {
			files[j] = chain.Entry{Path: fmt.Sprintf("some/directory/of/the/tree/entry%04d-%d", j, i), Kind: chain.KindDir}
		}
		cp := &chain.Checkpoint{ID: fmt.Sprintf("cp%02d", i), ThreadID: "t1", ParentID: head, CreatedAt: int64(1000 + i),
			Reason: chain.ReasonAutomatic, Files: files}
		if head, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: w.Writer}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, engine.CleanCloseName)); err != nil {
		t.Fatalf("a clean close left no record: %v", err)
	}
	return dir, head
}

// openVerified opens dir and reports whether Open walked every page.
func openVerified(t *testing.T, dir string, readOnly bool) bool {
	t.Helper()
	db, err := engine.Open(dir, &engine.Options{ReadOnly: readOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return db.VerifiedAtOpen()
}

func TestCleanCloseSkipsThePageWalk(t *testing.T) {
	dir, _ := cleanStore(t)
	for _, readOnly := range []bool{true, false, true} {
		if openVerified(t, dir, readOnly) {
			t.Fatalf("Open (read-only %v) after a clean close walked every page", readOnly)
		}
	}

	// A writable handle removes the record while it holds the store.
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, engine.CleanCloseName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record of a clean close while a writable handle is open: %v", err)
	}
	db.Close()

	// Any change to the record, or a file it does not describe, is not
	// trusted.
	rec := filepath.Join(dir, engine.CleanCloseName)
	good, _ := os.ReadFile(rec)
	for name, bad := range map[string][]byte{
		"flipped": []byte(strings.Replace(string(good), "txid=", "txid=1", 1)),
		"torn":    good[:len(good)/2],
		"empty":   {},
	} {
		os.WriteFile(rec, bad, 0o644)
		if !openVerified(t, dir, true) {
			t.Errorf("record %s: Open trusted it", name)
		}
	}
	os.WriteFile(rec, good, 0o644)
	if openVerified(t, dir, true) {
		t.Fatal("the record restored: not trusted")
	}
	// Touched: the change time moves even when the modification time is
	// put back.
	path := filepath.Join(dir, engine.DBFile)
	st, _ := os.Stat(path)
	time.Sleep(10 * time.Millisecond)
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if !openVerified(t, dir, true) {
		t.Error("a file whose change time moved: Open trusted the record")
	}
}

// A process killed while it holds the store writable leaves no record: the
// next Open walks every page.
func TestKilledWriterLeadsToFullVerify(t *testing.T) {
	if dir := os.Getenv("SBXDB_CHILD_KILLED_WRITER"); dir != "" {
		db, err := engine.Open(dir, nil)
		if err != nil {
			fmt.Println("child:", err)
			os.Exit(2)
		}
		if err := db.SaveThread(ctx, "t1", nil); err != nil {
			fmt.Println("child:", err)
			os.Exit(2)
		}
		os.Exit(0) // no Close
	}
	dir, _ := cleanStore(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriterLeadsToFullVerify$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SBXDB_CHILD_KILLED_WRITER="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !openVerified(t, dir, false) {
		t.Fatal("Open after a writer died holding the store trusted a record")
	}
	// That Open verified the file and closed cleanly: the next one trusts.
	if openVerified(t, dir, false) {
		t.Fatal("Open after a verified session's clean close walked every page")
	}
}

func TestCompactLeadsToFullVerify(t *testing.T) {
	dir, _ := cleanStore(t)
	if _, _, err := engine.Compact(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	if !openVerified(t, dir, true) {
		t.Fatal("Open after Compact trusted a record of the file it replaced")
	}
}

// A file damaged in place after a clean close. With the record as the
// close left it, the file's change time gives the damage away and Open
// refuses the file. With a record forged to match (damage no stat shows,
// as a failing disk's), Open trusts it: then every call fails with
// ErrCorrupt or succeeds, none panics, no write commits on the damaged
// tree, Check finds it, and the handle's Close records nothing.
func TestDamageAfterCleanClose(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, path string, pageSize int, root uint64)
	}{
		{"branch page id flipped", func(t *testing.T, path string, pageSize int, root uint64) {
			testkit.FlipByte(t, path, int64(root)*int64(pageSize))
		}},
		{"leaf page id flipped", func(t *testing.T, path string, pageSize int, root uint64) {
			testkit.FlipByte(t, path, int64(firstChild(t, path, pageSize, root))*int64(pageSize))
		}},
		{"leaf element far past the mapping", func(t *testing.T, path string, pageSize int, root uint64) {
			// The first element's pos (leaf element: flags, pos, ksize,
			// vsize): its key lies a gigabyte past the page.
			off := int64(firstChild(t, path, pageSize, root))*int64(pageSize) + 16 + 4
			b, _ := os.ReadFile(path)
			binary.LittleEndian.PutUint32(b[off:], 1<<30)
			writeInPlace(t, path, off, b[off:off+4])
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, forge := range []bool{false, true} {
				dir, head := cleanStore(t)
				pageSize, root := boltPages(t, dir, meta.BucketCheckpoints)
				path := filepath.Join(dir, engine.DBFile)
				if b, _ := os.ReadFile(path); binary.LittleEndian.Uint16(b[int(root)*pageSize+8:]) != 0x01 {
					t.Fatal("the checkpoints bucket's root is not a branch page")
				}
				st, _ := os.Stat(path)
				time.Sleep(10 * time.Millisecond)
				c.damage(t, path, pageSize, root)
				if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
					t.Fatal(err)
				}
				if !forge {
					_, err := engine.Open(dir, nil)
					if !errors.Is(err, chain.ErrCorrupt) || !strings.Contains(err.Error(), path) {
						t.Fatalf("Open of a file damaged after its clean close: %v, want ErrCorrupt naming it", err)
					}
					continue
				}
				if err := engine.ForgeCleanClose(dir); err != nil {
					t.Fatal(err)
				}
				probeDamaged(t, dir, path, head)
			}
		})
	}
}

// probeDamaged opens a damaged store whose forged record Open trusts, and
// runs calls that read the damaged bucket. The reads run on a read-only
// handle, which starts no page walk: they meet the damage themselves. A
// writable handle walks every page in the background and refuses every
// write once the walk found the damage; depending on when it does, its
// Open fails (the blob store's Open asks whether writes are refused) or
// the first write does, both with ErrCorrupt naming the file.
func probeDamaged(t *testing.T, dir, path, head string) {
	t.Helper()
	corrupt := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, chain.ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want ErrCorrupt naming %s", what, err, path)
		}
	}
	db, err := engine.Open(dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open trusting a forged record: %v", err)
	}
	if db.VerifiedAtOpen() {
		t.Fatal("Open did not trust the forged record")
	}
	var getErr error
	noPanic(t, "Get", func() { _, getErr = db.Get(ctx, head) })
	noPanic(t, "List", func() { db.List(ctx, "t1") })
	noPanic(t, "BlobReferences", func() { db.BlobReferences(ctx) })
	for i := range 40 {
		noPanic(t, "Get", func() {
			if _, err := db.Get(ctx, fmt.Sprintf("cp%02d", i)); err != nil {
				getErr = err
			}
		})
	}
	corrupt("Get of the damaged records", getErr)
	noPanic(t, "Check", func() {
		_, err := db.Check(ctx, sbxdb.CheckStoreOptions{})
		corrupt("Check", err)
	})
	noPanic(t, "Close", func() { db.Close() })

	noPanic(t, "writable Open", func() { db, err = engine.Open(dir, nil) })
	if err != nil {
		corrupt("writable Open", err)
	} else {
		noPanic(t, "SaveThread", func() { corrupt("a write on the damaged tree", db.SaveThread(ctx, "t2", nil)) })
		noPanic(t, "Close", func() { db.Close() })
	}
	if _, err := os.Stat(filepath.Join(dir, engine.CleanCloseName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a handle that met damage recorded a clean close: %v", err)
	}
	_, err = engine.Open(dir, nil)
	corrupt("Open after the damaged session", err)
}

// firstChild returns the page of a branch page's first element.
func firstChild(t *testing.T, path string, pageSize int, branch uint64) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Branch element: pos, ksize u32, pgid u64, after the page header.
	return binary.LittleEndian.Uint64(b[int(branch)*pageSize+16+8:])
}

// writeInPlace writes b at off of the file, keeping its inode.
func writeInPlace(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// Once a handle has met a damaged page, no write transaction runs on it,
// whichever path asks for one (Open's layout write after a view that
// panicked, as well as the committer's).
func TestNoWriteAfterDamage(t *testing.T) {
	db, err := engine.Open(t.TempDir(), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	damage := fmt.Errorf("%w: a page that panicked", chain.ErrCorrupt)
	db.MarkDamaged(damage)
	ran := false
	err = db.WriteTx(func(kv.Tx) error { ran = true; return nil })
	if ran || !errors.Is(err, chain.ErrCorrupt) {
		t.Fatalf("a write transaction after damage: ran %v, err %v", ran, err)
	}
}
