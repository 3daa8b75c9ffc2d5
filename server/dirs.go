package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// pinnedDir is a directory a capture or restore may touch, as the path to
// give the engine, and what keeps that path meaning the directory checked.
type pinnedDir struct {
	path    string
	release func()   // closes what pins the path; always safe to call
	created []string // directories made for a restore, to remove if it fails
	root    *os.Root // the allowed prefix the created ones lie beneath
}

// undo removes the directories made for a restore that failed, deepest
// first, and only while empty.
func (d *pinnedDir) undo() {
	for i := len(d.created) - 1; i >= 0; i-- {
		if d.root.Remove(d.created[i]) != nil {
			break
		}
	}
}

// directory checks the directory a capture or restore names and returns
// the path to give the engine. It must be absolute: the client's working
// directory means nothing here. On a unix socket it is used as given
// (whoever can open the socket is a local user with access to the store).
// On any other connection it is resolved (symlinks in the part that
// exists, then Clean) and must lie below one of Options.AllowDirs; then,
// on Linux, the directory is opened beneath that prefix (os.Root: no
// symlink leads out of it) and the engine is given a path through the open
// descriptor (/proc/self/fd/N), so that a path component renamed or
// swapped for a symlink after the check cannot send the engine elsewhere.
// For a restore, the target's parent is opened (made first if needed,
// beneath the prefix) and the target is its child.
func (s *Server) directory(r *http.Request, op, dir string) (*pinnedDir, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, errorf(CodeBadRequest, "%s: dir %q is not an absolute path", op, dir)
	}
	if connOf(r.Context()).Unix {
		return &pinnedDir{path: dir, release: func() {}}, nil
	}
	if len(s.allowDirs) == 0 {
		return nil, errorf(CodeForbidden, "%s of %s: this listener may touch no directory", op, dir)
	}
	resolved, err := resolveExisting(dir)
	if err != nil {
		return nil, errorf(CodeForbidden, "%s of %s: %v", op, dir, err)
	}
	prefix := ""
	for _, p := range s.allowDirs {
		if within(p, resolved) {
			prefix = p
			break
		}
	}
	if prefix == "" {
		return nil, errorf(CodeForbidden, "%s of %s: %s lies outside every directory this listener may touch", op, dir, resolved)
	}
	if err := s.apartFromStores(op, dir, resolved); err != nil {
		return nil, err
	}
	if runtime.GOOS != "linux" {
		return &pinnedDir{path: resolved, release: func() {}}, nil
	}
	d, err := pinBeneath(op, prefix, resolved)
	if err != nil {
		return nil, err
	}
	// The same check on what was opened: a directory swapped in since the
	// first one is refused too, and the directories made for it removed.
	if err := s.apartFromStores(op, dir, d.path); err != nil {
		d.undo()
		d.release()
		return nil, err
	}
	return d, nil
}

// maxAncestors bounds the walk up from a directory to the root.
const maxAncestors = 4096

// ancestry returns the file information of the directory dir and of each
// directory above it, up to the root. Each parent is found through "..",
// which the kernel takes from the directory dir names once its symlinks
// (or a /proc/self/fd link) are followed: the physical parent, never the
// one the spelling of the path suggests.
func ancestry(dir string) ([]fs.FileInfo, error) {
	var out []fs.FileInfo
	p := dir
	for range maxAncestors {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if n := len(out); n > 0 && os.SameFile(out[n-1], fi) {
			return out, nil // the root is its own parent
		}
		out = append(out, fi)
		p += string(filepath.Separator) + ".."
	}
	return nil, fmt.Errorf("%s lies more than %d directories deep", dir, maxAncestors)
}

// storeDirs are the directories a capture or restore must not overlap: the
// store this server serves, the directory of its test stores, and, for a
// test store's server, those of the server that opened it.
func (s *Server) storeDirs() []string {
	dirs := []string{s.db.Dir()}
	if s.tests != nil {
		if base := s.tests.dir(); base != "" {
			dirs = append(dirs, base)
		}
	}
	if s.parent != nil {
		dirs = append(dirs, s.parent.storeDirs()...)
	}
	return dirs
}

