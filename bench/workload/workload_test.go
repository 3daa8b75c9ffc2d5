package workload

import (
	"bytes"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/internal/fstree"
)

// node is what the tests compare of one tree entry.
type node = fstree.Node

// snapshot reads the tree under dir (the root excluded), keyed by
// slash-separated relative path.
func snapshot(t *testing.T, dir string) map[string]node {
	t.Helper()
	tree, err := fstree.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// diffTrees reports the first few differences between two snapshots.
func diffTrees(t *testing.T, what string, a, b map[string]node) {
	t.Helper()
	for i, d := range fstree.Diff(a, b) {
		if i == 6 {
			return
		}
		t.Errorf("%s: %s", what, d)
	}
}

func generate(t *testing.T, s Spec) (string, Stats) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	st, err := Generate(dir, s)
	if err != nil {
		t.Fatal(err)
	}
	return dir, st
}

// TestGenerateDeterministic generates Quick() twice and checks that the
// trees are identical, that Stats matches the disk and that the tree has
// the promised features.
func TestGenerateDeterministic(t *testing.T) {
	s := Quick()
	dirA, stA := generate(t, s)
	dirB, stB := generate(t, s)
	if stA != stB {
		t.Fatalf("stats differ: %+v vs %+v", stA, stB)
	}
	a, b := snapshot(t, dirA), snapshot(t, dirB)
	diffTrees(t, "two generations", a, b)

	var got Stats
	var empties, execs, maxDepth int
	sums := map[[32]byte]int{}
	for p, n := range a {
		if !strings.HasPrefix(p, "node_modules") {
			maxDepth = max(maxDepth, strings.Count(p, "/"))
		}
		switch {
		case n.Mode.IsDir():
			got.Dirs++
		case n.Mode&fs.ModeSymlink != 0:
			got.Symlinks++
			if filepath.IsAbs(n.Target) {
				t.Errorf("symlink %s -> %s is absolute", p, n.Target)
			}
			resolved := filepath.ToSlash(filepath.Join(filepath.Dir(p), n.Target))
			if tn, ok := a[resolved]; !ok || !tn.Mode.IsRegular() {
				t.Errorf("symlink %s -> %s does not point to a regular file of the tree", p, n.Target)
			}
		case n.Mode.IsRegular():
			got.Files++
			got.Bytes += n.Size
			if n.Size == 0 {
				empties++
			}
			switch n.Mode.Perm() {
			case 0o755:
				execs++
			case 0o644:
			default:
				t.Errorf("%s has mode %v", p, n.Mode)
			}
			sums[n.Sum]++
		default:
			t.Errorf("%s: unexpected mode %v", p, n.Mode)
		}
		if n.Mode.IsDir() && n.Mode.Perm() != 0o755 {
			t.Errorf("%s has mode %v", p, n.Mode)
		}
	}
	if got != stA {
		t.Errorf("Stats %+v, disk has %+v", stA, got)
	}
	nm := s.NodeModules
	if want := s.TextFiles + s.Binaries + nm.Files; got.Files != want {
		t.Errorf("%d files, want %d", got.Files, want)
	}
	if want := s.Symlinks + nm.BinLinks; got.Symlinks != want {
		t.Errorf("%d symlinks, want %d", got.Symlinks, want)
	}
	// The .bin targets and one native binary in three are executables.
	if want := s.Executables + nm.BinLinks + (nm.Binaries+2)/3; execs != want {
		t.Errorf("%d executables, want %d", execs, want)
	}
	if empties < 2 {
		t.Errorf("%d empty files, want at least 2", empties)
	}
	if maxDepth < 4 || maxDepth > 7 {
		t.Errorf("deepest entry outside node_modules has %d slashes, want 4–7", maxDepth)
	}
	emptyDirs := 0
	for p, n := range a {
		if n.Mode.IsDir() && !hasChild(a, p) {
			emptyDirs++
		}
	}
	if emptyDirs != s.EmptyDirs {
		t.Errorf("%d empty directories, want %d", emptyDirs, s.EmptyDirs)
	}
	dups := 0
	for _, c := range sums {
		dups += c - 1
	}
	if want := int(math.Round(s.DupFraction * float64(s.TextFiles))); dups < want {
		t.Errorf("%d duplicate files, want at least %d", dups, want)
	}
	for _, p := range []string{"docs/résumé.md", "src/日本/readme.md"} {
		if n, ok := a[p]; !ok || n.Size == 0 {
			t.Errorf("%s missing or empty", p)
		}
	}
	if mb := float64(got.Bytes) / 1e6; mb < 15 || mb > 60 {
		t.Errorf("Quick() tree has %.1f MB, want about 30", mb)
	}

	// Another seed gives another tree.
	s2 := s
	s2.Seed++
	s2.TextFiles, s2.Binaries = 50, 0
	dirC, _ := generate(t, s2)
	s3 := s2
	s3.Seed--
	dirD, _ := generate(t, s3)
	if c, d := snapshot(t, dirC), snapshot(t, dirD); maps.Equal(c, d) {
		t.Error("different seeds gave the same tree")
	}
}

