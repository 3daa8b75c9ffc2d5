// Package workspace holds the pure rules a capture applies to a workspace
// tree: the file policy (SPEC §6.4), secret zeroing (§6.3) and where a
// symlink may point (§10 Q5, which a restore applies to a manifest too).
//
// Nothing here touches a file system. Paths are slash-separated, relative to
// the workspace root and have no leading slash ("src/main.go"); the root
// itself is never asked about.
package workspace

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/sbxdb/sbxdb/chain"
)

// MarkerPrefix starts the name of the projection marker, the root-level entry
// ".tanstack-projected-<workspaceHash>" that a host places in a workspace.
// It belongs to the host, so no policy may capture or restore over it.
const MarkerPrefix = ".tanstack-projected-"

// Policy decides which workspace paths a capture records and a restore
// accepts. Capture and restore must use the same policy (SPEC §10 Q22), or a
// restore would reject what the capture recorded.
//
// The zero value is the default policy, and a nil *Policy behaves like it.
// The per-path order is that of SPEC §6.4: protected marker, then Exclude
// (Skip), then Include for files (Wants).
type Policy struct {
	// Exclude, when non-nil, replaces the default exclusions
	// (DefaultExclude(WorkspaceHash)); wrap DefaultExclude to extend them.
	// An excluded directory is not walked at all, so nothing beneath it is
	// inspected.
	Exclude func(path string, kind chain.Kind) bool
	// Include, when non-nil, must return true for a file to be recorded.
	// Directories are always walked, whatever it says, so that files beneath
	// them can still match.
	Include func(path string, kind chain.Kind) bool
	// WorkspaceHash names the protected root entry MarkerPrefix+WorkspaceHash;
	// "" means unknown, and then no entry is protected.
	WorkspaceHash string
	// NoDefaultExclude drops the default exclusions when Exclude is nil:
	// node_modules, .git, .env*, CLAUDE.md and the rest are recorded like
	// any other path. The projection marker stays protected, and exclude
	// globs added by WithGlobs still apply. With Exclude set it changes
	// nothing, since Exclude replaces the defaults anyway.
	NoDefaultExclude bool

	// excludes are WithGlobs' exclude globs: any match skips a path.
	excludes []glob
	// includes are WithGlobs' include sets, one per call with includes: a
	// file must match a glob of every set.
	includes [][]glob
	// ignores are WithIgnore's ignore files, in order: a path any of them
	// ignores is skipped.
	ignores []ignoreSet
}

// Rule names, as SkipRule returns them and a capture counts the entries it
// left out (sbxdb.CaptureStats.ExcludedByRule). An exclude glob's rule is
// ExcludeGlobRule(pattern).
const (
	RuleGit         = ".git"         // a ".git" segment
	RuleNodeModules = "node_modules" // a "node_modules" segment
	RuleEnv         = ".env*"        // a segment starting with ".env"
	RuleClaudeMD    = "CLAUDE.md"    // the root CLAUDE.md
	RuleGeminiMD    = "GEMINI.md"    // the root GEMINI.md
	RuleSkills      = "skills"       // .claude/skills/<name>, .codex/skills/<name>, .grok/skills/<name>
	RuleMarker      = "marker"       // the projection marker, protected under any policy
	RuleExclude     = "exclude"      // the caller's Exclude func
	// RuleStore names a directory of the workspace that is an sbxdb
	// store's (its lock file and database or blob directory): a capture
	// never records one, under any policy. SkipRule never returns it.
	RuleStore = "sbxdb store"
	// RuleNotIncluded names an entry, not a directory, that no include matched
	// (Wants false); SkipRule never returns it.
	RuleNotIncluded = "not included"
)

// ExcludeGlobRule is the rule name of an exclude glob given to WithGlobs:
// "--exclude " and the pattern, as the command line spells it.
func ExcludeGlobRule(pattern string) string { return "--exclude " + pattern }

