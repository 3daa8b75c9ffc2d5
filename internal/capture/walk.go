package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/workspace"
)

// walked is one manifest entry found by the walk. For a file, the capture
// fills in sum, key and size once it knows them (from the stat cache, or by
// reading the file), and replaces st by the stat of the bytes it read.
type walked struct {
	path   string
	kind   chain.Kind
	exec   bool
	target string   // symlinks
	st     fileStat // files: as the walk found them, then as read
	dev    uint64   // files: the device of st
	sum    [32]byte // files: sha256 of the bytes stored
	key    string   // files: the blob key of sum, made once for the index check and the manifest
	size   int64    // files: their length
	// Files: gone is set when the file vanished before it could be read
	// (it is left out); unstable when it kept changing while read (its
	// digest is recorded, never cached).
	gone, unstable bool
}

// walkInput is what walkTree needs.
type walkInput struct {
	root string   // the workspace's absolute path, for messages
	dir  *os.File // the workspace, opened: every name is opened beneath it
	// skip is the absolute path of a directory not to walk (the store's
	// own, when it lies inside the workspace).
	skip        string
	names       *StoreNames // the names a store keeps in its directory; nil for none
	pol         *workspace.Policy
	allowEscape bool
	// skipUnsupported leaves out, with a warning in changes, what would
	// otherwise fail the walk as unsupported or unreadable (see
	// CaptureInput.SkipUnsupported).
	skipUnsupported bool
	// changes receives the directories and files that vanish while they
	// are walked, where a strict log makes that an error, and the entries
	// skipped as unsupported.
	changes *changeLog
	// point runs a test hook by name (Store.Point); nil runs none.
	point func(name string) error
}

