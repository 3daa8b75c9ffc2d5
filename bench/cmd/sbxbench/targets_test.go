package main

import (
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb/bench/workload"
	"github.com/sbxdb/sbxdb/internal/fstree"
)

// TestTargets checks the targets section on made-up figures: a ratio
// target takes the ratio run by run, a row target the row's values, and a
// target whose figure is missing says why.
func TestTargets(t *testing.T) {
	r := newReport()
	r.setSection("First capture")
	sbx := r.add("capture.first.sbxdb", "sbxdb", "s", []float64{2, 3, 4}, "")
	r.add("capture.first.tar", "tar", "s", []float64{2, 2, 5}, "")
	r.ratio(sbx, "capture.first.tar", "÷ tar|zstd")
	r.add("child.capture.rss", "rss", "MiB", []float64{90, 120, 110}, "")
	r.add("size.sbxdb", "sbxdb", "MB", []float64{10}, "")
	peer{false, noRestic}.add(r, "size.restic", "restic", "MB", nil, "")
	r.add("open.1gb", "open", "ms", []float64{5, 6, 7}, "")
	r.add("open.16mb", "open", "ms", []float64{5, 5, 5}, "") // no ratio yet: addTargets adds it
	addTargets(r)

	wall := r.byID["target.1.capture_wall"]
	if want := []float64{1, 1.5, 0.8}; !equal(wall.Values, want) || wall.Target == nil || !wall.Target.Met {
		t.Errorf("capture wall target %+v %+v, want values %v, median 1: met", wall, wall.Target, want)
	}
	if wall.Median != 1 {
		t.Errorf("median %v", wall.Median)
	}
	if rss := r.byID["target.4.capture_rss"]; rss.Median != 110 || rss.Target.Met {
		t.Errorf("rss target %+v", rss)
	}
	if o := r.byID["target.3.open_ratio"]; !equal(o.Values, []float64{1, 1.2, 1.4}) || !o.Target.Met {
		t.Errorf("open ratio target %+v", o)
	}
	if s := r.byID["target.5.size"]; s.Missing != noRestic {
		t.Errorf("size target missing %q, want the peer's reason", s.Missing)
	}
	if w := r.byID["target.7.w64"]; w.Missing == "" || len(w.Values) != 0 {
		t.Errorf("w64 target without core rows: %+v", w)
	}
	if len(r.byID) < len(targets) {
		t.Errorf("%d rows", len(r.byID))
	}
}

// TestWalk checks that both walks see every entry of a tree.
func TestWalk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ws")
	s := workload.Spec{Seed: 2, TextFiles: 40, EmptyDirs: 2, Symlinks: 2,
		NodeModules: workload.NodeModules{Files: 80, BinLinks: 2}}
	if _, err := workload.Generate(dir, s); err != nil {
		t.Fatal(err)
	}
	tree, err := fstree.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, walk := range map[string]func(string) (int, error){"serial": walkSerial, "parallel": walkParallel} {
		n, err := walk(dir)
		if err != nil || n != len(tree) {
			t.Errorf("%s walk: %d entries, %v; want %d", name, n, err, len(tree))
		}
	}
	if _, err := walkParallel(filepath.Join(dir, "missing")); err == nil {
		t.Error("walk of a missing directory: no error")
	}
}
