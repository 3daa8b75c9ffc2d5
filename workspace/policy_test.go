package workspace_test

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/workspace"
)

const (
	file = chain.KindFile
	dir  = chain.KindDir
	link = chain.KindSymlink
)

const testHash = "0123abcd"

// TestDefaultExclude covers every default exclusion of SPEC §6.4 and every
// look-alike that must be kept, under DefaultExclude and under the zero
// Policy.
func TestDefaultExclude(t *testing.T) {
	tests := []struct {
		path string
		kind chain.Kind
		want bool
	}{
		// .git at any depth, any kind.
		{".git", dir, true},
		{".git", file, true},
		{"sub/.git", dir, true},
		{"a/b/.git", file, true},
		{".git/config", file, true},
		{"a/.git/HEAD", file, true},
		// node_modules at any depth.
		{"node_modules", dir, true},
		{"web/node_modules", dir, true},
		{"web/node_modules/react/index.js", file, true},
		{"node_modules", link, true},
		// Segments starting with .env.
		{".env", file, true},
		{".env.local", file, true},
		{".envrc", file, true},
		{".env.d", dir, true},
		{"svc/.env", file, true},
		{"svc/.env.production", file, true},
		{".envs/x", file, true},
		// Root CLAUDE.md and GEMINI.md.
		{"CLAUDE.md", file, true},
		{"GEMINI.md", file, true},
		// Exactly three segments under the skills directories.
		{".claude/skills/review", dir, true},
		{".claude/skills/notes.md", file, true},
		{".codex/skills/review", dir, true},
		{".grok/skills/review", dir, true},
		{".grok/skills/x", link, true},
		// The marker, root level, when the hash is known.
		{".tanstack-projected-" + testHash, dir, true},
		{".tanstack-projected-" + testHash, file, true},

		// Look-alikes that are kept.
		{".gitkeep", file, false},
		{".gitignore", file, false},
		{".github/workflows/ci.yml", file, false},
		{"a/.gitkeep", file, false},
		{"git", dir, false},
		{"x.git", dir, false},
		{"node_modules.txt", file, false},
		{"a/node_modules.txt", file, false},
		{"node_module", dir, false},
		{"my_node_modules", dir, false},
		{"env", file, false},
		{"x.env", file, false},
		{"a.env/b", file, false},
		{".tanstack", dir, false},
		{".tanstack/x", file, false},
		{".sandbox", dir, false},
		{".sandbox/x", file, false},
		{".tanstack-projected-other", dir, false},
		{".tanstack-projected-", dir, false},
		{".tanstack-projected-" + testHash + "x", dir, false},
		{"a/.tanstack-projected-" + testHash, dir, false},
		{"a/CLAUDE.md", file, false},
		{"a/GEMINI.md", file, false},
		{"claude.md", file, false},
		{"CLAUDE.md.bak", file, false},
		{"CLAUDE.md/x", file, false},
		{"AGENTS.md", file, false},
		{".claude", dir, false},
		{".claude/settings.json", file, false},
		{".claude/skills", dir, false},
		{".claude/skills/review/SKILL.md", file, false}, // four segments: its parent is what is excluded
		{".claude/agents/x", file, false},
		{"a/.claude/skills/x", dir, false},
		{".codex/skills", dir, false},
		{".grok/skills/a/b", file, false},
		{".gemini/skills/x", dir, false},
		{"src/main.go", file, false},
	}
	exclude := workspace.DefaultExclude(testHash)
	policy := &workspace.Policy{WorkspaceHash: testHash}
	for _, tt := range tests {
		if got := exclude(tt.path, tt.kind); got != tt.want {
			t.Errorf("DefaultExclude(%q)(%q, %s) = %v, want %v", testHash, tt.path, tt.kind, got, tt.want)
		}
		if got := policy.Skip(tt.path, tt.kind); got != tt.want {
			t.Errorf("Skip(%q, %s) = %v, want %v", tt.path, tt.kind, got, tt.want)
		}
	}
}

