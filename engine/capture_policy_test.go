package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/workspace"
)

// policyTree writes a workspace holding one entry for each default
// exclusion, the projection marker of hash "h1", a node_modules of 30
// files, logs and sources.
func policyTree(t *testing.T) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	for i := range 30 {
		write(t, ws, fmt.Sprintf("node_modules/pkg%02d/index.js", i), []byte("module.exports = 1"), 0o644)
	}
	for _, p := range []string{".git/config", ".git/HEAD", "lib/node_modules/x/y.js", ".env", "src/.env.local", "CLAUDE.md", "GEMINI.md",
		".claude/skills/review/SKILL.md", ".codex/skills/x", workspace.MarkerPrefix + "h1/state",
		"src/a.go", "src/b.go", "README.md", "debug.log", "src/trace.log", "tmp/scratch"} {
		write(t, ws, p, []byte(p), 0o644)
	}
	return ws
}

// TestCaptureExcludedByRule: a capture counts what the policy left out, by
// rule, an excluded directory once, files no include matched as "not
// included"; the store's own directory is not counted.
func TestCaptureExcludedByRule(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := policyTree(t)
	pol, err := workspace.Policy{WorkspaceHash: "h1"}.WithGlobs([]string{"*.log", "tmp/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		".git": 1, "node_modules": 2, ".env*": 2, "CLAUDE.md": 1, "GEMINI.md": 1, "skills": 2, "marker": 1,
		"--exclude *.log": 2, "--exclude tmp/": 1,
	}
	if s := res.Stats; !maps.Equal(s.ExcludedByRule, want) || s.Excluded != 13 || s.Files != 3 {
		t.Errorf("stats %+v; want 13 excluded, by rule %v, and 3 files", s, want)
	}

	// With includes, what no include matched is counted too, and a
	// caller's Exclude is "exclude".
	pol, err = workspace.Policy{
		Exclude: func(p string, k chain.Kind) bool { return p == "README.md" || workspace.DefaultExclude("")(p, k) },
	}.WithGlobs(nil, []string{"src/"})
	if err != nil {
		t.Fatal(err)
	}
	res, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]int{"exclude": 10, "not included": 3} // no hash: the marker is a directory like any
	if s := res.Stats; !maps.Equal(s.ExcludedByRule, want) || s.Excluded != 13 || s.Files != 3 {
		t.Errorf("stats %+v; want 13 excluded, by rule %v, and 3 files", s, want)
	}

	// Nothing excluded: an empty map, not null, in the JSON.
	clean := filepath.Join(t.TempDir(), "clean")
	write(t, clean, "a", []byte("a"), 0o644)
	res, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: clean})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.Stats)
	if !strings.Contains(string(b), `"excluded":0,"excludedByRule":{}`) || !strings.Contains(string(b), `"skipped":0`) {
		t.Errorf("stats JSON %s", b)
	}

	// The store's own directory inside the workspace is not policy's doing.
	inner := filepath.Join(t.TempDir(), "ws")
	write(t, inner, "a", []byte("a"), 0o644)
	db, err := engine.Open(filepath.Join(inner, "store"), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	res, err = db.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: inner})
	if err != nil || res.Stats.Excluded != 0 || res.Stats.Files != 1 {
		t.Errorf("capture around its store: %+v (%v)", res, err)
	}
}

// TestCaptureStoreIsWorkspace: a workspace that is the store's own
// directory is captured without the store's entries (its database, lock,
// blobs and stat caches), as a store beneath a workspace is left out, and
// without counting them as excluded: a second capture reads nothing new.
func TestCaptureStoreIsWorkspace(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "w")
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	write(t, dir, "a", []byte("a"), 0o644)
	write(t, dir, "sub/cache", []byte("c"), 0o644) // a store's name, but not at its root
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, e := range res.Checkpoint.Files {
			paths = append(paths, e.Path)
		}
		if want := []string{"a", "sub/cache"}; !slices.Equal(paths, want) || res.Stats.Excluded != 0 || res.Stats.BlobsNew != 2-2*i {
			t.Errorf("capture %d of the store's directory: %v, stats %+v; want %v", i+1, paths, res.Stats, want)
		}
	}
}

