package engine_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// captureOnce captures a one-file workspace into the store in dir opened
// with opts, closes the store and returns the checkpoint's id.
func captureOnce(t *testing.T, dir string, opts engine.Options) string {
	t.Helper()
	ctx := t.Context()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "f"), bytes.Repeat([]byte("precious "), 200), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open(dir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	return res.Checkpoint.ID
}

// restores opens the store in dir with opts and restores id from it.
func restores(t *testing.T, dir string, opts engine.Options, id string) error {
	t.Helper()
	db, err := engine.Open(dir, &opts)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Restore(t.Context(), id, filepath.Join(t.TempDir(), "out"), nil)
	return err
}

// An existing embedded store (sbx.db and its blobs) opened with --metadata
// naming an empty database (a first try of shared metadata, a typo in the
// database name, a re-created database) is refused: otherwise its blob
// directory's packs would be removed at Open as unindexed leftovers, and
// the embedded store could no longer restore its own checkpoint.
func TestSharedRefusesAnEmbeddedStore(t *testing.T) {
	dir := t.TempDir()
	embedded := engine.Options{NoSync: true}
	id := captureOnce(t, dir, embedded)
	shared, err := engine.Open(dir, &engine.Options{Metadata: pgtest.URL(t), NoSync: true})
	if !errors.Is(err, engine.ErrBlobsElsewhere) {
		if err == nil {
			shared.Close()
		}
		t.Errorf("opening the embedded store's directory with shared metadata: %v, want ErrBlobsElsewhere", err)
	}
	if err := restores(t, dir, embedded, id); err != nil {
		t.Fatalf("the embedded store after an Open with --metadata: %v", err)
	}
}

// The converse: a store directory used with shared metadata, opened once
// without --metadata (a shell without $SBXDB_METADATA), is refused (its
// blobs without a database are a lost database, not a new store) and
// keeps its packs.
func TestSharedStoreOpenedWithoutMetadata(t *testing.T) {
	dir := t.TempDir()
	shared := engine.Options{Metadata: pgtest.URL(t), NoSync: true}
	id := captureOnce(t, dir, shared)
	if local, err := engine.Open(dir, &engine.Options{NoSync: true}); err == nil {
		local.Close()
		t.Error("opening a shared store's directory without its metadata: no error")
	}
	if err := restores(t, dir, shared, id); err != nil {
		t.Fatalf("the shared store after an Open without --metadata: %v", err)
	}
}