// walkTree lists what a capture records of the tree beneath in.dir under
// in.pol (SPEC §6.4, §10 Q5): regular files, directories with nothing
// recorded beneath them, and symlinks, sorted by path bytes. Directories are
// read in parallel; an excluded directory is not read at all. excluded
// counts the entries the policy left out by rule (workspace.Policy.SkipRule,
// workspace.RuleNotIncluded); an excluded directory counts once. The
// workspace's .sbxdbignore, if any, extends in.pol (withIgnoreFile).
//
// Every directory is opened beneath in.dir following no symlink on the
// way (vfs.OpenDirBeneath), and each name in it is stat'ed and read
// relative to the directory's descriptor: a directory or file renamed to a
// symlink meanwhile is never followed out of the tree. A directory or file
// that vanishes (or becomes a symlink) between being listed and being
// opened is left out and reported to in.changes.
func walkTree(ctx context.Context, in *walkInput) (tree []*walked, excluded map[string]int, err error) {
	var pol workspace.Policy // a nil in.pol is the default policy, as the zero value is
	if in.pol != nil {
		pol = *in.pol
	}
	pol, err = withIgnoreFile(in.dir, pol)
	if err != nil {
		return nil, nil, err
	}
	in.pol = &pol
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	point := in.point
	if point == nil {
		point = func(string) error { return nil }
	}
	w := &walker{ctx: ctx, in: in, point: point,
		sem: make(chan struct{}, 2*runtime.GOMAXPROCS(0)), cancel: cancel, excluded: map[string]int{}}
	top := &dirNode{}
	w.wg.Add(1)
	go w.dir(top)
	w.wg.Wait()
	if w.err != nil {
		return nil, nil, w.err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	out := top.flatten(make([]*walked, 0, w.entries.Load()))
	if !in.allowEscape {
		out, err = w.dropEscapingLinks(out)
		if err != nil {
			return nil, nil, err
		}
	}
	return out, w.excluded, nil
}

// dropEscapingLinks refuses the tree if a symlink in it leaves the root
// (workspace.CheckLinks) or, when unsupported entries are skipped, leaves out each
// such symlink with a warning. The check repeats on the symlinks that
// remain until none leaves, so what is recorded always passes workspace.CheckLinks.
func (w *walker) dropEscapingLinks(tree []*walked) ([]*walked, error) {
	links := map[string]string{}
	for i := range tree {
		if tree[i].kind == chain.KindSymlink {
			links[tree[i].path] = tree[i].target
		}
	}
	if !w.in.skipUnsupported || len(links) == 0 {
		return tree, workspace.CheckLinks(links)
	}
	dropped := map[string]bool{}
	for {
		var leaving []string
		for _, p := range slices.Sorted(maps.Keys(links)) {
			if workspace.LinkLeaves(links, p) {
				leaving = append(leaving, p)
			}
		}
		if len(leaving) == 0 {
			break
		}
		for _, p := range leaving {
			w.in.changes.skip(p, fmt.Sprintf("a symlink to %q, outside the workspace", links[p]))
			dropped[p] = true
		}
		for _, p := range leaving {
			delete(links, p)
		}
	}
	if len(dropped) == 0 {
		return tree, nil
	}
	for i := range tree {
		if dropped[tree[i].path] {
			tree[i].gone = true
		}
	}
	return dropVanished(tree), nil
}

// openWorkspace opens the workspace root for a capture. The root itself
// may be reached through symlinks: it is the caller's choice.
func openWorkspace(root string) (*os.File, error) {
	d, err := vfs.OpenDir(root)
	if err != nil {
		if st, serr := os.Stat(root); serr == nil && !st.IsDir() {
			return nil, chain.Errorf(chain.ErrInvalidWorkspace, "workspace %s is not a directory", root)
		}
		return nil, chain.Errorf(chain.ErrInvalidWorkspace, "workspace %s: %s", root, errReason(err))
	}
	return d, nil
}

// dirNode is one directory's part of the walk, filled in by the goroutine
// that reads it.
type dirNode struct {
	rel     string
	found   []walked   // its files and symlinks
	subdirs []*dirNode // the subdirectories walked
	gone    bool       // it vanished before it could be read: left out
}

// empty reports whether nothing is recorded beneath the directory, which
// makes it an entry itself (the root excepted).
func (n *dirNode) empty() bool {
	if len(n.found) > 0 {
		return false
	}
	for _, d := range n.subdirs {
		if !d.gone {
			return false
		}
	}
	return true
}

// flatten appends the entries of n's tree to out in path byte order, as
// pointers into the directories' lists: the entries (~170 bytes each) are
// neither copied nor moved. The whole list is never sorted; siblings are
// sorted instead, by name, a
// subdirectory by its name and a slash: its entries' paths all start so,
// and as no name holds a slash, comparing a sibling name with that prefix
// decides its order against all of them. An empty directory, itself an
// entry, sorts by its bare name.
func (n *dirNode) flatten(out []*walked) []*walked {
	if n.rel != "" && n.empty() {
		return append(out, &walked{path: n.rel, kind: chain.KindDir})
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
		if d.gone {
			continue
		}
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
			out = append(out, &n.found[k.i])
		}
	}
	return out
}