// TestCaptureLeavesOutOtherStores: a directory of the workspace that is
// another store's (one a capture left in it, say) is never recorded, under
// any policy, and is counted once under workspace.RuleStore; a directory
// that merely holds a file named like a store's lock is recorded.
func TestCaptureLeavesOutOtherStores(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := filepath.Join(t.TempDir(), "ws")
	write(t, ws, "src/a.go", []byte("package a"), 0o644)
	write(t, ws, "decoy/sbx.lock", []byte("not a store"), 0o644)
	for _, dir := range []string{".sbxdb", "deep/er/store"} {
		other, err := engine.Open(filepath.Join(ws, dir), &engine.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		l, err := other.AcquireWriter(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: filepath.Join(ws, "src")}); err != nil {
			t.Fatal(err)
		}
		other.Close()
	}
	for _, pol := range []workspace.Policy{{}, {NoDefaultExclude: true}} {
		res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Policy: pol})
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, e := range res.Checkpoint.Files {
			paths = append(paths, e.Path)
		}
		want := []string{"decoy/sbx.lock", "deep/er", "src/a.go"} // deep/er held only a store: an empty directory now
		if !slices.Equal(paths, want) || res.Stats.ExcludedByRule[workspace.RuleStore] != 2 || res.Stats.Excluded != 2 {
			t.Errorf("policy %+v: captured %v, stats %+v; want %v and 2 stores left out", pol, paths, res.Stats, want)
		}
	}

	// A workspace that is another store's directory keeps its own files
	// only, as one that is the capturing store's does.
	res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: filepath.Join(ws, ".sbxdb"), Policy: workspace.Policy{NoDefaultExclude: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Checkpoint.Files) != 0 {
		t.Errorf("capture of another store's directory recorded %d entries, the first %q", len(res.Checkpoint.Files), res.Checkpoint.Files[0].Path)
	}
}

// TestCaptureNoDefaultExclude: the default policy prunes node_modules
// before an include is asked, so --include 'node_modules/**' records
// nothing; without the default exclusions it records node_modules, the
// marker stays protected, and a restore under the same policy brings it
// back while one under the default policy refuses it.
func TestCaptureNoDefaultExclude(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := policyTree(t)

	def, err := workspace.Policy{WorkspaceHash: "h1"}.WithGlobs(nil, []string{"node_modules/**"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Policy: def})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Stats; s.Files != 0 || s.ExcludedByRule["node_modules"] != 2 {
		t.Errorf("default policy with node_modules/** included: %+v", s)
	}

	all, err := workspace.Policy{WorkspaceHash: "h1", NoDefaultExclude: true}.WithGlobs(nil, []string{"node_modules/**"})
	if err != nil {
		t.Fatal(err)
	}
	res, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Policy: all, ID: "nm"})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Stats; s.Files != 30 || !maps.Equal(s.ExcludedByRule, map[string]int{"marker": 1, "not included": 15}) {
		t.Errorf("no default exclusions, node_modules/** included: %+v", s)
	}
	if !hasEntry(res.Checkpoint, "node_modules/pkg07/index.js", chain.KindFile) {
		t.Error("node_modules was not recorded")
	}

	// Everything the defaults leave out, the marker excepted.
	res, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, ID: "all",
		Policy: workspace.Policy{WorkspaceHash: "h1", NoDefaultExclude: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".git/config", ".env", "src/.env.local", "CLAUDE.md", ".claude/skills/review/SKILL.md", "lib/node_modules/x/y.js"} {
		if !hasEntry(res.Checkpoint, p, chain.KindFile) {
			t.Errorf("%s was not recorded with no default exclusions", p)
		}
	}
	if s := res.Stats; s.Files != 45 || s.Excluded != 1 {
		t.Errorf("no default exclusions: %+v; want 45 files and the marker excluded", s)
	}

	// Restore applies the same policy.
	out := filepath.Join(t.TempDir(), "out")
	_, err = f.db.Restore(ctx, "all", out, nil)
	if !errors.Is(err, chain.ErrInvalidPath) || !strings.Contains(err.Error(), "excluded by the restore policy") {
		t.Fatalf("restore under the default policy: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused restore left %s (%v)", out, err)
	}
	st, err := f.db.Restore(ctx, "all", out, &sbxdb.RestoreOptions{Policy: workspace.Policy{WorkspaceHash: "h1", NoDefaultExclude: true}})
	if err != nil || st.Files != 45 {
		t.Fatalf("restore with no default exclusions: %+v, %v", st, err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "node_modules/pkg29/index.js")); err != nil || string(b) != "module.exports = 1" {
		t.Errorf("restored node_modules: %q, %v", b, err)
	}
}

