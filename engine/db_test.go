package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
)

var ctx = context.Background()

func checkpoint(id, thread, parent string) *chain.Checkpoint {
	return &chain.Checkpoint{
		ID: id, ThreadID: thread, ParentID: parent, CreatedAt: 1, Reason: chain.ReasonAutomatic,
		Label: "label-" + id,
		Files: []chain.Entry{{Path: id + ".txt", Kind: chain.KindFile, BlobKey: testkit.FileKey(len(id)), Size: 1}},
	}
}

func open(t *testing.T, dir string) *engine.DB {
	t.Helper()
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Writes queued while a commit runs share the next transaction, and a CAS
// loser among them is only its own caller's failure.
func TestGroupCommitSharesTransaction(t *testing.T) {
	db := open(t, t.TempDir())
	leases := map[string]chain.Writer{}
	for i := range 4 {
		th := "u" + strconv.Itoa(i)
		l, err := db.AcquireWriter(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		leases[th] = l.Writer
	}

	// Hold the committer inside the first append's transaction until the
	// other appends are queued behind it.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	remove := db.OnPoint("append.publish", func() error {
		once.Do(func() { close(entered); <-release })
		return nil
	})
	defer remove()

	results := make(chan error, 8)
	go func() {
		_, err := db.Append(ctx, chain.AppendInput{Checkpoint: checkpoint("first", "u0", ""), Writer: leases["u0"]})
		results <- err
	}()
	<-entered
	before, statsBefore := db.Batches(), db.WriteStats()
	var wg sync.WaitGroup
	for i, in := range []chain.AppendInput{
		{Checkpoint: checkpoint("a", "u1", ""), Writer: leases["u1"]},
		{Checkpoint: checkpoint("b", "u2", ""), Writer: leases["u2"]},
		{Checkpoint: checkpoint("stale", "u3", "x"), ExpectedHeadID: "x", Writer: leases["u3"]}, // CAS loser
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := db.Append(ctx, in)
			if i == 2 {
				if !errors.Is(err, chain.ErrStaleHead) {
					t.Errorf("stale append: got %v, want STALE_HEAD", err)
				}
				return
			}
			results <- err
		}()
	}
	// Wait until the three are queued: the committer is parked, so they
	// can only sit in the queue.
	deadline := time.Now().Add(10 * time.Second)
	for engine.QueueLen(db) < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for range 3 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := db.Batches() - before; got != 2 {
		t.Errorf("transactions for the first append and three queued ones: %d, want 2", got)
	}
	// WriteStats counts them by size: one of 1 write, one of 3 (the
	// bucket of at most 4).
	var grew [len(engine.BatchBounds)]int64
	for i, n := range db.WriteStats().Batches {
		grew[i] = n - statsBefore.Batches[i]
	}
	if want := [len(engine.BatchBounds)]int64{0: 1, 2: 1}; grew != want {
		t.Errorf("batches by size grew by %v, want %v (bounds %v)", grew, want, engine.BatchBounds)
	}
	for _, th := range []string{"u0", "u1", "u2"} {
		if h, _ := db.Head(ctx, th); h == "" {
			t.Errorf("thread %s has no head after its append", th)
		}
	}
	if h, _ := db.Head(ctx, "u3"); h != "" {
		t.Errorf("CAS loser published head %q", h)
	}
}

// A flipped byte in a stored value is an error naming the record, never
// wrong data.
func TestFlippedValueByteIsCorruptNamingRecord(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir)
	l, _ := db.AcquireWriter(ctx, "th")
	cp := checkpoint("victim", "th", "")
	cp.Label = "MARKER-0123456789"
	if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	path := filepath.Join(dir, engine.DBFile)
	raw, _ := os.ReadFile(path)
	i := bytes.Index(raw, []byte("MARKER-0123456789"))
	if i < 0 || bytes.Index(raw[i+1:], []byte("MARKER-0123456789")) >= 0 {
		t.Fatal("marker not found exactly once in the file")
	}
	raw[i+3] ^= 0x20
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	db = open(t, dir)
	got, err := db.Get(ctx, "victim")
	if !errors.Is(err, chain.ErrCorrupt) || !strings.Contains(err.Error(), "victim") || got != nil {
		t.Fatalf("Get of damaged record = %v, %v; want ErrCorrupt naming victim", got, err)
	}
	if _, err := db.List(ctx, "th"); !errors.Is(err, chain.ErrCorrupt) {
		t.Fatalf("List over damaged record: %v, want ErrCorrupt", err)
	}
}