// DefaultExclude returns the default exclusion of SPEC §6.4
// (defaultSandboxSnapshotPolicy in the reference). It excludes a path when
//
//   - any segment is ".git" or "node_modules", or starts with ".env";
//   - it is the root entry MarkerPrefix+workspaceHash (only when
//     workspaceHash is not "");
//   - it is the root "CLAUDE.md" or "GEMINI.md";
//   - it has exactly three segments and is ".claude/skills/<name>",
//     ".codex/skills/<name>" or ".grok/skills/<name>".
//
// The kind is ignored: a ".git" file (a worktree link) is excluded as surely
// as a ".git" directory. Look-alikes such as ".gitkeep", "node_modules.txt",
// "a/CLAUDE.md" or ".claude/skills/x/SKILL.md" are not excluded by this
// function, though the last is never reached by a walk because its parent
// directory is.
func DefaultExclude(workspaceHash string) func(path string, kind chain.Kind) bool {
	return func(p string, _ chain.Kind) bool {
		return isMarker(p, workspaceHash) || defaultExcluded(p)
	}
}

// isMarker reports whether p is the projection marker of a known hash. It
// compares in two steps so that no string is built per call.
func isMarker(p, workspaceHash string) bool {
	return workspaceHash != "" &&
		len(p) == len(MarkerPrefix)+len(workspaceHash) &&
		strings.HasPrefix(p, MarkerPrefix) &&
		p[len(MarkerPrefix):] == workspaceHash
}

// defaultExcluded is DefaultExclude without the marker.
func defaultExcluded(p string) bool { return defaultRule(p) != "" }

// defaultRule returns the rule of the default exclusion that excludes p,
// marker aside, or "". It walks the segments in place because it runs once
// per entry of every capture; the leftmost excluded segment names the rule.
func defaultRule(p string) string {
	switch p {
	case "CLAUDE.md":
		return RuleClaudeMD
	case "GEMINI.md":
		return RuleGeminiMD
	}
	nseg := 0
	for rest := p; ; {
		seg, tail, more := strings.Cut(rest, "/")
		nseg++
		switch {
		case seg == ".git":
			return RuleGit
		case seg == "node_modules":
			return RuleNodeModules
		case strings.HasPrefix(seg, ".env"):
			return RuleEnv
		}
		if !more {
			break
		}
		rest = tail
	}
	if nseg != 3 {
		return ""
	}
	for _, dir := range [...]string{".claude/skills/", ".codex/skills/", ".grok/skills/"} {
		if strings.HasPrefix(p, dir) {
			return RuleSkills
		}
	}
	return ""
}

// Skip reports whether path is not recorded and, for a directory, not walked
// at all: SkipRule(path, kind) != "".
func (p *Policy) Skip(path string, kind chain.Kind) bool {
	return p.SkipRule(path, kind) != ""
}

// SkipRule returns the name of the rule that skips path (see the Rule
// constants), or "" when it is not skipped. The projection marker is always
// skipped (RuleMarker), under any policy, even when a caller's Exclude
// returns false for it; then Exclude decides (RuleExclude), or the default
// exclusion when Exclude is nil and NoDefaultExclude is false; then the
// exclude globs of WithGlobs, the first matching one naming the rule
// (ExcludeGlobRule); then the ignore files of WithIgnore, in order, each
// naming its rule. The rule names are constants or made once by WithGlobs,
// so asking costs no more than Skip did.
func (p *Policy) SkipRule(path string, kind chain.Kind) string {
	if p == nil {
		return defaultRule(path)
	}
	if isMarker(path, p.WorkspaceHash) {
		return RuleMarker
	}
	if p.Exclude != nil {
		if p.Exclude(path, kind) {
			return RuleExclude
		}
	} else if !p.NoDefaultExclude {
		if r := defaultRule(path); r != "" {
			return r
		}
	}
	if len(p.excludes) > 0 || len(p.ignores) > 0 {
		segs := strings.Split(path, "/")
		for i := range p.excludes {
			if p.excludes[i].match(segs, kind) {
				return p.excludes[i].rule
			}
		}
		for i := range p.ignores {
			if p.ignores[i].ignored(segs, kind) {
				return p.ignores[i].rule
			}
		}
	}
	return ""
}

