package workspace

import (
	"fmt"
	"strings"

	"github.com/sbxdb/sbxdb/chain"
)

// IgnoreFileName is the ignore file a capture honours in the workspace
// root: gitignore syntax, its rule named RuleIgnoreFile.
const IgnoreFileName = ".sbxdbignore"

// RuleIgnoreFile names the entries the workspace's .sbxdbignore left out
// (sbxdb.CaptureStats.ExcludedByRule).
const RuleIgnoreFile = IgnoreFileName

// ignoreSet is the patterns of one ignore file, in order. As in git, the
// last pattern that matches a path decides: it is ignored unless that
// pattern is negated ("!").
type ignoreSet struct {
	rule string
	pats []ignorePat
}

type ignorePat struct {
	g      glob
	negate bool
}

// ignored reports whether the set ignores the path split into segs.
func (s *ignoreSet) ignored(segs []string, kind chain.Kind) bool {
	for i := len(s.pats) - 1; i >= 0; i-- {
		if s.pats[i].g.match(segs, kind) {
			return !s.pats[i].negate
		}
	}
	return false
}

// ParseIgnore returns the patterns of an ignore file in gitignore syntax:
// one per line; blank lines and lines starting with "#" are skipped; a
// leading "!" negates (re-includes what an earlier pattern ignored; as in
// git, nothing beneath an ignored directory can be re-included, since it
// is not walked); "\#" and "\!" start a pattern with those characters;
// unescaped trailing spaces are dropped. The patterns are Match's globs.
// An invalid one is an error naming its line.
func ParseIgnore(content string) (patterns []string, err error) {
	for n, line := range strings.Split(content, "\n") {
		line = strings.TrimSuffix(line, "\r")
		for strings.HasSuffix(line, " ") && !strings.HasSuffix(line, "\\ ") {
			line = line[:len(line)-1]
		}
		if line == "" || line[0] == '#' {
			continue
		}
		p := strings.TrimPrefix(line, "!")
		if _, err := compile(unescapeLead(p)); err != nil {
			return nil, fmt.Errorf("workspace: line %d: %w", n+1, err)
		}
		patterns = append(patterns, line)
	}
	return patterns, nil
}

// unescapeLead drops the backslash of a leading "\#" or "\!".
func unescapeLead(p string) string {
	if strings.HasPrefix(p, `\#`) || strings.HasPrefix(p, `\!`) {
		return p[1:]
	}
	return p
}

// WithIgnore returns a copy of p that also skips what the ignore file's
// patterns (ParseIgnore's, a leading "!" negating) ignore, naming the
// rule rule: ".sbxdbignore" (RuleIgnoreFile), "--exclude-file FILE". The
// set applies after p's other exclusions, and a negation re-includes
// only what the set itself ignored: it cannot undo the default
// exclusions or an exclude glob. An invalid pattern is an error and p is
// returned unchanged.
func (p Policy) WithIgnore(rule string, patterns []string) (Policy, error) {
	set := ignoreSet{rule: rule}
	for _, pat := range patterns {
		neg := strings.HasPrefix(pat, "!")
		g, err := compile(unescapeLead(strings.TrimPrefix(pat, "!")))
		if err != nil {
			return p, fmt.Errorf("workspace: %s: %w", rule, err)
		}
		set.pats = append(set.pats, ignorePat{g: g, negate: neg})
	}
	if len(set.pats) == 0 {
		return p, nil
	}
	out := p
	out.ignores = append(out.ignores[:len(out.ignores):len(out.ignores)], set)
	return out, nil
}