func hasChild(tree map[string]node, dir string) bool {
	for p := range tree {
		if strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}

// TestGenerateTarget checks Generate's handling of its target directory.
func TestGenerateTarget(t *testing.T) {
	s := Spec{Seed: 3, TextFiles: 20, EmptyDirs: 1, Symlinks: 1, Executables: 2}
	empty := t.TempDir() // exists and is empty: fine
	if _, err := Generate(empty, s); err != nil {
		t.Fatalf("into an empty directory: %v", err)
	}
	if _, err := Generate(empty, s); err == nil {
		t.Fatal("into a non-empty directory: no error")
	}
	for _, bad := range []Spec{
		{TextFiles: -1},
		{TextFiles: 10, DupFraction: 1},
		{TextFiles: 10, DupFraction: math.NaN()},
		{TextFiles: 1, Executables: 2},
		{Symlinks: 1},
	} {
		if _, err := Generate(filepath.Join(t.TempDir(), "x"), bad); err == nil {
			t.Errorf("Spec %+v: no error", bad)
		}
	}
	// Tiny specs still work.
	for _, tiny := range []Spec{{}, {TextFiles: 1}, {Binaries: 1, Symlinks: 1}, {TextFiles: 7, Executables: 7, EmptyDirs: 3}} {
		dir := filepath.Join(t.TempDir(), "x")
		st, err := Generate(dir, tiny)
		if err != nil {
			t.Errorf("Spec %+v: %v", tiny, err)
			continue
		}
		if st.Files != tiny.TextFiles+tiny.Binaries || st.Symlinks != tiny.Symlinks {
			t.Errorf("Spec %+v: stats %+v", tiny, st)
		}
	}
}

// TestEdit checks that Edit changes exactly the files it names, the stated
// share of them, and does so deterministically.
func TestEdit(t *testing.T) {
	s := Quick()
	s.Binaries = 1
	dirA, _ := generate(t, s)
	dirB, _ := generate(t, s)
	before := snapshot(t, dirA)

	const fraction = 0.05
	pathsA, bytesA, err := Edit(dirA, s, fraction, 1)
	if err != nil {
		t.Fatal(err)
	}
	pathsB, bytesB, err := Edit(dirB, s, fraction, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pathsA, pathsB) || bytesA != bytesB {
		t.Fatalf("same edit differs: %d paths/%d bytes vs %d/%d", len(pathsA), bytesA, len(pathsB), bytesB)
	}
	after := snapshot(t, dirA)
	diffTrees(t, "same edit of two trees", after, snapshot(t, dirB))

	if want := int(math.Round(fraction * float64(s.TextFiles))); len(pathsA) != want {
		t.Errorf("edited %d files, want %d", len(pathsA), want)
	}
	if !slices.IsSorted(pathsA) || len(slices.Compact(slices.Clone(pathsA))) != len(pathsA) {
		t.Error("paths not sorted or not distinct")
	}
	edited := map[string]bool{}
	var sum int64
	for _, p := range pathsA {
		edited[p] = true
		sum += after[p].Size
	}
	if sum != bytesA {
		t.Errorf("Edit says %d bytes, the edited files have %d", bytesA, sum)
	}
	for p, n := range after {
		o := before[p]
		if changed := n != o; changed != edited[p] {
			t.Errorf("%s: changed %v, reported %v", p, changed, edited[p])
		}
		if n.Mode != o.Mode {
			t.Errorf("%s: mode %v became %v", p, o.Mode, n.Mode)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d entries before the edit, %d after", len(before), len(after))
	}

	// A later round edits other files; an edited file stays plausible text.
	paths2, _, err := Edit(dirA, s, fraction, 2)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(paths2, pathsA) {
		t.Error("round 2 edited the same files as round 1")
	}
	b, err := os.ReadFile(filepath.Join(dirA, filepath.FromSlash(paths2[0])))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.IndexByte(b, 0) >= 0 || !bytes.HasSuffix(b, []byte("\n")) {
		t.Errorf("%s after edit is not line-ended text", paths2[0])
	}

	// Small and large fractions.
	for _, c := range []struct {
		f    float64
		want int
	}{{0, 0}, {1e-9, 1}, {0.5, 20}, {2, 40}} {
		small := Spec{Seed: 5, TextFiles: 40, Binaries: 1}
		dir, _ := generate(t, small)
		p, _, err := Edit(dir, small, c.f, 1)
		if err != nil || len(p) != c.want {
			t.Errorf("fraction %v: %d files, %v; want %d", c.f, len(p), err, c.want)
		}
	}
	if _, _, err := Edit(t.TempDir(), Spec{Seed: 5, TextFiles: 40}, 0.5, 1); err == nil {
		t.Error("Edit of a missing tree: no error")
	}
}