// apartFromStores refuses a capture or restore whose directory overlaps one
// of storeDirs: is one of them, lies within one, or holds one. It compares
// directories by device and inode, so that neither a symlink (in --db, in
// the request's dir, anywhere above either) nor a bind mount hides an
// overlap. For a capture, at is the directory; for a restore, the target
// (at's deepest existing directory is checked: a target yet to be made
// holds nothing, and lies within a store when its existing parent does).
// shown is the directory as the request named it.
func (s *Server) apartFromStores(op, shown, at string) error {
	holds := true
	if op == "restore" {
		for {
			if _, err := os.Lstat(at); err == nil {
				break
			}
			parent := filepath.Dir(at)
			if parent == at {
				break
			}
			at, holds = parent, false
		}
	}
	mine, err := ancestry(at)
	if err != nil {
		return errorf(CodeForbidden, "%s of %s: %v", op, shown, err)
	}
	for _, store := range s.storeDirs() {
		theirs, err := ancestry(store)
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone: nothing of it to capture or overwrite
		}
		if err != nil {
			return errorf(CodeForbidden, "%s of %s: telling it from the store %s: %v", op, shown, store, err)
		}
		for _, fi := range mine {
			if os.SameFile(fi, theirs[0]) {
				return errorf(CodeForbidden, "%s of %s: it is or lies within the store %s", op, shown, store)
			}
		}
		if !holds {
			continue
		}
		for _, fi := range theirs {
			if os.SameFile(fi, mine[0]) {
				return errorf(CodeForbidden, "%s of %s: it holds the store %s", op, shown, store)
			}
		}
	}
	return nil
}

// pinBeneath opens resolved (a capture's directory) or its parent (a
// restore's) beneath prefix and returns the path through the descriptor.
func pinBeneath(op, prefix, resolved string) (*pinnedDir, error) {
	rel, err := filepath.Rel(prefix, resolved)
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return nil, errorf(CodeForbidden, "%s of %s: not below %s", op, resolved, prefix)
	}
	root, err := os.OpenRoot(prefix)
	if err != nil {
		return nil, errorf(CodeForbidden, "%s of %s: opening %s: %v", op, resolved, prefix, err)
	}
	d := &pinnedDir{root: root}
	open, child := rel, ""
	if op == "restore" {
		if rel == "." {
			root.Close()
			return nil, errorf(CodeForbidden, "restore into %s: the allowed directory itself is not a target", resolved)
		}
		open, child = filepath.Dir(rel), filepath.Base(rel)
		if d.created, err = mkdirBeneath(root, open); err != nil {
			d.undo()
			root.Close()
			return nil, errorf(CodeForbidden, "restore into %s: %v", resolved, err)
		}
	}
	f, err := root.Open(open)
	if err == nil {
		var st fs.FileInfo
		if st, err = f.Stat(); err == nil && !st.IsDir() {
			err = fmt.Errorf("%s is not a directory", filepath.Join(prefix, open))
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		d.undo()
		root.Close()
		return nil, errorf(CodeForbidden, "%s of %s: %v", op, resolved, err)
	}
	d.path = fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if child != "" {
		d.path += "/" + child
	}
	d.release = func() { f.Close(); root.Close() }
	return d, nil
}

// mkdirBeneath makes the missing directories of rel beneath root and
// returns those it made, shallowest first.
func mkdirBeneath(root *os.Root, rel string) ([]string, error) {
	if rel == "." {
		return nil, nil
	}
	var made []string
	parts := strings.Split(rel, string(filepath.Separator))
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		err := root.Mkdir(p, 0o755)
		switch {
		case err == nil:
			made = append(made, p)
		case errors.Is(err, fs.ErrExist):
		default:
			return made, err
		}
	}
	return made, nil
}
