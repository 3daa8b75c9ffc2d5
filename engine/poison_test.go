package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/vfs/faultfs"
)

// A failed sync poisons the open store: every later write fails with
// ErrPoisoned before it touches a file, reads go on, and the store, closed
// and opened again, is consistent and writable.

type poisonFixture struct {
	t     *testing.T
	dir   string
	ffs   *faultfs.FS
	db    *engine.DB
	ws    string
	w     lease.Writer
	cp1   *chain.Checkpoint
	tree1 map[string]fstree.Node
}

// newPoisonFixture opens a store with fsync on, through a fault-injecting
// FS, and captures a first checkpoint of a workspace with small files and
// a large one.
func newPoisonFixture(t *testing.T) *poisonFixture {
	f := &poisonFixture{t: t, dir: t.TempDir(), ffs: faultfs.New(vfs.OS)}
	db, err := engine.Open(filepath.Join(f.dir, "store"), &engine.Options{FS: f.ffs})
	if err != nil {
		t.Fatal(err)
	}
	f.db = db
	t.Cleanup(func() { f.db.Close() })
	f.ws = filepath.Join(f.dir, "ws")
	write(t, f.ws, "a.txt", []byte("first\n"), 0o644)
	write(t, f.ws, "src/b.go", []byte("package b\n"), 0o644)
	big := make([]byte, 1<<20+4096)
	for i := range big {
		big[i] = byte(i * 13)
	}
	write(t, f.ws, "big.bin", big, 0o644)
	age(t, f.ws) // the stat cache may trust them: a later capture reads only what changed
	l, err := db.AcquireWriter(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	f.w = l.Writer
	res, err := db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w, Dir: f.ws})
	if err != nil {
		t.Fatal(err)
	}
	f.cp1, f.tree1 = res.Checkpoint, snapshot(t, f.ws)
	return f
}

// copyOf returns a new checkpoint on the head cp1 naming cp1's files.
func (f *poisonFixture) copyOf(id string) chain.AppendInput {
	cp := &chain.Checkpoint{ID: id, ThreadID: "t", ParentID: f.cp1.ID, CreatedAt: f.cp1.CreatedAt + 1,
		Reason: chain.ReasonAutomatic, Files: f.cp1.Files}
	return chain.AppendInput{Checkpoint: cp, ExpectedHeadID: f.cp1.ID, Writer: f.w}
}

// requireWritesRefused runs every kind of write on the same handle: each
// must fail with ErrPoisoned, naming cause and matching it with errors.Is
// (so a caller sees the errno of the sync that failed, whichever write of
// a capture reports first), and touch no file.
func (f *poisonFixture) requireWritesRefused(cause error) {
	t := f.t
	t.Helper()
	ctx := context.Background()
	write(t, f.ws, "a.txt", []byte("refused\n"), 0o644)
	writes := []struct {
		name string
		run  func() error
	}{
		{"capture", func() error {
			_, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w, Dir: f.ws})
			return err
		}},
		{"append", func() error { _, err := f.db.Append(ctx, f.copyOf("refused")); return err }},
		{"save-thread", func() error { return f.db.SaveThread(ctx, "t", []json.RawMessage{[]byte(`"hi"`)}) }},
		{"gc", func() error { _, err := f.db.GC(ctx, sbxdb.GCOptions{Immediate: true}); return err }},
		{"gc-retain", func() error {
			_, err := f.db.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true})
			return err
		}},
		{"put-artifact", func() error {
			_, err := f.db.PutArtifact(ctx, engine.ArtifactInput{ArtifactID: "a", Name: "r.txt", MimeType: "text/plain", Data: strings.NewReader("report")})
			return err
		}},
		{"acquire-writer", func() error { _, err := f.db.AcquireWriter(ctx, "other"); return err }},
		{"delete-head", func() error { return f.db.DeleteHead(ctx, "t", f.cp1.ID, f.w) }},
		{"repack", func() error { _, err := f.db.Repack(ctx, cas.RepackOptions{Threshold: 0.01}); return err }},
		{"blob-put", func() error { return f.db.Blobs().Put(ctx, cas.Files.Key(sha256.Sum256([]byte("new"))), []byte("new")) }},
	}
	for _, w := range writes {
		f.ffs.Reset()
		err := w.run()
		if !errors.Is(err, sbxdb.ErrPoisoned) || !errors.Is(err, cause) || !strings.Contains(fmt.Sprint(err), cause.Error()) {
			t.Errorf("%s on the poisoned store: %v; want ErrPoisoned wrapping %q", w.name, err, cause)
		}
		if ev := f.ffs.Events(); len(ev) != 0 {
			t.Errorf("%s on the poisoned store did %v", w.name, ev)
		}
	}
	write(t, f.ws, "a.txt", []byte("first\n"), 0o644)
}

// requireReadsWork reads the store on the poisoned handle: cp1 is there,
// whole, and restores.
func (f *poisonFixture) requireReadsWork() {
	t := f.t
	t.Helper()
	ctx := context.Background()
	if cp, err := f.db.Get(ctx, f.cp1.ID); err != nil || cp == nil {
		t.Fatalf("Get on the poisoned store: %v, %v", cp, err)
	}
	if l, err := f.db.List(ctx, "t"); err != nil || len(l) == 0 || l[0].ID != f.cp1.ID {
		t.Fatalf("List on the poisoned store: %d checkpoints, %v", len(l), err)
	}
	if h, err := f.db.Head(ctx, "t"); err != nil || h == "" {
		t.Fatalf("Head on the poisoned store: %q, %v", h, err)
	}
	for _, e := range f.cp1.Files {
		if e.Kind == chain.KindFile {
			if _, err := f.db.Blobs().Get(ctx, e.BlobKey); err != nil {
				t.Fatalf("reading blob %s on the poisoned store: %v", e.BlobKey, err)
			}
		}
	}
	restoreEqual(t, f.db, f.cp1.ID, filepath.Join(f.dir, "poisoned-restore"), f.tree1)
}

