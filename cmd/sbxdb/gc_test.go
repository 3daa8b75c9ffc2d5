package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
)

// versions captures n versions of a workspace on thread main, one file
// changing each time, and returns the store.
func versions(t *testing.T, n int) string {
	t.Helper()
	store, ws := filepath.Join(t.TempDir(), "store"), t.TempDir()
	for i := range n {
		makeTree(t, ws, tree{"same.txt": "same\n", "changing.txt": strings.Repeat("version ", i+1)})
		ok(t, "capture", ws, "--db", store, "--thread", "main")
	}
	return store
}

func TestCheckCommand(t *testing.T) {
	store := versions(t, 3)
	out := ok(t, "check", "--db", store, "--verify-blobs")
	wantMatch(t, out, `^1 thread, 3 checkpoints, 4 blob keys referenced, 4 blobs stored \(0 unreferenced\), every blob read back: 0 errors, 0 warnings\n$`)

	// A damaged pack is an error, and exit status 1.
	packs, _ := filepath.Glob(filepath.Join(store, "blobs", "packs", "*.pack"))
	flipLast(t, packs[0])
	code, out, errOut := cli("check", "--db", store, "--verify-blobs", "--json")
	var rep engine.CheckReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.Clean() || errOut != "sbxdb: the store has problems (see above)\n" {
		t.Fatalf("check of a damaged store: exit %d, %q, %q", code, out, errOut)
	}
	if f := rep.Findings[0]; f.Kind != engine.FindingBlob || !strings.HasPrefix(f.Subject, "sandbox-files/sha256/") {
		t.Fatalf("finding %+v", f)
	}
	// Without reading blobs the damage is not seen.
	ok(t, "check", "--db", store)
	if msg := fail(t, "check", "--db", filepath.Join(t.TempDir(), "none")); !strings.Contains(msg, "no sbxdb store") {
		t.Errorf("check of no store: %q", msg)
	}
}

func TestGCCommand(t *testing.T) {
	store := versions(t, 6)
	if code, _, errOut := cli("gc", "--db", store, "--keep", "2"); code != 2 || !strings.Contains(errOut, "--older-than is required") {
		t.Fatalf("gc without --older-than: exit %d, %q", code, errOut)
	}
	if code, _, errOut := cli("gc", "--db", store, "--older-than", "-1h"); code != 2 || !strings.Contains(errOut, "negative") {
		t.Fatalf("gc --older-than -1h: exit %d, %q", code, errOut)
	}
	if code, _, _ := cli("gc", "--db", store, "--older-than", "1h", "--thread", "main"); code != 2 {
		t.Fatalf("--thread without --keep: exit %d", code)
	}

	log := ok(t, "log", "main", "--db", store)
	dry := ok(t, "gc", "--db", store, "--keep", "2", "--older-than", "0", "--dry-run")
	wantMatch(t, dry, `(?m)^retention: would delete 4 checkpoints in 1 thread$`)
	wantMatch(t, dry, `(?m)^sweep: examined 7 blobs, 3 referenced; would delete 4 blobs \(\d+ B\)$`)
	if ok(t, "log", "main", "--db", store) != log {
		t.Fatal("a dry run changed the thread")
	}

	out := ok(t, "gc", "--db", store, "--keep", "2", "--older-than", "0", "-v")
	wantMatch(t, out, `(?m)^retention: deleted 4 checkpoints in 1 thread$`)
	wantMatch(t, out, `(?m)^deleted sandbox-files/sha256/[0-9a-f]{64}$`)
	wantMatch(t, out, `(?m)^sweep: examined 7 blobs, 3 referenced; deleted 4 blobs`)
	wantMatch(t, out, `(?m)^blobs on disk: .* given back$`)
	var res engine.GCResult
	if err := json.Unmarshal([]byte(ok(t, "gc", "--db", store, "--keep", "2", "--older-than", "0", "--json")), &res); err != nil || len(res.Sweep.Deleted) != 0 || res.Sweep.Examined != 3 {
		t.Fatalf("second gc --json: %+v, %v", res, err)
	}
	ok(t, "check", "--db", store, "--verify-blobs")
}

func TestCompactCommand(t *testing.T) {
	store := versions(t, 30)
	ok(t, "gc", "--db", store, "--keep", "1", "--older-than", "0")
	before, _ := os.Stat(filepath.Join(store, engine.DBFile))
	out := ok(t, "compact", "--db", store)
	wantMatch(t, out, `^compacted .*: .* → .* \(\d+% smaller\)\n$`)
	after, _ := os.Stat(filepath.Join(store, engine.DBFile))
	if after.Size() > before.Size() {
		t.Fatalf("compact grew the file: %d → %d", before.Size(), after.Size())
	}
	ok(t, "check", "--db", store, "--verify-blobs")
	if msg := fail(t, "compact", "--db", filepath.Join(t.TempDir(), "none")); !strings.Contains(msg, "no sbxdb store") {
		t.Errorf("compact of no store: %q", msg)
	}
}