// Garbage, truncated and bit-flipped database files give errors from Open
// or from reads, never a panic.
func TestDamagedFileNeverPanics(t *testing.T) {
	src := t.TempDir()
	db := open(t, src)
	l, _ := db.AcquireWriter(ctx, "th")
	parent := ""
	for i := range 40 {
		id := "cp" + strconv.Itoa(i)
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: checkpoint(id, "th", parent), ExpectedHeadID: parent, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
		parent = id
	}
	db.Close()
	good, _ := os.ReadFile(filepath.Join(src, engine.DBFile))

	cases := map[string][]byte{
		"empty":     {},
		"garbage":   bytes.Repeat([]byte{0xA5}, 3*4096),
		"truncated": good[:len(good)/3],
		"half-page": good[:2048],
	}
	// Flips spread over meta and data pages: a byte every two pages by
	// default, one in every 61 under SBXDB_LONG=1, every byte under
	// SBXDB_LONG=2.
	step := testkit.Scale(t, 7919, 61)
	if testkit.Exhaustive(t) {
		step = 1
	}
	for pos := 13; pos < len(good); pos += step {
		b := bytes.Clone(good)
		b[pos] ^= 0xFF
		cases["flip-"+strconv.Itoa(pos)] = b
	}
	t.Logf("%d damaged files of a %d-byte database", len(cases), len(good))
	for name, content := range cases {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, engine.DBFile), content, 0o644); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic reached the caller: %v", name, r)
				}
			}()
			db, err := engine.Open(dir, &engine.Options{LockTimeout: 50 * time.Millisecond})
			if err != nil {
				return // refusing a damaged file is right
			}
			defer db.Close()
			db.Head(ctx, "th")
			db.List(ctx, "th")
			db.BlobReferences(ctx)
			db.Threads(ctx)
			for i := range 40 {
				db.Get(ctx, "cp"+strconv.Itoa(i))
			}
		}()
	}
	for _, name := range []string{"garbage", "truncated", "half-page"} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, engine.DBFile), cases[name], 0o644)
		if db, err := engine.Open(dir, nil); err == nil {
			db.Close()
			t.Errorf("%s file opened without error", name)
		}
	}
}

func TestNewerFormatIsRefused(t *testing.T) {
	dir := t.TempDir()
	open(t, dir).Close()
	b, err := bolt.Open(filepath.Join(dir, engine.DBFile), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Update(func(tx *bolt.Tx) error {
		k := []byte("format")
		return tx.Bucket([]byte("meta")).Put(k, meta.Seal([]byte("meta"), k, []byte{engine.FormatVersion + 1}))
	})
	b.Close()
	_, err = engine.Open(dir, nil)
	if want := fmt.Sprintf("reads format %d", engine.FormatVersion); !errors.Is(err, sbxdb.ErrFormat) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open of a newer format: %v, want ErrFormat saying %q", err, want)
	}
}

func TestSecondOpenNamesHolder(t *testing.T) {
	dir := t.TempDir()
	open(t, dir)
	start := time.Now()
	_, err := engine.Open(dir, &engine.Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, sbxdb.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if want := "pid " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the holder (%s)", err, want)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("second Open waited %v", waited)
	}
}

func TestReadOnlyAndClosed(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir)
	l, _ := db.AcquireWriter(ctx, "th")
	if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: checkpoint("one", "th", ""), Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := db.Head(ctx, "th"); err == nil {
		t.Error("read on a closed DB succeeded")
	}
	if _, err := db.AcquireWriter(ctx, "th2"); !errors.Is(err, sbxdb.ErrClosed) {
		t.Errorf("write on a closed DB: %v, want ErrClosed", err)
	}

	ro, err := engine.Open(dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if h, err := ro.Head(ctx, "th"); h != "one" || err != nil {
		t.Errorf("read-only Head = %q, %v", h, err)
	}
	if _, err := ro.AcquireWriter(ctx, "th"); !errors.Is(err, sbxdb.ErrReadOnly) {
		t.Errorf("read-only write: %v, want ErrReadOnly", err)
	}
	if _, err := engine.Open(t.TempDir(), &engine.Options{ReadOnly: true}); err == nil {
		t.Error("read-only Open of an empty directory succeeded")
	}
}

// TestSecondProcessIsRefused opens a store, then runs this test binary again
// as a child process that opens the same store with the default options: it
// must give up with ErrLocked naming this process, not hang.
func TestSecondProcessIsRefused(t *testing.T) {
	if dir := os.Getenv("SBXDB_CHILD_OPEN"); dir != "" {
		start := time.Now()
		_, err := engine.Open(dir, nil)
		fmt.Printf("child: locked=%v waited=%s err=%v\n", errors.Is(err, sbxdb.ErrLocked), time.Since(start).Round(time.Millisecond), err)
		return
	}
	dir := t.TempDir()
	open(t, dir)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecondProcessIsRefused$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SBXDB_CHILD_OPEN="+dir)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang, not a slow machine
		cmd.Process.Kill()
		t.Fatal("the second process did not return within 30 s")
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "pid " + strconv.Itoa(os.Getpid())
	if !strings.Contains(string(out), "child: locked=true") || !strings.Contains(string(out), want) {
		t.Fatalf("child output does not report ErrLocked naming %s:\n%s", want, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// A store held only by a read-only handle is not held by the last process
// that wrote to it: the error must not name that one.
func TestLockedByReaderNamesNoStaleWriter(t *testing.T) {
	dir := t.TempDir()
	open(t, dir).Close() // a writer names itself in the lock file while it holds it
	ro, err := engine.Open(dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, err = engine.Open(dir, &engine.Options{LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, sbxdb.ErrLocked) {
		t.Fatalf("writable Open beside a reader: %v, want ErrLocked", err)
	}
	if strings.Contains(err.Error(), "pid ") {
		t.Errorf("error %q names a pid, but only a reader holds the store", err)
	}
}
