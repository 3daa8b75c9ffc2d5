package restore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
)

// The state of a path in the target, as restoreOverwrite found it.
type found int

const (
	foundNothing found = iota // nothing there, or beneath something replaced
	foundDir                  // a real directory (not a symlink to one)
	foundOther                // a file, a symlink, anything else
)

// restoreOverwrite restores files into target, an existing directory
// (open as dir) that need not be empty (RestoreOptions.Overwrite, and
// Delete). It works in three steps:
//
//  1. Plan: each path of the checkpoint is looked at in the target with
//     Lstat, parents first; beneath a path that is not a real directory
//     nothing is looked at (a symlink there is never followed). A file or
//     symlink identical to the entry is left alone; a real directory
//     where the entry is not one is refused unless o.Delete.
//  2. Stage: the entries that differ are written and verified into
//     <staging>/new (restoreInto), as a restore into an empty directory
//     would write them; nothing in the target has changed yet.
//  3. Move: parents first, each missing directory is made and each
//     non-directory in a directory's place moved aside; each staged entry
//     is renamed over its path (the old one is first hard-linked aside, so
//     the path never stops existing); with o.Delete, every entry the
//     checkpoint lacks and the policy admits is moved aside. What is
//     moved aside goes to <staging>/old, removed with the staging
//     directory at the end. A failure in this step undoes every change
//     made, last first, so the target is left as it was.
func (rs *restorer) restoreOverwrite(ctx context.Context, files []chain.Entry, target string, dir *os.File, o *sbxdb.RestoreOptions) (sbxdb.RestoreStats, error) {
	troot := pinnedPath(dir, target)
	st, err := dir.Stat()
	stg, err := rs.makeStaging(troot, err != nil || sharedDir(st))
	if err != nil {
		return sbxdb.RestoreStats{}, unpinError(err, troot, target)
	}
	defer stg.f.Close()
	fail := func(err error) (sbxdb.RestoreStats, error) {
		os.RemoveAll(stg.path)
		return sbxdb.RestoreStats{}, unpinError(stg.unpin(err), troot, target)
	}
	at := func(p string) string { return filepath.Join(troot, filepath.FromSlash(p)) }

	// 1. Plan.
	dirState := map[string]found{}
	recorded := map[string]bool{} // the paths of dir entries
	for i := range files {
		p := files[i].Path
		for j := 0; j < len(p); j++ {
			if p[j] == '/' {
				dirState[p[:j]] = foundNothing
			}
		}
		if files[i].Kind == chain.KindDir {
			dirState[p] = foundNothing
			recorded[p] = true
		}
	}
	dirs := make([]string, 0, len(dirState))
	for d := range dirState {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parentIsDir := func(p string) bool {
		par := path.Dir(p)
		return par == "." || dirState[par] == foundDir
	}
	lstat := func(p string) (os.FileInfo, found, error) {
		if !parentIsDir(p) {
			return nil, foundNothing, nil
		}
		fi, err := os.Lstat(at(p))
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, foundNothing, nil
		case err != nil:
			return nil, 0, fmt.Errorf("restore: %w", err)
		case fi.IsDir():
			return fi, foundDir, nil
		}
		return fi, foundOther, nil
	}
	for _, d := range dirs {
		_, f, err := lstat(d)
		if err != nil {
			return fail(err)
		}
		dirState[d] = f
	}
	var stats sbxdb.RestoreStats
	var write []chain.Entry
	state := map[string]found{} // of each entry written
	for i := range files {
		e := &files[i]
		if e.Kind == chain.KindDir {
			continue
		}
		fi, f, err := lstat(e.Path)
		if err != nil {
			return fail(err)
		}
		switch {
		case f == foundDir && !o.Delete:
			return fail(chain.Errorf(chain.ErrInvalidWorkspace, "restore: %q is a directory in %s and a %s in the checkpoint: --delete replaces it", e.Path, target, e.Kind))
		case f == foundOther:
			same, err := identical(at(e.Path), fi, e)
			if err != nil {
				return fail(err)
			}
			if same {
				stats.Unchanged++
				continue
			}
		}
		state[e.Path] = f
		write = append(write, *e)
	}

	// 2. Stage.
	newRoot := filepath.Join(stg.root, "new")
	oldRoot := filepath.Join(stg.root, "old")
	for _, d := range []string{newRoot, oldRoot} {
		if err := rs.fs.Mkdir(d, 0o700); err != nil {
			return fail(fmt.Errorf("restore: %w", err))
		}
	}
	if err := rs.restoreInto(ctx, write, newRoot, false, o, &stats); err != nil {
		return fail(err)
	}
	skipped := map[string]bool{}
	for _, s := range stats.Skipped {
		skipped[s.Path] = true
	}

	// 3. Move, keeping how to undo each change.
	var undo []func()
	nold := 0
	aside := func(p string) (string, error) { // moves p aside, undoably
		nold++
		old := filepath.Join(oldRoot, strconv.Itoa(nold))
		if err := rs.fs.Rename(at(p), old); err != nil {
			return "", fmt.Errorf("restore: %w", err)
		}
		undo = append(undo, func() { os.Rename(old, at(p)) })
		return old, nil
	}
	moveFail := func(err error) (sbxdb.RestoreStats, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return fail(err)
	}
	for _, d := range dirs {
		switch dirState[d] {
		case foundDir:
			continue
		case foundOther:
			if _, err := aside(d); err != nil {
				return moveFail(err)
			}
		}
		if err := rs.fs.Mkdir(at(d), 0o755); err != nil {
			return moveFail(fmt.Errorf("restore: %w", err))
		}
		undo = append(undo, func() { os.Remove(at(d)) })
		if recorded[d] {
			stats.Dirs++
		}
	}
	for i := range write {
		e := &write[i]
		if skipped[e.Path] {
			continue
		}
		if err := rs.point("restore.overwrite.move"); err != nil {
			return moveFail(err)
		}
		dst := at(e.Path)
		switch state[e.Path] {
		case foundDir:
			if _, err := aside(e.Path); err != nil {
				return moveFail(err)
			}
		case foundOther:
			// A hard link keeps the old entry, so dst never stops
			// existing; where links are refused, it is moved aside.
			nold++
			old := filepath.Join(oldRoot, strconv.Itoa(nold))
			if os.Link(dst, old) == nil {
				undo = append(undo, func() { os.Rename(old, dst) })
			} else if _, err := aside(e.Path); err != nil {
				return moveFail(err)
			}
		}
		if err := rs.fs.Rename(filepath.Join(newRoot, filepath.FromSlash(e.Path)), dst); err != nil {
			return moveFail(fmt.Errorf("restore: %w", err))
		}
		if state[e.Path] != foundOther { // nothing to put back over
			undo = append(undo, func() { os.Remove(dst) })
		}
	}
	if o.Delete {
		keep := map[string]bool{}
		for i := range files {
			keep[files[i].Path] = true
		}
		for d := range dirState {
			keep[d] = true
		}
		var walk func(rel string) error
		walk = func(rel string) error {
			ents, err := os.ReadDir(at(rel))
			if err != nil {
				return fmt.Errorf("restore: %w", err)
			}
			for _, ent := range ents {
				if rel == "." && strings.HasPrefix(ent.Name(), stagingPrefix) {
					continue // ours, or another restore's
				}
				p := path.Join(rel, ent.Name())
				kind := chain.KindFile
				switch {
				case ent.IsDir(): // never a symlink: ReadDir does not follow them
					kind = chain.KindDir
				case ent.Type()&os.ModeSymlink != 0:
					kind = chain.KindSymlink
				}
				switch {
				case !o.Policy.Admits(p, kind):
					// The policy's to keep (.git, node_modules, …).
				case keep[p]:
					if kind == chain.KindDir && dirState[p] == foundDir {
						if err := walk(p); err != nil {
							return err
						}
					}
				default:
					if _, err := aside(p); err != nil {
						return err
					}
					stats.Deleted++
				}
			}
			return nil
		}
		if err := walk("."); err != nil {
			return moveFail(err)
		}
	}
	os.RemoveAll(stg.path)
	return stats, nil
}

// identical reports whether the entry at name, which Lstat found as fi,
// is what e would restore: a symlink with e's target, or a regular file
// of e's size and mode (0755 or 0644) whose bytes hash to e's key.
func identical(name string, fi os.FileInfo, e *chain.Entry) (bool, error) {
	switch e.Kind {
	case chain.KindSymlink:
		if fi.Mode()&os.ModeSymlink == 0 {
			return false, nil
		}
		t, err := os.Readlink(name)
		return err == nil && t == e.Target, nil
	case chain.KindFile:
		mode := os.FileMode(0o644)
		if e.Executable {
			mode = 0o755
		}
		if !fi.Mode().IsRegular() || fi.Size() != e.Size || fi.Mode().Perm() != mode {
			return false, nil
		}
		f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return false, nil // unreadable: it is replaced
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return false, nil
		}
		return cas.Files.Key([32]byte(h.Sum(nil))) == e.BlobKey, nil
	}
	return false, nil
}
