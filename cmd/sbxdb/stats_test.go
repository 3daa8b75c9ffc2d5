package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
)

// TestMigrateAndStats upgrades the engine's format-1 fixture with the
// command, then reads it: stats, the log, a restore.
func TestMigrateAndStats(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	if err := fstree.Copy(filepath.Join("..", "..", "engine", "testdata", "format1"), store); err != nil {
		t.Fatal(err)
	}

	// A reading command refuses the old store and says what to run.
	if msg := fail(t, "threads", "--db", store); !strings.Contains(msg, "format 1") || !strings.Contains(msg, "sbxdb migrate") {
		t.Errorf("threads on a format-1 store: %q", msg)
	}
	if out := ok(t, "migrate", "--db", store); !strings.Contains(out, fmt.Sprintf("from format 1 to %d", engine.FormatVersion)) {
		t.Errorf("migrate: %q", out)
	}
	if out := ok(t, "migrate", "--db", store); !strings.Contains(out, fmt.Sprintf("already format %d", engine.FormatVersion)) {
		t.Errorf("migrate again: %q", out)
	}
	ok(t, "check", "--db", store, "--verify-blobs")
	if out := ok(t, "log", "t1", "--db", store); !strings.Contains(out, "c3") {
		t.Errorf("log after migrate: %q", out)
	}
	ok(t, "restore", "c2", filepath.Join(t.TempDir(), "out"), "--db", store)

	var s sbxdb.StoreStats
	if err := json.Unmarshal([]byte(ok(t, "stats", "--db", store, "--json")), &s); err != nil {
		t.Fatal(err)
	}
	// history: t1 (c1..c3), t2 (f1), t3 (r3: r3 and r4 kept of five, then
	// r4 deleted).
	if s.Threads != 3 || s.Checkpoints != 5 || s.Chunks == 0 || s.Blobs == 0 {
		t.Errorf("stats = %+v", s)
	}
	if s.PhysicalMetadataBytes <= 0 || s.LogicalMetadataBytes <= s.PhysicalMetadataBytes/2 || s.SharingRatio <= 0 {
		t.Errorf("metadata sizes: %+v", s)
	}
	if s.BlobPhysicalBytes <= 0 || s.BlobLogicalBytes <= 0 || s.DBFileBytes <= 0 || s.PageSize <= 0 {
		t.Errorf("sizes: %+v", s)
	}
	out := ok(t, "stats", "--db", store)
	for _, want := range []string{"threads", "checkpoints", "metadata, logical", "metadata, physical", "metadata sharing", "blobs, logical", "blobs, physical", "database file"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats output lacks %q:\n%s", want, out)
		}
	}
}
