package workload

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestNodeModulesShape checks the node_modules part of Quick(): the
// promised counts, npm's layout (package.json per package, nested
// node_modules, .bin links to executable scripts), a real install's spread
// of sizes and depths, duplicates, binaries and compressibility.
func TestNodeModulesShape(t *testing.T) {
	s := Quick()
	nm := s.NodeModules
	dir, _ := generate(t, s)
	tree := snapshot(t, dir)

	var files, dirs, nested, deepest, big, natives int
	var sizes []int64
	sums := map[[32]byte]int{}
	var text bytes.Buffer
	for p, n := range tree {
		if p != "node_modules" && !strings.HasPrefix(p, "node_modules/") {
			continue
		}
		deepest = max(deepest, strings.Count(p, "/")+1)
		switch {
		case n.Mode.IsDir():
			dirs++
			if strings.HasSuffix(p, "/node_modules") {
				nested++
			}
		case n.Mode&fs.ModeSymlink != 0:
			if !strings.HasPrefix(p, "node_modules/.bin/") || !strings.HasPrefix(n.Target, "../") {
				t.Errorf("symlink %s -> %s: want node_modules/.bin/x -> ../pkg/…", p, n.Target)
			}
			target := tree[filepath.ToSlash(filepath.Join(filepath.Dir(p), n.Target))]
			if target.Mode.Perm() != 0o755 {
				t.Errorf("%s -> %s: target mode %v, want 0755", p, n.Target, target.Mode)
			}
		case n.Mode.IsRegular():
			files++
			sizes = append(sizes, n.Size)
			sums[n.Sum]++
			if n.Size >= 2<<20 {
				natives++
			} else if n.Size >= 256<<10 {
				big++
			} else if text.Len() < 4<<20 {
				b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
				if err != nil {
					t.Fatal(err)
				}
				text.Write(b)
			}
		}
	}
	if files != nm.Files {
		t.Errorf("%d files under node_modules, want %d", files, nm.Files)
	}
	if per := float64(files) / float64(dirs); per < 5 || per > 14 {
		t.Errorf("%d files in %d directories: %.1f per directory, want 5–14 (npm: about 8.5)", files, dirs, per)
	}
	if nested == 0 {
		t.Error("no nested node_modules directory")
	}
	if deepest < 8 {
		t.Errorf("deepest node_modules entry %d levels down, want at least 8", deepest)
	}
	slices.Sort(sizes)
	if med := sizes[len(sizes)/2]; med < 512 || med > 8<<10 {
		t.Errorf("median file size %d, want 512 B–8 KB (npm: about 1.5 KB)", med)
	}
	if big == 0 || natives != nm.Binaries {
		t.Errorf("%d files of 256 KB–2 MB and %d of 2 MB or more, want some and %d", big, natives, nm.Binaries)
	}
	dups := 0
	for _, c := range sums {
		dups += c - 1
	}
	if dups < files/50 {
		t.Errorf("%d exact duplicates among %d files, want at least 2 %%", dups, files)
	}
	for p, n := range tree {
		if strings.Count(p, "/") == 1 && strings.HasPrefix(p, "node_modules/") && n.Mode.IsDir() &&
			!strings.HasPrefix(p, "node_modules/@") && p != "node_modules/.bin" {
			if _, ok := tree[p+"/package.json"]; !ok {
				t.Errorf("package %s has no package.json", p)
			}
		}
	}
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	defer enc.Close()
	if ratio := float64(text.Len()) / float64(len(enc.EncodeAll(text.Bytes(), nil))); ratio < 3 || ratio > 7 {
		t.Errorf("node_modules text compresses %.2fx, want 3–7x (npm's: about 4.6x with zstd -1)", ratio)
	}

	// Edit changes source files only.
	paths, _, err := Edit(dir, s, 0.5, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if strings.HasPrefix(p, "node_modules/") {
			t.Fatalf("Edit changed %s", p)
		}
	}
}

// TestNodeModulesOptional checks that a Spec's source part does not depend
// on its node_modules part, and that bad NodeModules are refused.
func TestNodeModulesOptional(t *testing.T) {
	s := Spec{Seed: 4, TextFiles: 60, Binaries: 1, EmptyDirs: 2, Symlinks: 2, Executables: 2}
	with := s
	with.NodeModules = NodeModules{Files: 120, Binaries: 1, BinLinks: 2}
	a, b := snapshot(t, must(generate(t, s))), snapshot(t, must(generate(t, with)))
	for p := range b {
		if p == "node_modules" || strings.HasPrefix(p, "node_modules/") {
			delete(b, p)
		}
	}
	diffTrees(t, "source part with and without node_modules", a, b)
	for _, bad := range []NodeModules{{Files: -1}, {Files: 2, Binaries: 2}, {BinLinks: 1}} {
		with.NodeModules = bad
		if _, err := Generate(filepath.Join(t.TempDir(), "x"), with); err == nil {
			t.Errorf("NodeModules %+v: no error", bad)
		}
	}
}

func must(dir string, _ Stats) string { return dir }