// Wants reports whether an entry that Skip did not skip is recorded. A
// directory is always wanted, because it must be walked for its files to be
// found. Any other kind is wanted when Include is nil or returns true, and
// it matches every include set of WithGlobs; the kind is passed on so that
// Include may treat symlinks differently from regular files. An entry not
// wanted is counted under RuleNotIncluded.
func (p *Policy) Wants(path string, kind chain.Kind) bool {
	if kind == chain.KindDir || p == nil || (p.Include == nil && len(p.includes) == 0) {
		return true
	}
	if len(p.includes) > 0 {
		segs := strings.Split(path, "/")
		for _, set := range p.includes {
			if !matchSelfOrAncestor(set, segs, kind) {
				return false
			}
		}
	}
	return p.Include == nil || p.Include(path, kind)
}

// IncludePatterns returns the include globs given to WithGlobs, in order;
// nil when there are none.
func (p *Policy) IncludePatterns() []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, set := range p.includes {
		for _, g := range set {
			out = append(out, g.pattern)
		}
	}
	return out
}

// Admits reports whether a manifest entry at path is allowed on restore: no
// ancestor directory is skipped, the entry itself is not skipped, and it is
// wanted. It is the capture's walk replayed on one path, so a restore accepts
// exactly what a capture under the same policy could have recorded. Admits
// does not check the syntax of path; a restore validates that first.
func (p *Policy) Admits(path string, kind chain.Kind) bool {
	for i := 0; i < len(path); i++ {
		if path[i] == '/' && p.Skip(path[:i], chain.KindDir) {
			return false
		}
	}
	return !p.Skip(path, kind) && p.Wants(path, kind)
}

// WithGlobs returns a copy of p extended by glob patterns (see Match), as a
// command line's --exclude and --include flags supply them.
//
// The result skips what p skips (its Exclude, or the default exclusion
// unless NoDefaultExclude) and, besides, any path an exclude glob matches;
// like every exclusion this applies to directories too, so an excluded
// directory's subtree is not walked. SkipRule names such a path's rule
// ExcludeGlobRule(pattern).
//
// When includes is non-empty, the result also requires a non-directory
// entry to match at least one of them, on top of what p requires. A glob that
// matches one of the entry's ancestor directories counts as a match, as in
// .gitignore, so "src/" or "docs" takes a whole subtree. Directories
// themselves are always included (they are walked, not recorded).
//
// Exclude, Include, WorkspaceHash and NoDefaultExclude are kept as they are
// and may still be changed on the result; the marker stays protected under
// whatever hash it carries. An invalid pattern is an error naming it, and p
// is returned unchanged.
func (p Policy) WithGlobs(excludes, includes []string) (Policy, error) {
	exc, err := compileAll("exclude", excludes)
	if err != nil {
		return p, err
	}
	inc, err := compileAll("include", includes)
	if err != nil {
		return p, err
	}
	out := p
	if len(exc) > 0 {
		for i := range exc {
			exc[i].rule = ExcludeGlobRule(exc[i].pattern)
		}
		out.excludes = append(slices.Clip(p.excludes), exc...)
	}
	if len(inc) > 0 {
		out.includes = append(slices.Clip(p.includes), inc)
	}
	return out, nil
}

// GlobPolicy returns the policy a command line or a request describes:
// the default policy, without its exclusions when noDefaultExclude is set
// (Policy.NoDefaultExclude), extended by the exclude and include globs
// (Policy.WithGlobs). An invalid pattern is an error naming it.
func GlobPolicy(noDefaultExclude bool, excludes, includes []string) (Policy, error) {
	return Policy{NoDefaultExclude: noDefaultExclude}.WithGlobs(excludes, includes)
}

// matchSelfOrAncestor reports whether any glob matches the entry segs of the
// given kind or one of its ancestor directories.
func matchSelfOrAncestor(globs []glob, segs []string, kind chain.Kind) bool {
	for _, g := range globs {
		if g.match(segs, kind) {
			return true
		}
		for n := len(segs) - 1; n > 0; n-- {
			if g.match(segs[:n], chain.KindDir) {
				return true
			}
		}
	}
	return false
}

func compileAll(what string, patterns []string) ([]glob, error) {
	globs := make([]glob, 0, len(patterns))
	for _, pat := range patterns {
		g, err := compile(pat)
		if err != nil {
			return nil, fmt.Errorf("workspace: %s %w", what, err)
		}
		globs = append(globs, g)
	}
	return globs, nil
}

