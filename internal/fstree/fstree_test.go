package fstree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadAndDiff(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a/b"), 0o755)
	os.MkdirAll(filepath.Join(root, ".git/objects"), 0o755)
	os.WriteFile(filepath.Join(root, "a/b/f"), []byte("hello"), 0o644)
	os.WriteFile(filepath.Join(root, ".git/objects/x"), []byte("x"), 0o644)
	os.Symlink("b/f", filepath.Join(root, "a/l"))
	tree, err := Read(root, ".git")
	if err != nil {
		t.Fatal(err)
	}
	if len(tree) != 4 || tree["a/b/f"].Size != 5 || tree["a/l"].Target != "b/f" || !tree["a"].Mode.IsDir() {
		t.Fatalf("Read = %v", tree)
	}
	if d := Diff(tree, tree); d != nil {
		t.Fatalf("Diff of a tree with itself: %v", d)
	}
	os.WriteFile(filepath.Join(root, "a/b/f"), []byte("hellO"), 0o644)
	os.Remove(filepath.Join(root, "a/l"))
	os.WriteFile(filepath.Join(root, "new"), nil, 0o644)
	after, _ := Read(root, ".git")
	d := Diff(tree, after)
	if len(d) != 3 || !strings.HasPrefix(d[0], "a/b/f: ") || !strings.Contains(d[1], "a/l: only in the first") || !strings.Contains(d[2], "new: only in the second") {
		t.Fatalf("Diff = %q", d)
	}
}
