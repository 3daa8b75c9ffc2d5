package engine

import (
	"context"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/workspace"
)

// walked is one manifest entry found by the walk. For a file, the capture
// fills in sum, key and size once it knows them (from the stat cache, or by
// reading the file).
type walked struct {
	path   string
	kind   chain.Kind
	exec   bool
	target string   // symlinks
	st     fileStat // files: as the walk found them
	sum    [32]byte // files: sha256 of the bytes stored
	key    string   // files: the blob key of sum, made once for the index check and the manifest
	size   int64    // files: their length
}

// walkTree lists what a capture records of the tree at root under pol
// (SPEC §6.4, §10 Q5): regular files, directories with nothing recorded
// beneath them, and symlinks, sorted by path bytes. Directories are read in
// parallel; an excluded directory is not read at all.
// A directory whose absolute path is skip (the store's own directory, when
// it lies inside the workspace) is not walked either.
func walkTree(ctx context.Context, root, skip string, pol *workspace.Policy, allowEscape bool) ([]walked, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, chain.Errorf(chain.ErrInvalidWorkspace, "workspace %s: %v", root, err)
	}
	if !st.IsDir() {
		return nil, chain.Errorf(chain.ErrInvalidWorkspace, "workspace %s is not a directory", root)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &walker{ctx: ctx, root: root, skip: skip, pol: pol,
		sem: make(chan struct{}, 2*runtime.GOMAXPROCS(0)), cancel: cancel}
	top := &dirNode{}
	w.wg.Add(1)
	go w.dir(top)
	w.wg.Wait()
	if w.err != nil {
		return nil, w.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := top.flatten(make([]walked, 0, w.entries.Load()))
	if !allowEscape {
		links := map[string]string{}
		for i := range out {
			if out[i].kind == chain.KindSymlink {
				links[out[i].path] = out[i].target
			}
		}
		if err := checkLinks(links); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// dirNode is one directory's part of the walk, filled in by the goroutine
// that reads it.
type dirNode struct {
	rel     string
	found   []walked   // its files and symlinks
	subdirs []*dirNode // the subdirectories walked
}

// empty reports whether nothing is recorded beneath the directory, which
// makes it an entry itself (the root excepted).
func (n *dirNode) empty() bool { return len(n.found) == 0 && len(n.subdirs) == 0 }

// flatten appends the entries of n's tree to out in path byte order. The
// whole list is never sorted: moving the entries (~150 bytes each) was 8 %
// of an unchanged capture's CPU. Siblings are sorted instead, by name, a
// subdirectory by its name and a slash: its entries' paths all start so,
// and as no name holds a slash, comparing a sibling name with that prefix
// decides its order against all of them. An empty directory, itself an
// entry, sorts by its bare name.
func (n *dirNode) flatten(out []walked) []walked {
	if n.rel != "" && n.empty() {
		return append(out, walked{path: n.rel, kind: chain.KindDir})
	}
	type child struct {
		key string
		i   int
		dir bool
	}
	kids := make([]child, 0, len(n.found)+len(n.subdirs))
	skip := len(n.rel) + 1
	if n.rel == "" {
		skip = 0
	}
	for i := range n.found {
		kids = append(kids, child{key: n.found[i].path[skip:], i: i})
	}
	for i, d := range n.subdirs {
		key := d.rel[skip:]
		if !d.empty() {
			key += "/"
		}
		kids = append(kids, child{key: key, i: i, dir: true})
	}
	slices.SortFunc(kids, func(a, b child) int { return strings.Compare(a.key, b.key) })
	for _, k := range kids {
		if k.dir {
			out = n.subdirs[k.i].flatten(out)
		} else {
			out = append(out, n.found[k.i])
		}
	}
	return out
}

type walker struct {
	ctx    context.Context
	cancel context.CancelFunc
	root   string
	skip   string
	pol    *workspace.Policy
	sem    chan struct{} // bounds the directories read at once
	wg     sync.WaitGroup

	entries atomic.Int64 // files and symlinks found, to size the list

	mu  sync.Mutex
	err error
}

func (w *walker) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.cancel()
}

// dir reads the directory n.rel ("" is the root) into n and starts a
// goroutine for each subdirectory to walk.
func (w *walker) dir(n *dirNode) {
	defer w.wg.Done()
	w.sem <- struct{}{}
	found, subdirs, err := w.read(n.rel)
	<-w.sem
	if err != nil {
		w.fail(err)
		return
	}
	w.entries.Add(int64(len(found) + len(subdirs)))
	n.found = found
	n.subdirs = make([]*dirNode, len(subdirs))
	for i, sub := range subdirs {
		n.subdirs[i] = &dirNode{rel: sub}
		w.wg.Add(1)
		go w.dir(n.subdirs[i])
	}
}

func (w *walker) read(rel string) (found []walked, subdirs []string, err error) {
	if err := w.ctx.Err(); err != nil {
		return nil, nil, err
	}
	abs := filepath.Join(w.root, filepath.FromSlash(rel))
	f, err := vfs.Open(abs)
	if err != nil {
		return nil, nil, chain.Errorf(chain.ErrInvalidWorkspace, "reading directory %q: %v", rel, err)
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, nil, chain.Errorf(chain.ErrInvalidWorkspace, "reading directory %q: %v", rel, err)
	}
	for _, d := range ents {
		name := d.Name()
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		if err := checkName(p, name); err != nil {
			return nil, nil, err
		}
		t := d.Type()
		switch {
		case t.IsDir():
			if !w.pol.Skip(p, chain.KindDir) && filepath.Join(abs, name) != w.skip {
				subdirs = append(subdirs, p)
			}
		case t.IsRegular():
			if w.pol.Skip(p, chain.KindFile) || !w.pol.Wants(p, chain.KindFile) {
				continue // not read, not even stat'ed
			}
			st, err := lstatAt(f, name)
			if err != nil {
				return nil, nil, chain.Errorf(chain.ErrInvalidWorkspace, "lstat %q: %v", p, err)
			}
			found = append(found, walked{path: p, kind: chain.KindFile, exec: st.mode&0o111 != 0, st: st})
		case t&os.ModeSymlink != 0:
			if w.pol.Skip(p, chain.KindSymlink) || !w.pol.Wants(p, chain.KindSymlink) {
				continue
			}
			target, err := os.Readlink(filepath.Join(abs, name))
			if err != nil {
				return nil, nil, chain.Errorf(chain.ErrInvalidWorkspace, "readlink %q: %v", p, err)
			}
			if err := checkLinkTarget(p, target); err != nil {
				return nil, nil, err
			}
			found = append(found, walked{path: p, kind: chain.KindSymlink, target: target})
		default:
			if w.pol.Skip(p, chain.KindFile) {
				continue
			}
			return nil, nil, chain.Errorf(chain.ErrUnsupportedEntry, "%q is a %v, not a regular file, directory or symlink", p, t)
		}
	}
	return found, subdirs, nil
}

// checkName refuses names a manifest path cannot hold (SPEC §1.2) and names
// that are not UTF-8, which the JSON form of a checkpoint cannot carry. A
// directory entry's name is never empty, ".", ".." or holds "/" or NUL, so
// of the path rules only the backslash and, at the root, the drive prefix
// ("C:") can fail; the whole-path check runs for root names only.
func checkName(p, name string) error {
	if strings.ContainsAny(name, "\\\x00") || !utf8.ValidString(name) {
		return chain.Errorf(chain.ErrUnsupportedEntry, "%q: a file name with a backslash, NUL or invalid UTF-8 cannot be recorded", p)
	}
	if p == name && chain.ValidatePath(p) != nil {
		return chain.Errorf(chain.ErrInvalidWorkspace, "%q is not a valid manifest path", p)
	}
	return nil
}

// checkLinkTarget applies the form rules of SPEC §10 Q5 to a symlink
// target: non-empty, UTF-8, no NUL. Where it may point is checkLinks' job.
func checkLinkTarget(linkPath, target string) error {
	if target == "" || strings.IndexByte(target, 0) >= 0 || !utf8.ValidString(target) {
		return chain.Errorf(chain.ErrUnsupportedEntry, "symlink %q has an empty or invalid target", linkPath)
	}
	return nil
}

// checkLinks refuses a symlink whose target is absolute or leaves the root
// (SPEC §10 Q5), by itself or when followed through the tree's other
// symlinks: with a -> "." and b -> "a/..", each looks inside on its own,
// yet b is the root's parent (found by FuzzRestore). links maps each
// symlink's path to its target; each has passed checkLinkTarget.
func checkLinks(links map[string]string) error {
	for _, p := range slices.Sorted(maps.Keys(links)) {
		if linkLeaves(links, p) {
			return chain.Errorf(chain.ErrUnsupportedEntry, "symlink %q -> %q points outside the workspace", p, links[p])
		}
	}
	return nil
}

// linkLeaves reports whether the symlink at link leaves the root or
// reaches an absolute target: lexically, by its own target (SPEC §10 Q5),
// or followed as the kernel follows it through the other symlinks of links
// (at most 40 hops, its limit). A loop the kernel meets points nowhere
// (ELOOP), but only after the lexical rule: a -> "a/../.." is a loop to the
// kernel and the root's parent on paper, so it leaves (found by FuzzRestore).
func linkLeaves(links map[string]string, link string) bool {
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
