package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// sbxdb check --verify-blobs --repair after one flipped byte in a pack:
// it drops the damaged blob, says which checkpoint needs it and exits 12
// (that checkpoint cannot be restored yet); a capture of the intact
// workspace stores the bytes again, and the damaged checkpoint restores.
func TestCheckRepairDropsDamagedBlobs(t *testing.T) {
	store, ws := filepath.Join(t.TempDir(), "store"), t.TempDir()
	content := strings.Repeat("alpha ", 500)
	makeTree(t, ws, tree{"a.txt": content})
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp1")
	path, off, _ := dmgPack(t, store, testkit.FileKeyOf(content))
	testkit.FlipByte(t, path, off+64+10)

	code, out, errOut := cli(t, "check", "--db", store, "--verify-blobs", "--repair")
	if code != exitDamaged || errOut == "" {
		t.Fatalf("check --repair of a damaged blob: exit %d, stderr %q", code, errOut)
	}
	wantMatch(t, out, `(?m)^repaired: dropped 1 damaged blob from the index`)
	wantMatch(t, out, `(?m)^\s+`+testkit.FileKeyOf(content)+`\s+needed by cp1$`)
	wantMatch(t, out, `(?m)^after the repair: 1 error`)
	if code, out, _ := cli(t, "check", "--db", store); code != exitDamaged || !strings.Contains(out, "missing-blob") || !strings.Contains(out, "cp1") {
		t.Fatalf("check after the repair: exit %d, %q", code, out)
	}

	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp2")
	dst := filepath.Join(t.TempDir(), "out")
	ok(t, "restore", "cp1", dst, "--db", store)
	if b, err := os.ReadFile(filepath.Join(dst, "a.txt")); err != nil || string(b) != content {
		t.Fatalf("restored a.txt: %v", err)
	}
	ok(t, "check", "--db", store, "--verify-blobs")
}

// After a meta-page fallback, a writable open moves the pack files its
// index does not name into quarantine and says so on stderr; check lists
// them, and check --repair indexes them again.
func TestOpenWarnsOfQuarantine(t *testing.T) {
	localOnly(t) // the warning is of this process opening the files
	store, ws := filepath.Join(t.TempDir(), "store"), t.TempDir()
	makeTree(t, ws, tree{"a.txt": strings.Repeat("alpha ", 500)})
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp1")
	makeTree(t, ws, tree{"b.txt": strings.Repeat("bravo ", 500)})
	// cp2's capture is the last commit (its lease is left to expire).
	e, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.AcquireWriter(t.Context(), "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Capture(t.Context(), sbxdb.CaptureInput{Writer: w.Writer, Dir: ws, ID: "cp2"}); err != nil {
		t.Fatal(err)
	}
	// The file as a process killed right after cp2's commit leaves it: a
	// clean Close commits once more (its freelist), so take the bytes
	// before it and put them back after.
	db := filepath.Join(store, engine.DBFile)
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	// The newest meta page damaged: the store opens without cp2's
	// commit, and cp2's pack is one the index does not name.
	if err := os.WriteFile(db, b, 0o644); err != nil {
		t.Fatal(err)
	}
	pageSize := int64(binary.LittleEndian.Uint32(b[16+8:])) // the meta's page size (after magic and version)
	newer := int64(0)
	if binary.LittleEndian.Uint64(b[pageSize+16+48:]) > binary.LittleEndian.Uint64(b[16+48:]) {
		newer = pageSize
	}
	testkit.FlipByte(t, db, newer+16+16)

	code, out, errOut := cli(t, "check", "--db", store, "--repair")
	if !strings.Contains(errOut, "quarantine") || !strings.Contains(errOut, ".pack") {
		t.Errorf("no warning of the quarantine on stderr: %q", errOut)
	}
	if !strings.Contains(out, "quarantine") || !strings.Contains(out, "repaired: indexed 1 blob again from 1 file in quarantine") {
		t.Errorf("check --repair: exit %d, %q", code, out)
	}
	if code != 0 {
		t.Errorf("check --repair: exit %d, %q", code, out)
	}
	ok(t, "check", "--db", store, "--verify-blobs")
}