// Match reports whether a slash-separated relative path of the given kind
// matches a glob pattern.
//
// Within a segment, `*` matches any run of non-slash characters, `?` one
// character, and `[...]` a class, all as in path.Match (`\` escapes). A
// segment that is exactly `**` matches zero or more whole segments, so
// "a/**/b" matches "a/b" and "a/x/y/b", and "build/**" matches "build" and
// everything beneath it.
//
// A pattern without a slash matches the path's last segment at any depth, as
// in .gitignore: "*.log" matches "x.log" and "a/b/x.log". A pattern with a
// slash is anchored at the root: "src/*.go" matches "src/a.go" but not
// "lib/src/a.go". A leading "/" anchors a slash-free pattern ("/TODO"), and a
// trailing "/" makes the pattern match directories only ("build/").
//
// Match matches path itself, not its ancestors: "build/" does not match
// "build/x.o". A walk never sees "build/x.o" once "build" is skipped, and
// Admits checks ancestors. An invalid pattern (see CheckPattern) matches
// nothing.
func Match(pattern, path string, kind chain.Kind) bool {
	g, err := compile(pattern)
	if err != nil {
		return false
	}
	return g.match(strings.Split(path, "/"), kind)
}

// CheckPattern reports whether pattern is a valid glob for Match. The error
// names the pattern and the fault: empty pattern, empty, "." or ".."
// segment (no workspace path has one, so such a pattern could never match),
// or a malformed class or escape. The error wraps path.ErrBadPattern.
func CheckPattern(pattern string) error {
	if _, err := compile(pattern); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// glob is a compiled pattern: anchored segments, where an unanchored pattern
// has been given a leading "**".
type glob struct {
	segs    []string
	dirOnly bool
	pattern string // as given
	rule    string // an exclude glob's rule name (ExcludeGlobRule)
}

func compile(pattern string) (glob, error) {
	bad := func(why string) (glob, error) {
		return glob{}, fmt.Errorf("pattern %q: %s: %w", pattern, why, path.ErrBadPattern)
	}
	if pattern == "" {
		return bad("empty pattern")
	}
	p, dirOnly := strings.CutSuffix(pattern, "/")
	p, anchored := strings.CutPrefix(p, "/")
	if p == "" {
		return bad("no path segment")
	}
	if !anchored && !strings.Contains(p, "/") {
		p = "**/" + p
	}
	g := glob{dirOnly: dirOnly, pattern: pattern}
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "":
			return bad("empty segment")
		case ".", "..":
			return bad(fmt.Sprintf("%q segment", seg))
		case "**":
			// Consecutive "**" mean the same as one and would only make
			// matching slower.
			if n := len(g.segs); n > 0 && g.segs[n-1] == "**" {
				continue
			}
		default:
			// path.Match checks the whole pattern even when the name is
			// rejected early, so matching "" validates the segment.
			if _, err := path.Match(seg, ""); err != nil {
				return bad(fmt.Sprintf("malformed segment %q (unclosed [ class or trailing \\)", seg))
			}
		}
		g.segs = append(g.segs, seg)
	}
	return g, nil
}

// match reports whether the path split into segs, of the given kind, matches
// g. It is the classic single-wildcard algorithm with "**" as the wildcard
// and every other segment matching exactly one path segment: on a mismatch it
// backtracks only to the latest "**", letting it absorb one more segment.
// That is enough, because an earlier "**" could only absorb segments the
// latest one can absorb as well, so the run time is O(len(g.segs)·len(segs)).
func (g glob) match(segs []string, kind chain.Kind) bool {
	if g.dirOnly && kind != chain.KindDir {
		return false
	}
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(segs) {
		if pi < len(g.segs) {
			if g.segs[pi] == "**" {
				starP, starS = pi, si
				pi++
				continue
			}
			if ok, _ := path.Match(g.segs[pi], segs[si]); ok {
				pi++
				si++
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		pi, si = starP+1, starS
	}
	for pi < len(g.segs) && g.segs[pi] == "**" {
		pi++
	}
	return pi == len(g.segs)
}