// TestCaptureRequireFiles: a capture that would record no file fails with
// ErrEmptyCapture naming the includes, and appends nothing; without
// RequireFiles it makes an empty checkpoint, as before.
func TestCaptureRequireFiles(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := policyTree(t)
	os.MkdirAll(filepath.Join(ws, "empty/dir"), 0o755)
	pol, err := workspace.Policy{}.WithGlobs(nil, []string{"nothing/**", "*.rs"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, ID: "first"}); err != nil {
		t.Fatal(err)
	}
	_, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Policy: pol, RequireFiles: true, ID: "empty"})
	if !errors.Is(err, sbxdb.ErrEmptyCapture) {
		t.Fatalf("capture matching nothing: %v, want ErrEmptyCapture", err)
	}
	for _, s := range []string{`includes "nothing/**", "*.rs" match no file in ` + ws, "excluded by policy"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if chain.Code(err) != "" {
		t.Errorf("an empty capture has contract code %q", chain.Code(err))
	}
	if h, _ := f.db.Head(ctx, "t1"); h != "first" {
		t.Fatalf("the refused capture moved the head to %q", h)
	}
	if cp, err := f.db.Get(ctx, "empty"); cp != nil || err != nil {
		t.Fatalf("the refused capture stored %v (%v)", cp, err)
	}

	// Without includes the message names the workspace alone.
	bare := filepath.Join(t.TempDir(), "bare")
	os.MkdirAll(filepath.Join(bare, ".git"), 0o755)
	os.MkdirAll(filepath.Join(bare, "d"), 0o755)
	_, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: bare, RequireFiles: true})
	if !errors.Is(err, sbxdb.ErrEmptyCapture) || !strings.Contains(err.Error(), bare+" holds no file the policy records (1 entry excluded by policy)") {
		t.Fatalf("empty workspace: %v", err)
	}

	// A symlink is a file; an include that matches makes a checkpoint.
	link := filepath.Join(t.TempDir(), "link")
	os.MkdirAll(link, 0o755)
	os.Symlink("elsewhere", filepath.Join(link, "l"))
	if _, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: link, RequireFiles: true}); err != nil {
		t.Errorf("a workspace of one symlink: %v", err)
	}
	pol, _ = workspace.Policy{}.WithGlobs(nil, []string{"*.go"})
	res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Policy: pol, RequireFiles: true})
	if err != nil || res.Stats.Files != 2 {
		t.Errorf("an include that matches: %+v, %v", res, err)
	}

	// Without RequireFiles, the empty checkpoint of before.
	pol, _ = workspace.Policy{}.WithGlobs(nil, []string{"nothing/**"})
	res, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Policy: pol, ID: "empty"})
	if err != nil || res.Stats.Files != 0 {
		t.Fatalf("an empty capture without RequireFiles: %+v, %v", res, err)
	}
}