// reopen closes and opens the store; it must then be consistent and take
// a capture.
func (f *poisonFixture) reopen() {
	t := f.t
	t.Helper()
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open(filepath.Join(f.dir, "store"), &engine.Options{FS: f.ffs})
	if err != nil {
		t.Fatal(err)
	}
	f.db = db
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "reopened after a failed sync")
	write(t, f.ws, "a.txt", []byte("after reopening\n"), 0o644)
	res, err := db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w, Dir: f.ws})
	if err != nil {
		t.Fatalf("capture after reopening: %v", err)
	}
	restoreEqual(t, db, res.Checkpoint.ID, filepath.Join(f.dir, "reopened-restore"), snapshot(t, f.ws))
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after a capture on the reopened store")
}

func TestPackSyncFailurePoisonsStore(t *testing.T) {
	f := newPoisonFixture(t)
	write(t, f.ws, "a.txt", []byte("second\n"), 0o644) // a new small blob: a new pack
	f.ffs.Reset()
	f.ffs.FailNth(faultfs.Sync, 1, syscall.EIO)
	_, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w, Dir: f.ws})
	fired := f.ffs.Fired()
	if len(fired) != 1 || !strings.HasSuffix(fired[0].Path, ".pack") {
		t.Fatalf("the fault fired at %v; want the sync of a pack", fired)
	}
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, cas.ErrSyncFailed) {
		t.Fatalf("capture whose pack sync failed: %v; want EIO and cas.ErrSyncFailed", err)
	}
	f.requireWritesRefused(syscall.EIO)
	f.requireReadsWork()
	if h, _ := f.db.Head(context.Background(), "t"); h != f.cp1.ID {
		t.Errorf("head after the failed capture: %s; want %s", h, f.cp1.ID)
	}
	f.reopen()
}

func TestDatabaseCommitFailurePoisonsStore(t *testing.T) {
	f := newPoisonFixture(t)
	f.ffs.Reset()
	// The database's commit, bbolt's page writes and fdatasync, fails.
	f.ffs.FailNth(faultfs.Commit, 1, syscall.EIO)
	_, err := f.db.Append(context.Background(), f.copyOf("cp2"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("append whose commit failed: %v; want EIO", err)
	}
	f.requireWritesRefused(syscall.EIO)
	f.requireReadsWork()
	f.reopen()
	// As before, or with the whole commit: the head and the list agree.
	ctx := context.Background()
	l, err := f.db.List(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(l))
	for i, cp := range l {
		ids[i] = cp.ID
	}
	if len(ids) < 2 || ids[0] != f.cp1.ID || (len(ids) == 3 && ids[1] != "cp2") || len(ids) > 3 {
		t.Errorf("thread after the failed commit and a capture: %v; want cp1, perhaps cp2, then the new capture", ids)
	}
}

// blockingFS, once armed, holds the next database commit until release is
// closed and then fails it.
type blockingFS struct {
	vfs.FS
	armed   atomic.Bool
	waiting chan struct{}
	release chan struct{}
}

func (b *blockingFS) BeforeCommit(path string) error {
	if b.armed.CompareAndSwap(true, false) {
		close(b.waiting)
		<-b.release
		return fmt.Errorf("commit of %s: %w", path, syscall.EIO)
	}
	return b.FS.BeforeCommit(path)
}

// Writes queued while a commit runs, which passed the write gate before
// the commit failed, must not commit after it.
func TestWritesQueuedBehindAFailedCommitDoNotCommit(t *testing.T) {
	bfs := &blockingFS{FS: vfs.OS, waiting: make(chan struct{}), release: make(chan struct{})}
	ctx := context.Background()
	db, err := engine.Open(filepath.Join(t.TempDir(), "store"), &engine.Options{FS: bfs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bfs.armed.Store(true)
	msgs := []json.RawMessage{[]byte(`1`)}
	first := make(chan error, 1)
	go func() { first <- db.SaveThread(ctx, "first", msgs) }()
	<-bfs.waiting // the first commit is under way
	const queued = 8
	errs := make(chan error, queued)
	for i := range queued {
		go func() { errs <- db.SaveThread(ctx, fmt.Sprint("q", i), msgs) }()
	}
	for engine.QueueLen(db) < queued {
		runtime.Gosched() // until every write has passed the gate and waits
	}
	close(bfs.release)
	if err := <-first; !errors.Is(err, syscall.EIO) {
		t.Fatalf("the write whose commit failed: %v; want EIO", err)
	}
	for range queued {
		if err := <-errs; !errors.Is(err, sbxdb.ErrPoisoned) {
			t.Errorf("a write queued behind the failed commit: %v; want ErrPoisoned", err)
		}
	}
	for i := range queued {
		if got, err := db.LoadThread(ctx, fmt.Sprint("q", i)); err != nil || len(got) != 0 {
			t.Errorf("thread q%d after the failed commit: %d messages (%v); want none", i, len(got), err)
		}
	}
}
