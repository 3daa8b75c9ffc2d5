package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A checkpoint reference that names nothing, or several ids, fails before
// anything is written: restore leaves no DIR and nothing beside it, and an
// empty DIR stays as it was.
func TestBadReferenceRestoresNothing(t *testing.T) {
	store, _ := captured(t, "abcd1")
	ok(t, "capture", t.TempDir(), "--db", store, "--thread", "main", "--id", "abcd2")
	for _, tc := range []struct{ ref, want string }{
		{"abcd", `sbxdb: ambiguous checkpoint reference: "abcd" is a prefix of 2 checkpoint ids: "abcd1", "abcd2"; give more of the id` + "\n"},
		{"main@~2", `sbxdb: SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND: "main@~2": the chain of thread "main" from its head has 2 checkpoints (main@~0 to main@~1): "abcd1" is its root` + "\n"},
		{"abc", `sbxdb: SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND: no checkpoint "abc" (an id prefix needs at least 4 bytes)` + "\n"},
		{"none@", `sbxdb: SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND: "none@": thread "none" has no head checkpoint` + "\n"},
	} {
		parent := t.TempDir()
		target := filepath.Join(parent, "out")
		if msg := fail(t, "restore", tc.ref, target, "--db", store); msg != tc.want {
			t.Errorf("restore %s: %q, want %q", tc.ref, msg, tc.want)
		}
		if names := dirNames(t, parent); len(names) != 0 {
			t.Errorf("restore %s left %v", tc.ref, names)
		}

		if err := os.Mkdir(target, 0o711); err != nil {
			t.Fatal(err)
		}
		if msg := fail(t, "restore", tc.ref, target, "--db", store); msg != tc.want {
			t.Errorf("restore %s into an empty dir: %q, want %q", tc.ref, msg, tc.want)
		}
		fi, err := os.Stat(target)
		if err != nil || fi.Mode().Perm() != 0o711 || len(dirNames(t, target)) != 0 || len(dirNames(t, parent)) != 1 {
			t.Errorf("restore %s into an empty dir changed it: %v, %v", tc.ref, fi, err)
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}
