package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/kv/pgkv"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// A capture on one server relies on blobs it found stored (here through its
// stat cache, which pins them in its own process only); a sweep on another
// server sharing the metadata deletes them before the capture commits. The
// capture must not commit a checkpoint naming blobs that are gone: it sees
// the deletion count move, finds the blobs missing, and captures again.
func TestSharedSweepDuringCapture(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	open := func(dir string) *engine.DB {
		db, err := engine.Open(dir, &engine.Options{Metadata: url, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	// Two servers sharing one blob store: b's directory carries a's blob
	// id (as two servers on one bucket share its location). b only
	// sweeps, which deletes the packed blobs' index entries.
	dirA, dirB := t.TempDir(), t.TempDir()
	a := open(dirA)
	id, err := os.ReadFile(filepath.Join(dirA, "blobs-id"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirB, "blobs-id"), id, 0o644); err != nil {
		t.Fatal(err)
	}
	b := open(dirB)

	ws, empty := t.TempDir(), t.TempDir()
	old := time.Now().Add(-time.Hour) // stable: the stat cache vouches for them
	for i := range 20 {
		name := filepath.Join(ws, fmt.Sprintf("f%02d", i))
		if err := os.WriteFile(name, bytes.Repeat([]byte{byte(i)}, 100+i), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(name, old, old); err != nil {
			t.Fatal(err)
		}
	}
	l, err := a.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	capture := func(dir string) (*sbxdb.CaptureResult, error) {
		return a.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: dir})
	}
	if _, err := capture(ws); err != nil { // stores the blobs, writes the stat cache
		t.Fatal(err)
	}
	if _, err := capture(empty); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DeleteCheckpoints(ctx, "t", 1, l.Writer); err != nil { // the blobs are unreferenced now
		t.Fatal(err)
	}

	swept := 0
	remove := a.OnPoint("capture.walked", func() error {
		if swept > 0 {
			return nil
		}
		res, err := b.Sweep(ctx, sbxdb.SweepOptions{Immediate: true})
		swept = len(res.Deleted)
		return err
	})
	defer remove()
	res, err := capture(ws)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.FilesRead != 20 {
		t.Fatalf("the capture read %d files, want all 20 again after its found blobs were swept", res.Stats.FilesRead)
	}
	if swept != 20 {
		t.Fatalf("the other server's sweep deleted %d blobs, want the 20 the capture found", swept)
	}
	restored := filepath.Join(t.TempDir(), "out")
	if _, err := a.Restore(ctx, res.Checkpoint.ID, restored, nil); err != nil {
		t.Fatalf("restoring the capture that raced the sweep: %v", err)
	}
	for i := range 20 {
		name := fmt.Sprintf("f%02d", i)
		got, err := os.ReadFile(filepath.Join(restored, name))
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 100+i)) {
			t.Fatalf("%s restored as %d bytes, %v", name, len(got), err)
		}
	}
}

// A sweep takes the database's sweep lock: while another server holds it
// (here, a pgkv handle of the test standing for one), a sweep waits, and
// runs once it is released.
func TestSharedSweepsOneAtATime(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	db, err := engine.Open(t.TempDir(), &engine.Options{Metadata: url, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := pgkv.Open(ctx, url, pgkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	release, err := other.Lock(ctx, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = db.Sweep(short, sbxdb.SweepOptions{Immediate: true})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a sweep while another server sweeps: %v, want it to wait (the context's deadline)", err)
	}
	release()
	if _, err := db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil {
		t.Fatalf("a sweep once the other finished: %v", err)
	}
}
