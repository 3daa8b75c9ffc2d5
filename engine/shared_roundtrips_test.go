package engine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/kv/pgkv"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// A capture on shared metadata costs PostgreSQL round trips that do not
// grow with the workspace: a first capture of N files looks its blobs up a
// few thousand keys per query and stores its manifest's chunks after one
// multi-key read, not a transaction or query per file. What remains is a
// constant, the capture's few transactions, bounded here by 30 + N/1,000.
// The round trips are pgkv's own count (ProcessCounts): deterministic,
// unlike time.
func TestSharedCaptureRoundTrips(t *testing.T) {
	const n = 3000
	ctx := t.Context()
	ws := t.TempDir()
	for i := range n {
		dir := filepath.Join(ws, fmt.Sprintf("d%02d", i%30))
		os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d.txt", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	age(t, ws)
	db, err := engine.Open(t.TempDir(), &engine.Options{Metadata: pgtest.URL(t), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w, err := db.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	// The buckets a store creates at its first append (a round trip each)
	// are not the workspace's cost.
	warm := t.TempDir()
	os.WriteFile(filepath.Join(warm, "w"), []byte("warm"), 0o644)
	if _, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: warm}); err != nil {
		t.Fatal(err)
	}
	before := pgkv.ProcessCounts()
	res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	trips := pgkv.ProcessCounts().RoundTrips - before.RoundTrips
	t.Logf("first capture of %d files: %d round trips", res.Stats.Files, trips)
	if res.Stats.Files != n || res.Stats.BlobsNew != n || res.Stats.Deduplicated != 0 {
		t.Fatalf("stats %+v, want %d files, all new", res.Stats, n)
	}
	if limit := int64(30 + n/1000); trips > limit {
		t.Errorf("first capture of %d files: %d PostgreSQL round trips, want at most %d", n, trips, limit)
	}
}