type walker struct {
	ctx    context.Context
	cancel context.CancelFunc
	in     *walkInput
	point  func(string) error
	sem    chan struct{} // bounds the directories read (and so held open) at once
	wg     sync.WaitGroup

	entries atomic.Int64 // files and symlinks found, to size the list

	mu       sync.Mutex
	err      error
	excluded map[string]int // entries left out by policy, by rule; under mu
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
	found, subdirs, err := w.read(n)
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

// vanished reports an entry of the walk that is gone, or no longer what
// the directory listing said it was.
func (w *walker) vanished(p, detail string) error {
	return w.in.changes.report(p, sbxdb.EntryVanished, detail)
}

// unsupported returns err, the refusal of the entry p, unless unsupported
// entries are skipped: then p is left out with a warning saying why, and
// the walk goes on.
func (w *walker) unsupported(p, why string, err error) error {
	if !w.in.skipUnsupported {
		return err
	}
	w.in.changes.skip(p, why)
	return nil
}

// countExcluded adds one directory's counts of entries left out by policy.
func (w *walker) countExcluded(counts map[string]int) {
	w.mu.Lock()
	for rule, n := range counts {
		w.excluded[rule] += n
	}
	w.mu.Unlock()
}

func (w *walker) read(n *dirNode) (found []walked, subdirs []string, err error) {
	rel := n.rel
	if err := w.ctx.Err(); err != nil {
		return nil, nil, err
	}
	if err := w.point("capture.walkDir"); err != nil {
		return nil, nil, err
	}
	name := rel
	if name == "" {
		name = "."
	}
	f, err := vfs.OpenDirBeneath(w.in.dir, name)
	if err == nil && rel != "" {
		if perr := w.point("capture.openDir"); perr != nil { // an injected failure to open
			f.Close()
			f, err = nil, perr
		}
	}
	if err != nil {
		if vfs.IsGone(err) && rel != "" {
			n.gone = true
			return nil, nil, w.vanished(rel, "the directory vanished, or became a symlink, before it was read")
		}
		return nil, nil, w.unreadableDir(n, err)
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		if vfs.IsGone(err) && rel != "" { // removed while it was listed
			n.gone = true
			return nil, nil, w.vanished(rel, "the directory was removed while it was read")
		}
		return nil, nil, w.unreadableDir(n, err)
	}
	var excluded map[string]int // left out by policy, by rule
	exclude := func(rule string) {
		if excluded == nil {
			excluded = map[string]int{}
		}
		excluded[rule]++
	}
	if rel != "" && w.in.names.isStoreDir(ents) {
		// Another store beneath the workspace, whatever the policy: its
		// files are another store's state, never a workspace's. The
		// directory counts once, as an excluded directory does.
		n.gone = true
		exclude(workspace.RuleStore)
		w.countExcluded(excluded)
		return nil, nil, nil
	}
	otherStore := rel == "" && w.in.names.isStoreDir(ents)
	if others := len(ents) - countDirs(ents); others > 0 {
		found = make([]walked, 0, others)
	}
	abs := f.Name()
	for _, d := range ents {
		name := d.Name()
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		t := d.Type()
		kind := chain.KindFile // special files are asked about as files
		switch {
		case t.IsDir():
			kind = chain.KindDir
		case t&os.ModeSymlink != 0:
			kind = chain.KindSymlink
		}
		if rule := w.in.pol.SkipRule(p, kind); rule != "" {
			exclude(rule)
			continue // a directory is not walked, a file not even stat'ed
		}
		if kind == chain.KindDir && filepath.Join(abs, name) == w.in.skip {
			continue // the store's own directory
		}
		if (abs == w.in.skip || otherStore) && w.in.names.entry(name) {
			continue // a store's own entry: the workspace is a store's directory
		}
		if !w.in.pol.Wants(p, kind) {
			exclude(workspace.RuleNotIncluded)
			continue
		}
		if why, err := checkName(p, name); err != nil {
			if err := w.unsupported(p, why, err); err != nil {
				return nil, nil, err
			}
			continue
		}
		switch {
		case t.IsDir():
			subdirs = append(subdirs, p)
		case t.IsRegular():
			st, dev, err := lstatAt(f, name)
			if err == nil && !isRegular(st) {
				err = w.vanished(p, "the file was replaced by something else before it was read")
				if err != nil {
					return nil, nil, err
				}
				continue
			}
			if err != nil {
				if vfs.IsGone(err) {
					if err := w.vanished(p, "the file vanished before it was read"); err != nil {
						return nil, nil, err
					}
					continue
				}
				err = w.unsupported(p, "cannot be read: "+errReason(err), chain.Errorf(chain.ErrInvalidWorkspace, "lstat %q: %v", p, err))
				if err != nil {
					return nil, nil, err
				}
				continue
			}
			found = append(found, walked{path: p, kind: chain.KindFile, exec: st.mode&0o111 != 0, st: st, dev: dev})
		case t&os.ModeSymlink != 0:
			target, err := readlinkAt(f, name)
			if err != nil {
				if vfs.IsGone(err) || errors.Is(err, syscall.EINVAL) { // EINVAL: no longer a symlink
					if err := w.vanished(p, "the symlink vanished, or was replaced, before it was read"); err != nil {
						return nil, nil, err
					}
					continue
				}
				err = w.unsupported(p, "cannot be read: "+errReason(err), chain.Errorf(chain.ErrInvalidWorkspace, "readlink %q: %v", p, err))
				if err != nil {
					return nil, nil, err
				}
				continue
			}
			if err := workspace.CheckLinkTarget(p, target); err != nil {
				if err := w.unsupported(p, "a symlink whose target is empty, holds NUL or is not valid UTF-8", err); err != nil {
					return nil, nil, err
				}
				continue
			}
			found = append(found, walked{path: p, kind: chain.KindSymlink, target: target})
		default:
			what := fileTypeName(t)
			err := chain.Errorf(chain.ErrUnsupportedEntry, "%q is %s, not a regular file, directory or symlink", p, what)
			if err := w.unsupported(p, what, err); err != nil {
				return nil, nil, err
			}
		}
	}
	if excluded != nil {
		w.countExcluded(excluded)
	}
	return found, subdirs, nil
}

// countDirs counts the directories among a listing's entries.
func countDirs(ents []os.DirEntry) int {
	n := 0
	for _, d := range ents {
		if d.IsDir() {
			n++
		}
	}
	return n
}

// unreadableDir is the error of a directory that cannot be opened or
// listed; when unsupported entries are skipped, the directory (never the
// root) is left out with a warning instead, and the walk goes on.
func (w *walker) unreadableDir(n *dirNode, err error) error {
	if n.rel == "" {
		return chain.Errorf(chain.ErrInvalidWorkspace, "workspace %s: %s", w.in.root, errReason(err))
	}
	fail := unreadableEntry("reading directory %q: %s", n.rel, err)
	if err := w.unsupported(n.rel, "the directory cannot be read: "+errReason(err), fail); err != nil {
		return err
	}
	n.gone = true
	return nil
}

// errReason is what an error of a system call says without the operation
// and path around it: "permission denied" rather than
// "openat a/b: permission denied".
func errReason(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// unreadableEntry is the ErrInvalidWorkspace error of an entry that cannot
// be opened or read: format names the entry once, and its last verb is
// given what err says without the operation and path (see errReason).
func unreadableEntry(format, path string, err error) error {
	return chain.Errorf(chain.ErrInvalidWorkspace, format, path, errReason(err))
}

// StoreNames are the names a store keeps in its directory; the engine,
// which owns that directory, gives them (Store.Names).
type StoreNames struct {
	// Entries are every name a store keeps in its directory, its server's
	// socket and the stat caches (StatCacheDir) among them: a capture of a
	// workspace that is the store's directory leaves them out, as it
	// leaves out the whole store's directory beneath a workspace.
	Entries map[string]bool
	// Lock, DB and Blobs are its lock file, database file and blob
	// directory.
	Lock, DB, Blobs string
}

// entry reports whether name is one of the store's entries; a nil n has
// none.
func (n *StoreNames) entry(name string) bool { return n != nil && n.Entries[name] }

// isStoreDir reports whether a directory's entries make it an sbxdb
// store's directory: its lock file, and its database or blob directory
// (a store of shared metadata keeps no database file). Every Open creates
// the lock file, so a store ever opened has one. A nil n knows no store.
func (n *StoreNames) isStoreDir(ents []fs.DirEntry) bool {
	if n == nil {
		return false
	}
	var lock, data bool
	for _, d := range ents {
		switch d.Name() {
		case n.Lock:
			lock = d.Type().IsRegular()
		case n.DB:
			data = data || d.Type().IsRegular()
		case n.Blobs:
			data = data || d.Type().IsDir()
		}
	}
	return lock && data
}

// IsUnreadableEntry reports whether err is the ErrInvalidWorkspace error of
// an entry beneath the workspace root that could not be opened or read,
// which CaptureInput.SkipUnsupported would have left out. It recognizes the
// error also when rebuilt from a server's reply.
func IsUnreadableEntry(err error) bool {
	if !errors.Is(err, chain.ErrInvalidWorkspace) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, `reading "`) || strings.Contains(msg, `reading directory "`)
}

// fileTypeName names the type of a file mode for messages, with its
// article: "a named pipe", not "p---------".
func fileTypeName(m fs.FileMode) string {
	switch t := m.Type(); {
	case t == 0:
		return "a regular file"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symlink"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	}
	return "an irregular file"
}

// checkName refuses names a manifest path cannot hold (SPEC §1.2) and names
// that are not UTF-8, which the JSON form of a checkpoint cannot carry, and
// says why in a few words. A directory entry's name is never empty, ".",
// ".." or holds "/" or NUL, so of the path rules only the backslash and, at
// the root, the drive prefix ("C:") can fail; the whole-path check runs for
// root names only.
func checkName(p, name string) (why string, err error) {
	switch {
	case !utf8.ValidString(name):
		why = "the name is not valid UTF-8"
	case strings.IndexByte(name, '\\') >= 0:
		why = "the name holds a backslash"
	case strings.IndexByte(name, 0) >= 0:
		why = "the name holds NUL"
	}
	if why != "" {
		return why, chain.Errorf(chain.ErrUnsupportedEntry, "%q: a file name with a backslash, NUL or invalid UTF-8 cannot be recorded", p)
	}
	if p == name {
		if err := chain.ValidatePath(p); err != nil {
			return "not a valid manifest path", chain.Errorf(chain.ErrInvalidWorkspace, "%q is not a valid manifest path", p)
		}
	}
	return "", nil
}

// maxIgnoreFile bounds the .sbxdbignore a capture reads.
const maxIgnoreFile = 1 << 20

// withIgnoreFile returns pol extended by the workspace's .sbxdbignore
// (workspace.IgnoreFileName, in the root opened as dir), or pol itself
// when there is none. The file is opened beneath dir without following a
// symlink (a symlink in its place is as if there were none: it could
// only lead out of the workspace) and must be a regular file of at most
// maxIgnoreFile bytes; an invalid pattern is
// SANDBOX_SNAPSHOT_INVALID_WORKSPACE naming its line. Its patterns only
// add exclusions: nothing it says makes a capture read more.
func withIgnoreFile(dir *os.File, pol workspace.Policy) (workspace.Policy, error) {
	r, err := vfs.OpenBeneath(dir, workspace.IgnoreFileName)
	if err != nil {
		return pol, nil // none, or a symlink
	}
	defer r.Close()
	st, _, err := fstatOpen(r, "", workspace.IgnoreFileName)
	if err != nil || !isRegular(st) {
		return pol, nil
	}
	if st.size > maxIgnoreFile {
		return pol, chain.Errorf(chain.ErrInvalidWorkspace, "%s is larger than %d bytes", workspace.IgnoreFileName, maxIgnoreFile)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxIgnoreFile+1))
	if err != nil {
		return pol, chain.Errorf(chain.ErrInvalidWorkspace, "reading %s: %v", workspace.IgnoreFileName, err)
	}
	pats, err := workspace.ParseIgnore(string(b))
	if err == nil {
		pol, err = pol.WithIgnore(workspace.RuleIgnoreFile, pats)
	}
	if err != nil {
		return pol, chain.Errorf(chain.ErrInvalidWorkspace, "%s: %v", workspace.IgnoreFileName, err)
	}
	return pol, nil
}
