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
	if store, err := filepath.Abs(s.db.Dir()); err == nil && op == "capture" && within(resolved, store) {
		return nil, errorf(CodeForbidden, "capture of %s: it holds the store %s", dir, store)
	}
	if runtime.GOOS != "linux" {
		return &pinnedDir{path: resolved, release: func() {}}, nil
	}
	return pinBeneath(op, prefix, resolved)
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
