package engine_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// An existing embedded store (sbx.db and its blobs) opened with --metadata
// naming an empty database (a first try of shared metadata, a typo in the
// database name, a re-created database) is refused: otherwise its blob
// directory's packs would be removed at Open as unindexed leftovers, and
// the embedded store could no longer restore its own checkpoint.
func TestSharedRefusesAnEmbeddedStore(t *testing.T) {
	ctx := t.Context()
	dir, ws := t.TempDir(), t.TempDir()
	content := bytes.Repeat([]byte("precious "), 200)
	if err := os.WriteFile(filepath.Join(ws, "f"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.Capture(ctx, engine.CaptureInput{Writer: l.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	db.Close()
	packs, _ := filepath.Glob(filepath.Join(dir, "blobs", "packs", "*.pack"))
	t.Logf("packs before: %d", len(packs))

	shared, err := engine.Open(dir, &engine.Options{Metadata: pgtest.URL(t), NoSync: true})
	if !errors.Is(err, engine.ErrBlobsElsewhere) {
		if err == nil {
			shared.Close()
		}
		t.Errorf("opening the embedded store's directory with shared metadata: %v, want ErrBlobsElsewhere", err)
	}
	after, _ := filepath.Glob(filepath.Join(dir, "blobs", "packs", "*.pack"))
	t.Logf("packs after: %d", len(after))

	db, err = engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Restore(ctx, res.Checkpoint.ID, filepath.Join(t.TempDir(), "out"), nil); err != nil {
		t.Fatalf("the embedded store after one Open with --metadata: %v", err)
	}
}

// The converse: a store directory used with shared metadata, opened once
// without --metadata (a shell without $SBXDB_METADATA): a new sbx.db is
// created beside the blobs, whose packs it does not index, and Open
// removes them.
func TestSharedStoreOpenedWithoutMetadata(t *testing.T) {
	ctx := t.Context()
	url := pgtest.URL(t)
	dir, ws := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "f"), bytes.Repeat([]byte("precious "), 200), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open(dir, &engine.Options{Metadata: url, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.Capture(ctx, engine.CaptureInput{Writer: l.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	db.Close()

	if local, err := engine.Open(dir, &engine.Options{NoSync: true}); err != nil {
		t.Logf("opening without --metadata: %v (refused: good)", err)
	} else {
		local.Close()
	}

	db, err = engine.Open(dir, &engine.Options{Metadata: url, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Restore(ctx, res.Checkpoint.ID, filepath.Join(t.TempDir(), "out"), nil); err != nil {
		t.Fatalf("the shared store after one Open without --metadata: %v", err)
	}
}
