package workspace

import (
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb/chain"
)

// Where a symlink may point (SPEC §10 Q5): the rule a capture applies to
// the symlinks it finds and a restore to the symlinks a manifest names,
// before either writes anything. Pure functions of the paths and targets.

// CheckLinkTarget applies the form rules of SPEC §10 Q5 to a symlink
// target: non-empty, UTF-8, no NUL. Where it may point is CheckLinks' job.
func CheckLinkTarget(linkPath, target string) error {
	if target == "" || strings.IndexByte(target, 0) >= 0 || !utf8.ValidString(target) {
		return chain.Errorf(chain.ErrUnsupportedEntry, "symlink %q has an empty or invalid target", linkPath)
	}
	return nil
}

// CheckLinks refuses a symlink whose target is absolute or leaves the root
// (SPEC §10 Q5), by itself or when followed through the tree's other
// symlinks: with a -> "." and b -> "a/..", each looks inside on its own,
// yet b is the root's parent. links maps each symlink's path to its target;
// each has passed CheckLinkTarget.
func CheckLinks(links map[string]string) error {
	for _, p := range slices.Sorted(maps.Keys(links)) {
		if LinkLeaves(links, p) {
			return chain.Errorf(chain.ErrUnsupportedEntry, "symlink %q -> %q points outside the workspace", p, links[p])
		}
	}
	return nil
}

// LinkLeaves reports whether the symlink at link leaves the root or
// reaches an absolute target: lexically, by its own target (SPEC §10 Q5),
// or followed as the kernel follows it through the other symlinks of links
// (at most 40 hops, its limit). A loop the kernel meets points nowhere
// (ELOOP), but only after the lexical rule: a -> "a/../.." is a loop to the
// kernel and the root's parent on paper, so it leaves.
func LinkLeaves(links map[string]string, link string) bool {
	if isAbsTarget(links[link]) {
		return true
	}
	if r := path.Join(path.Dir(link), links[link]); r == ".." || strings.HasPrefix(r, "../") {
		return true
	}
	comps := append(strings.Split(path.Dir(link), "/"), strings.Split(links[link], "/")...)
	var cur []string
	for hops, i := 0, 0; i < len(comps); i++ {
		switch c := comps[i]; c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return true
			}
			cur = cur[:len(cur)-1]
			continue
		default:
			cur = append(cur, c)
		}
		next, ok := links[strings.Join(cur, "/")]
		if !ok {
			continue
		}
		if hops++; hops > 40 {
			return false
		}
		if isAbsTarget(next) {
			return true
		}
		// Replace the link by its target, relative to the link's
		// directory, and walk again from the root.
		rest := comps[i+1:]
		comps = append(append(slices.Clone(cur[:len(cur)-1]), strings.Split(next, "/")...), rest...)
		cur, i = nil, -1
	}
	return false
}

// isAbsTarget reports whether a symlink target is absolute, in POSIX form
// or Windows' (a leading backslash).
func isAbsTarget(target string) bool {
	return path.IsAbs(target) || strings.HasPrefix(target, "\\")
}
