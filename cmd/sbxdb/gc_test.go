package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
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

	// A damaged pack is an error, and exit status 12; with --json the
	// report alone says so.
	packs, _ := filepath.Glob(filepath.Join(store, "blobs", "packs", "*.pack"))
	flipLast(t, packs[0])
	code, out, errOut := cli(t, "check", "--db", store, "--verify-blobs", "--json")
	var rep sbxdb.CheckReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitDamaged || rep.Clean() || errOut != "" {
		t.Fatalf("check of a damaged store: exit %d, %q, %q", code, out, errOut)
	}
	if f := rep.Findings[0]; f.Kind != sbxdb.FindingBlob || !strings.HasPrefix(f.Subject, "sandbox-files/sha256/") {
		t.Fatalf("finding %+v", f)
	}
	// Without reading blobs the damage is not seen.
	ok(t, "check", "--db", store)
	if msg := failWith(t, exitNoStore, "check", "--db", filepath.Join(t.TempDir(), "none")); !strings.Contains(msg, "no sbxdb store") {
		t.Errorf("check of no store: %q", msg)
	}
}

func TestGCCommand(t *testing.T) {
	store := versions(t, 6)
	if code, _, errOut := cli(t, "gc", "--db", store, "--keep", "2"); code != 2 || !strings.Contains(errOut, "--older-than is required") {
		t.Fatalf("gc without --older-than: exit %d, %q", code, errOut)
	}
	if code, _, errOut := cli(t, "gc", "--db", store, "--older-than", "-1h"); code != 2 || !strings.Contains(errOut, "negative") {
		t.Fatalf("gc --older-than -1h: exit %d, %q", code, errOut)
	}
	if code, _, _ := cli(t, "gc", "--db", store, "--older-than", "1h", "--thread", "main"); code != 2 {
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
	wantMatch(t, out, `(?m)^blobs stored: .* given back$`)
	var res sbxdb.GCResult
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
	if msg := failWith(t, exitNoStore, "compact", "--db", filepath.Join(t.TempDir(), "none")); !strings.Contains(msg, "no sbxdb store") {
		t.Errorf("compact of no store: %q", msg)
	}
}

// Found in review: gc and check --repair made an empty store at a
// mistyped path and exited 0.
func TestMaintenanceNeedsAStore(t *testing.T) {
	none := filepath.Join(t.TempDir(), "typo")
	for _, args := range [][]string{
		{"gc", "--db", none, "--older-than", "24h"},
		{"check", "--db", none, "--repair"},
		{"compact", "--db", none},
	} {
		if msg := failWith(t, exitNoStore, args...); !strings.Contains(msg, "no sbxdb store at "+none) {
			t.Errorf("%v: %q", args, msg)
		}
	}
	if _, err := os.Stat(none); !os.IsNotExist(err) {
		t.Fatalf("a store was made at %s: %v", none, err)
	}
}

func TestGCFlags(t *testing.T) {
	store := versions(t, 4)
	// --keep 0 keeps the head only (SPEC §10 Q1); 7d is a duration.
	out := ok(t, "gc", "--db", store, "--keep", "0", "--older-than", "7d")
	wantMatch(t, out, `(?m)^retention: deleted 3 checkpoints in 1 thread$`)
	for _, bad := range []string{"1x", "-1d", "d"} {
		if code, _, errOut := cli(t, "gc", "--db", store, "--older-than", bad); code != 2 || !strings.Contains(errOut, bad) {
			t.Errorf("--older-than %s: exit %d, %q", bad, code, errOut)
		}
	}
	if code, _, _ := cli(t, "gc", "--db", store, "--older-than", "1h", "--keep", "-1"); code != 2 {
		t.Errorf("--keep -1: exit %d", code)
	}
}

// A store with a referenced blob missing: gc deletes nothing at all, not
// even by retention, and says why.
func TestGCRefusesADamagedStore(t *testing.T) {
	store := versions(t, 3)
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	refs, _ := db.BlobReferences(t.Context())
	db.Blobs().Delete(t.Context(), refs[0].Key)
	db.Close()
	log := ok(t, "log", "main", "--db", store)
	if msg := failWith(t, exitDamaged, "gc", "--db", store, "--keep", "1", "--older-than", "0"); !strings.Contains(msg, "SANDBOX_SNAPSHOT_MISSING_BLOB") || !strings.Contains(msg, refs[0].Key) {
		t.Errorf("gc of a damaged store: %q", msg)
	}
	if ok(t, "log", "main", "--db", store) != log {
		t.Fatal("gc deleted checkpoints before refusing")
	}
}

// Found in review: a repair that fixed every count still exited 1 when no
// checkpoint was left to count.
func TestCheckRepairExitStatus(t *testing.T) {
	store := versions(t, 2)
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := db.AcquireWriter(t.Context(), "main")
	for {
		head, _ := db.Head(t.Context(), "main")
		if head == "" {
			break
		}
		db.DeleteHead(t.Context(), "main", head, w.Writer)
	}
	w.Release(t.Context())
	db.Close()
	raw, err := bolt.Open(filepath.Join(store, engine.DBFile), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw.Update(func(tx *bolt.Tx) error { return meta.AddRef(kv.Bolt(tx), testkit.FileKeyOf("same\n"), 2) })
	raw.Close()
	code, out, _ := cli(t, "check", "--db", store)
	if code != exitDamaged || !strings.Contains(out, "refcount") {
		t.Fatalf("check of stale counts: exit %d, %q", code, out)
	}
	out = ok(t, "check", "--db", store, "--repair")
	wantMatch(t, out, `(?m)^repaired: rewrote the counts of 1 blob key$`)
	ok(t, "check", "--db", store)
}

// gc recompresses packs older than --older-than at a better level by
// default; --no-recompress leaves them, and --dry-run names them.
func TestGCRecompressesColdPacks(t *testing.T) {
	store := versions(t, 2)
	gcJSON := func(args ...string) sbxdb.GCResult {
		t.Helper()
		var res sbxdb.GCResult
		out := ok(t, append([]string{"gc", "--db", store, "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("gc %v: %q: %v", args, out, err)
		}
		return res
	}
	dry := ok(t, "gc", "--db", store, "--older-than", "1h", "--dry-run")
	wantMatch(t, dry, `(?m)^repack: would rewrite 0 files \(0 B\), recompressing 0 cold files \(0 B\)$`)
	dry = ok(t, "gc", "--db", store, "--older-than", "0", "--dry-run")
	wantMatch(t, dry, `(?m)^repack: would rewrite 2 files \(.*\), recompressing 2 cold files \(.*\)$`)
	if res := gcJSON("--older-than", "1h"); res.Repack.Packs != 0 {
		t.Fatalf("gc --older-than 1h rewrote fresh packs: %+v", res.Repack)
	}
	if res := gcJSON("--older-than", "0", "--no-recompress"); res.Repack.Packs != 0 {
		t.Fatalf("gc --no-recompress rewrote packs: %+v", res.Repack)
	}
	out := ok(t, "gc", "--db", store, "--older-than", "0")
	wantMatch(t, out, `(?m)^repack: rewrote 2 packs, moving 3 live blobs: .* \(recompressed 2 cold files of .*\)$`)
	if res := gcJSON("--older-than", "0"); res.Repack.Packs != 0 {
		t.Fatalf("a second gc recompressed again: %+v", res.Repack)
	}
	ok(t, "check", "--db", store, "--verify-blobs")
}