// TestDefaultExcludeUnknownHash: without a hash no marker name is excluded.
func TestDefaultExcludeUnknownHash(t *testing.T) {
	for _, name := range []string{".tanstack-projected-", ".tanstack-projected-" + testHash} {
		if workspace.DefaultExclude("")(name, dir) {
			t.Errorf("DefaultExclude(\"\")(%q) = true, want false", name)
		}
		var zero workspace.Policy
		if zero.Skip(name, dir) {
			t.Errorf("zero Policy Skip(%q) = true, want false", name)
		}
	}
}

// TestProtectedMarker: a caller's Exclude replaces the default exclusions but
// cannot expose the marker, nor anything beneath it on restore.
func TestProtectedMarker(t *testing.T) {
	marker := ".tanstack-projected-" + testHash
	p := &workspace.Policy{
		Exclude:       func(string, chain.Kind) bool { return false },
		Include:       func(string, chain.Kind) bool { return true },
		WorkspaceHash: testHash,
	}
	for _, kind := range []chain.Kind{file, dir, link} {
		if !p.Skip(marker, kind) {
			t.Errorf("Skip(marker, %s) = false under a keep-all Exclude", kind)
		}
		if p.Admits(marker, kind) {
			t.Errorf("Admits(marker, %s) = true under a keep-all Exclude", kind)
		}
	}
	if p.Admits(marker+"/state.json", file) {
		t.Error("Admits(marker/state.json) = true: an entry beneath the marker was admitted")
	}
	// The replaced defaults are really gone, and only the exact root marker
	// is protected.
	for _, name := range []string{".git/config", "node_modules", ".env", "CLAUDE.md", "a/" + marker, ".tanstack-projected-other"} {
		if p.Skip(name, file) {
			t.Errorf("Skip(%q) = true, want false: a caller Exclude replaces the defaults", name)
		}
	}
	// The marker is protected even when WithGlobs wraps a custom Exclude.
	q, err := p.WithGlobs([]string{"*.tmp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Skip(marker, dir) || q.Skip(".git", dir) || !q.Skip("x.tmp", file) {
		t.Error("WithGlobs over a custom Exclude: wrong marker, default or glob decision")
	}
}

// TestNilPolicy: a nil *Policy is the default policy.
func TestNilPolicy(t *testing.T) {
	var p *workspace.Policy
	if !p.Skip(".git", dir) || p.Skip("src", dir) {
		t.Error("nil Policy Skip does not apply the default exclusions")
	}
	if !p.Wants("src/a.go", file) {
		t.Error("nil Policy Wants(file) = false")
	}
	if !p.Admits("src/a.go", file) || p.Admits("node_modules/x/index.js", file) {
		t.Error("nil Policy Admits is not the default")
	}
}

func TestWants(t *testing.T) {
	p := &workspace.Policy{Include: func(path string, kind chain.Kind) bool {
		return kind == file && strings.HasSuffix(path, ".go")
	}}
	tests := []struct {
		path string
		kind chain.Kind
		want bool
	}{
		{"a.go", file, true},
		{"a.txt", file, false},
		{"src", dir, true}, // directories are always walked
		{"notes", dir, true},
		{"link.go", link, false}, // Include sees the kind and may refuse links
	}
	for _, tt := range tests {
		if got := p.Wants(tt.path, tt.kind); got != tt.want {
			t.Errorf("Wants(%q, %s) = %v, want %v", tt.path, tt.kind, got, tt.want)
		}
	}
	var zero workspace.Policy
	if !zero.Wants("a.txt", file) || !zero.Wants("l", link) {
		t.Error("zero Policy does not want every entry")
	}
}

func TestAdmits(t *testing.T) {
	p, err := workspace.Policy{WorkspaceHash: testHash}.WithGlobs([]string{"build/", "*.log"}, []string{"src/**", "README.md"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		kind chain.Kind
		want bool
	}{
		{"src/a.go", file, true},
		{"src/pkg/b.go", file, true},
		{"src", dir, true},
		{"src/empty", dir, true},
		{"README.md", file, true},
		{"docs/README.md", file, true}, // a slash-free include matches at any depth
		{"docs", dir, true},            // directories are walked, so admitted
		{"notes.txt", file, false},     // not included
		{"src/debug.log", file, false}, // excluded by glob
		{"src/build", dir, false},      // excluded directory
		{"src/build/out.o", file, false},
		{"build/README.md", file, false}, // beneath an excluded directory
		{"src/node_modules/x/y.js", file, false},
		{"src/.git/config", file, false},
		{".claude/skills/review/SKILL.md", file, false}, // beneath an excluded three-segment skill
		{".tanstack-projected-" + testHash + "/src/a.go", file, false},
		{"src/.env/x.go", file, false},
	}
	for _, tt := range tests {
		if got := p.Admits(tt.path, tt.kind); got != tt.want {
			t.Errorf("Admits(%q, %s) = %v, want %v", tt.path, tt.kind, got, tt.want)
		}
	}
	var zero workspace.Policy
	if zero.Admits("node_modules/left-pad/index.js", file) {
		t.Error("default Admits accepted an entry beneath node_modules")
	}
	if !zero.Admits("a/b/c.txt", file) {
		t.Error("default Admits rejected an ordinary path")
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, path string
		kind          chain.Kind
		want          bool
	}{
		// Unanchored: the last segment at any depth.
		{"*.log", "x.log", file, true},
		{"*.log", "a/b/x.log", file, true},
		{"*.log", "x.log/y", file, false},
		{"*.log", "x.logs", file, false},
		{"x.log", "a/x.log", file, true},
		{"x.log", "a/xx.log", file, false},
		{"build", "build", dir, true},
		{"build", "a/build", dir, true},
		{"build", "build/x", file, false}, // the path itself, not its ancestors
		{"*", "a/b/c", file, true},
		{"?.go", "pkg/a.go", file, true},
		{"?.go", "pkg/ab.go", file, false},
		{"*.env*", "a/prod.env.local", file, true},
		// Anchored by an inner slash.
		{"src/*.go", "src/a.go", file, true},
		{"src/*.go", "lib/src/a.go", file, false},
		{"src/*.go", "src/pkg/a.go", file, false},
		{"a/b", "a/b", file, true},
		{"a/b", "x/a/b", file, false},
		// Anchored by a leading slash.
		{"/TODO", "TODO", file, true},
		{"/TODO", "a/TODO", file, false},
		{"/src/*.go", "src/a.go", file, true},
		// ** as a whole segment.
		{"build/**", "build/x.o", file, true},
		{"build/**", "build/a/b/x.o", file, true},
		{"build/**", "build", dir, true},
		{"build/**", "src/build/x.o", file, false},
		{"**/x.go", "x.go", file, true},
		{"**/x.go", "a/b/x.go", file, true},
		{"a/**/b", "a/b", file, true},
		{"a/**/b", "a/x/b", file, true},
		{"a/**/b", "a/x/y/b", file, true},
		{"a/**/b", "a/x/y/c", file, false},
		{"a/**/b/**/c", "a/b/x/b/y/c", file, true},
		{"a/**/b/**/c", "a/b/c/b", file, false},
		{"**", "anything/at/all", file, true},
		{"**/**", "x", file, true},
		{"a/**/**/b", "a/b", file, true},
		{"a**b", "axyb", file, true}, // not a whole segment: two *'s
		{"a**b", "ax/yb", file, false},
		// Trailing slash: directories only.
		{"build/", "build", dir, true},
		{"build/", "a/build", dir, true},
		{"build/", "build", file, false},
		{"build/", "build", link, false},
		{"build/", "build/x.o", file, false},
		{"/build/", "a/build", dir, false},
		{"src/gen/", "src/gen", dir, true},
		// Classes and escapes as in path.Match.
		{"[abc].txt", "b.txt", file, true},
		{"[abc].txt", "d.txt", file, false},
		{"[^abc].txt", "d.txt", file, true},
		{"[^abc].txt", "a.txt", file, false},
		{"file[0-9]", "x/file7", file, true},
		{"file[0-9]", "x/filex", file, false},
		{`\*.go`, "*.go", file, true},
		{`\*.go`, "a.go", file, false},
		// * never crosses a slash.
		{"src/*", "src/a/b", file, false},
		{"s*c/a", "src/a", file, true},
		// Invalid patterns match nothing.
		{"[", "[", file, false},
		{"", "", file, false},
	}
	for _, tt := range tests {
		if got := workspace.Match(tt.pattern, tt.path, tt.kind); got != tt.want {
			t.Errorf("Match(%q, %q, %s) = %v, want %v", tt.pattern, tt.path, tt.kind, got, tt.want)
		}
	}
}

// TestMatchAgreesWithPathMatch: for anchored patterns without **, Match is
// path.Match (which never lets * cross a slash).
func TestMatchAgreesWithPathMatch(t *testing.T) {
	patterns := []string{"a/*", "*/b", "a/?", "[ab]/*/c", "*/*"}
	paths := []string{"a/b", "b/b", "a/bb", "a/b/c", "b/x/c", "c", "a/x"}
	for _, pat := range patterns {
		for _, p := range paths {
			want, _ := path.Match(pat, p)
			if got := workspace.Match(pat, p, file); got != want {
				t.Errorf("Match(%q, %q) = %v, path.Match = %v", pat, p, got, want)
			}
		}
	}
}

func TestCheckPattern(t *testing.T) {
	valid := []string{"*.log", "build/", "/TODO", "a/**/b", "**", "[a-z]*", `\[x\]`, "x]", ".env*", "a b"}
	for _, pat := range valid {
		if err := workspace.CheckPattern(pat); err != nil {
			t.Errorf("CheckPattern(%q) = %v, want nil", pat, err)
		}
	}
	invalid := []struct{ pattern, fault string }{
		{"", "empty pattern"},
		{"/", "no path segment"},
		{"//", "no path segment"},
		{"a//b", "empty segment"},
		{"//a", "empty segment"},
		{"a//", "empty segment"},
		{"./a", `"." segment`},
		{"a/../b", `".." segment`},
		{"[", "malformed segment"},
		{"src/[a-", "malformed segment"},
		{"a/[]", "malformed segment"},
		{`x\`, "malformed segment"},
	}
	for _, tt := range invalid {
		err := workspace.CheckPattern(tt.pattern)
		if err == nil {
			t.Errorf("CheckPattern(%q) = nil, want an error", tt.pattern)
			continue
		}
		if !errors.Is(err, path.ErrBadPattern) {
			t.Errorf("CheckPattern(%q) = %v, does not wrap path.ErrBadPattern", tt.pattern, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, fmt.Sprintf("%q", tt.pattern)) || !strings.Contains(msg, tt.fault) {
			t.Errorf("CheckPattern(%q) = %q, want it to name the pattern and %q", tt.pattern, msg, tt.fault)
		}
	}
}

func TestWithGlobs(t *testing.T) {
	base := workspace.Policy{WorkspaceHash: testHash}

	t.Run("invalid", func(t *testing.T) {
		for _, tt := range []struct {
			excludes, includes []string
			want               string
		}{
			{[]string{"ok", "bad["}, nil, `exclude pattern "bad["`},
			{nil, []string{"*.go", ""}, `include pattern ""`},
		} {
			p, err := base.WithGlobs(tt.excludes, tt.includes)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("WithGlobs(%q, %q) error = %v, want one containing %s", tt.excludes, tt.includes, err, tt.want)
			}
			if p.Exclude != nil || p.Include != nil || p.WorkspaceHash != testHash {
				t.Errorf("WithGlobs(%q, %q) failed but did not return the policy unchanged", tt.excludes, tt.includes)
			}
		}
	})

	t.Run("no globs", func(t *testing.T) {
		p, err := base.WithGlobs(nil, nil)
		if err != nil || p.Exclude != nil || p.Include != nil {
			t.Fatalf("WithGlobs(nil, nil) = %+v, %v; want the policy unchanged", p, err)
		}
	})

	t.Run("exclude keeps defaults", func(t *testing.T) {
		p, err := base.WithGlobs([]string{"*.log", "dist/"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			path string
			kind chain.Kind
			want bool
		}{
			{".git", dir, true},
			{"CLAUDE.md", file, true},
			{".tanstack-projected-" + testHash, dir, true},
			{"a/x.log", file, true},
			{"dist", dir, true},
			{"a/dist", dir, true},
			{"dist", file, false}, // dist/ is for directories only
			{"a/x.txt", file, false},
		} {
			if got := p.Skip(tt.path, tt.kind); got != tt.want {
				t.Errorf("Skip(%q, %s) = %v, want %v", tt.path, tt.kind, got, tt.want)
			}
		}
		if p.Include != nil {
			t.Error("WithGlobs with no includes set Include")
		}
	})

	t.Run("exclude wraps custom", func(t *testing.T) {
		custom := workspace.Policy{Exclude: func(path string, _ chain.Kind) bool { return path == "secret" }}
		p, err := custom.WithGlobs([]string{"*.tmp"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Skip("secret", file) || !p.Skip("x.tmp", file) || p.Skip(".git", dir) {
			t.Error("WithGlobs did not OR the globs with the custom Exclude")
		}
	})

	t.Run("include", func(t *testing.T) {
		prev := func(path string, _ chain.Kind) bool { return !strings.HasPrefix(path, "src/vendor/") }
		p, err := workspace.Policy{Include: prev}.WithGlobs(nil, []string{"*.go", "docs/", "/Makefile"})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			path string
			kind chain.Kind
			want bool
		}{
			{"main.go", file, true},
			{"src/a/b.go", file, true},
			{"src/vendor/x.go", file, false}, // the old Include still applies
			{"src/a/b.txt", file, false},
			{"docs/guide/intro.md", file, true}, // an include matching an ancestor dir takes its subtree
			{"docs", file, false},               // docs/ is for directories only
			{"Makefile", file, true},
			{"sub/Makefile", file, false},
			{"src", dir, true}, // directories are always walked
			{"anything", dir, true},
			{"link.go", link, true},
			{"link", link, false},
		} {
			if got := p.Wants(tt.path, tt.kind); got != tt.want {
				t.Errorf("Wants(%q, %s) = %v, want %v", tt.path, tt.kind, got, tt.want)
			}
		}
		// Includes never widen the exclusions.
		if !p.Skip(".git", dir) || p.Admits("node_modules/x.go", file) {
			t.Error("WithGlobs includes changed the default exclusions")
		}
	})
}

// TestGlobPolicy: the flag drops the default exclusions, the globs apply
// either way, and a bad glob is an error.
func TestGlobPolicy(t *testing.T) {
	const file, dir = chain.KindFile, chain.KindDir
	for _, noDefault := range []bool{false, true} {
		p, err := workspace.GlobPolicy(noDefault, []string{"*.log"}, []string{"src/"})
		if err != nil {
			t.Fatalf("GlobPolicy(%v): %v", noDefault, err)
		}
		if !p.NoDefaultExclude == noDefault || p.Skip(".git", dir) == noDefault {
			t.Errorf("GlobPolicy(%v): NoDefaultExclude %v, skips .git %v", noDefault, p.NoDefaultExclude, p.Skip(".git", dir))
		}
		if !p.Admits("src/a.go", file) || p.Admits("src/a.log", file) || p.Admits("b.go", file) {
			t.Errorf("GlobPolicy(%v) does not apply its globs", noDefault)
		}
	}
	if _, err := workspace.GlobPolicy(false, nil, []string{"src/[a-"}); err == nil || !strings.Contains(err.Error(), "include pattern") {
		t.Errorf("GlobPolicy with a bad include: %v, want an error naming it", err)
	}
}

func ExamplePolicy_WithGlobs() {
	// As a command line would build it from
	//	--exclude '*.log' --exclude 'build/' --include 'src/**' --include README.md
	policy, err := workspace.Policy{}.WithGlobs(
		[]string{"*.log", "build/"},
		[]string{"src/**", "README.md"},
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range []struct {
		path string
		kind chain.Kind
	}{
		{"src/main.go", chain.KindFile},
		{"src/debug.log", chain.KindFile},
		{"src/build", chain.KindDir},
		{"src/build/out.o", chain.KindFile},
		{"src/node_modules/x.js", chain.KindFile},
		{"docs/README.md", chain.KindFile},
		{"notes.txt", chain.KindFile},
	} {
		fmt.Printf("%-22s %v\n", e.path, policy.Admits(e.path, e.kind))
	}

	_, err = workspace.Policy{}.WithGlobs([]string{"src/[a-"}, nil)
	fmt.Println(err)
	// Output:
	// src/main.go            true
	// src/debug.log          false
	// src/build              false
	// src/build/out.o        false
	// src/node_modules/x.js  false
	// docs/README.md         true
	// notes.txt              false
	// workspace: exclude pattern "src/[a-": malformed segment "[a-" (unclosed [ class or trailing \): syntax error in pattern
}

// TestSkipRule: every exclusion is named by its rule, and a path nothing
// excludes has none.
func TestSkipRule(t *testing.T) {
	marker := workspace.MarkerPrefix + testHash
	p, err := workspace.Policy{WorkspaceHash: testHash}.WithGlobs([]string{"*.log", "build/", "a/*.log"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		kind chain.Kind
		want string
	}{
		{".git", dir, workspace.RuleGit},
		{"a/.git", file, workspace.RuleGit},
		{"node_modules", dir, workspace.RuleNodeModules},
		{"pkg/node_modules", dir, workspace.RuleNodeModules},
		{".env.local", file, workspace.RuleEnv},
		{".envrc", file, workspace.RuleEnv},
		{"CLAUDE.md", file, workspace.RuleClaudeMD},
		{"GEMINI.md", file, workspace.RuleGeminiMD},
		{".claude/skills/review", dir, workspace.RuleSkills},
		{".codex/skills/x", file, workspace.RuleSkills},
		{".grok/skills/y", link, workspace.RuleSkills},
		{marker, dir, workspace.RuleMarker},
		{"x.log", file, "--exclude *.log"},
		{"a/x.log", file, "--exclude *.log"}, // the first matching glob names the rule
		{"build", dir, "--exclude build/"},
		{"node_modules/x.log", file, workspace.RuleNodeModules}, // the defaults come first
		{"build", file, ""},
		{"src/a.go", file, ""},
		{"a/CLAUDE.md", file, ""},
		{".gitkeep", file, ""},
	} {
		if got := p.SkipRule(tt.path, tt.kind); got != tt.want {
			t.Errorf("SkipRule(%q, %s) = %q, want %q", tt.path, tt.kind, got, tt.want)
		}
		if got := p.Skip(tt.path, tt.kind); got != (tt.want != "") {
			t.Errorf("Skip(%q, %s) = %v, but SkipRule says %q", tt.path, tt.kind, got, tt.want)
		}
	}
	custom := workspace.Policy{Exclude: func(p string, _ chain.Kind) bool { return p == "secret" }, WorkspaceHash: testHash}
	if r := custom.SkipRule("secret", file); r != workspace.RuleExclude {
		t.Errorf("custom Exclude: rule %q", r)
	}
	if r := custom.SkipRule(marker, file); r != workspace.RuleMarker {
		t.Errorf("marker under a custom Exclude: rule %q", r)
	}
	var nilPolicy *workspace.Policy
	if r := nilPolicy.SkipRule("node_modules", dir); r != workspace.RuleNodeModules {
		t.Errorf("nil policy: rule %q", r)
	}
	if r := nilPolicy.SkipRule("src", dir); r != "" {
		t.Errorf("nil policy: src has rule %q", r)
	}
}

// TestNoDefaultExclude: without the default exclusions every path the
// defaults leave out is recorded and admitted, the marker stays protected,
// and the command line's globs still apply, an include taking node_modules.
func TestNoDefaultExclude(t *testing.T) {
	marker := workspace.MarkerPrefix + testHash
	p := workspace.Policy{WorkspaceHash: testHash, NoDefaultExclude: true}
	for _, path := range []string{".git", "node_modules", "a/node_modules", ".env", "CLAUDE.md", "GEMINI.md", ".claude/skills/x"} {
		if r := p.SkipRule(path, dir); r != "" {
			t.Errorf("SkipRule(%q) = %q with no default exclusions", path, r)
		}
		if !p.Admits(path+"/f", file) {
			t.Errorf("Admits(%q/f) = false with no default exclusions", path)
		}
	}
	if r := p.SkipRule(marker, dir); r != workspace.RuleMarker || p.Admits(marker+"/state", file) {
		t.Errorf("the marker is not protected with no default exclusions: rule %q", r)
	}
	q, err := p.WithGlobs([]string{"*.log"}, []string{"node_modules/**"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"node_modules/left-pad/index.js", true},
		{"node_modules/.bin/x", true},
		{"node_modules/debug.log", false}, // excluded by glob
		{"src/a.go", false},               // not included
		{marker, false},
	} {
		if got := q.Admits(tt.path, file); got != tt.want {
			t.Errorf("Admits(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
	// The default policy prunes node_modules before any include is asked.
	d, err := workspace.Policy{}.WithGlobs(nil, []string{"node_modules/**"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Admits("node_modules/left-pad/index.js", file) {
		t.Error("the default policy admitted node_modules")
	}
	// A caller's Exclude replaces the defaults anyway.
	c := workspace.Policy{Exclude: func(string, chain.Kind) bool { return false }, NoDefaultExclude: true}
	if c.Skip(".git", dir) {
		t.Error("a keep-all Exclude with NoDefaultExclude skipped .git")
	}
}

// TestWithGlobsChained: a second WithGlobs adds exclusions (any skips) and
// an include set that must match as well, and leaves the first result as it
// was; the include patterns are reported in order.
func TestWithGlobsChained(t *testing.T) {
	a, err := workspace.Policy{}.WithGlobs([]string{"*.tmp"}, []string{"src/**", "docs/"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.WithGlobs([]string{"*.bak"}, []string{"*.go"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path      string
		wantA     bool
		wantRuleB string
	}{
		{"src/a.go", true, ""},
		{"src/a.txt", true, workspace.RuleNotIncluded},
		{"docs/a.go", true, ""},
		{"lib/a.go", false, workspace.RuleNotIncluded},
		{"src/x.tmp", false, "--exclude *.tmp"},
		{"src/x.bak", true, "--exclude *.bak"},
	} {
		if got := a.Admits(tt.path, file); got != tt.wantA {
			t.Errorf("first Admits(%q) = %v, want %v", tt.path, got, tt.wantA)
		}
		rule := b.SkipRule(tt.path, file)
		if rule == "" && !b.Wants(tt.path, file) {
			rule = workspace.RuleNotIncluded
		}
		if rule != tt.wantRuleB {
			t.Errorf("second: %q left out by %q, want %q", tt.path, rule, tt.wantRuleB)
		}
	}
	if got := b.IncludePatterns(); !slices.Equal(got, []string{"src/**", "docs/", "*.go"}) {
		t.Errorf("IncludePatterns = %q", got)
	}
	if got := a.IncludePatterns(); !slices.Equal(got, []string{"src/**", "docs/"}) {
		t.Errorf("the first policy's IncludePatterns = %q after a second WithGlobs", got)
	}
	// A failed WithGlobs returns the policy unchanged.
	c, err := a.WithGlobs([]string{"ok"}, []string{"bad["})
	if err == nil || !slices.Equal(c.IncludePatterns(), a.IncludePatterns()) || c.Skip("ok", file) {
		t.Errorf("a failed WithGlobs changed the policy (%v)", err)
	}
	var zero workspace.Policy
	if zero.IncludePatterns() != nil {
		t.Error("the zero policy has include patterns")
	}
}
