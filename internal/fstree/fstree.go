// Package fstree reads a directory tree into a value that can be compared:
// what the tests and the benchmark check a restored or regenerated tree
// against. It is for checking, not for the capture path (internal/capture/walk.go).
package fstree

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Node is what is compared of one entry.
type Node struct {
	Mode   fs.FileMode // type and permission bits
	Size   int64       // regular files
	Sum    [32]byte    // regular files: SHA-256 of the content
	Target string      // symlinks
}

// Read returns every entry under root (root itself excluded) by
// slash-separated relative path. Directories named in skip (relative to
// root) are left out with everything beneath them.
func Read(root string, skip ...string) (map[string]Node, error) {
	out := map[string]Node{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if slices.Contains(skip, rel) {
			return fs.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n := Node{Mode: fi.Mode() & (fs.ModeType | fs.ModePerm)}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			n.Target, err = os.Readlink(p)
		case fi.Mode().IsRegular():
			var b []byte
			b, err = os.ReadFile(p)
			n.Size, n.Sum = int64(len(b)), sha256.Sum256(b)
		}
		out[rel] = n
		return err
	})
	return out, err
}

// Diff describes how b differs from a, a line per path in path order; nil
// when they are equal.
func Diff(a, b map[string]Node) []string {
	var out []string
	paths := make([]string, 0, len(a)+len(b))
	for p := range a {
		paths = append(paths, p)
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	for _, p := range paths {
		na, inA := a[p]
		nb, inB := b[p]
		switch {
		case !inB:
			out = append(out, fmt.Sprintf("%s: only in the first tree (%s)", p, na))
		case !inA:
			out = append(out, fmt.Sprintf("%s: only in the second tree (%s)", p, nb))
		case na != nb:
			out = append(out, fmt.Sprintf("%s: %s, then %s", p, na, nb))
		}
	}
	return out
}

func (n Node) String() string {
	switch {
	case n.Mode&fs.ModeSymlink != 0:
		return "symlink to " + n.Target
	case n.Mode.IsRegular():
		return fmt.Sprintf("%v file of %d bytes, sha256 %x", n.Mode, n.Size, n.Sum[:6])
	}
	return n.Mode.String()
}

// Copy copies the regular files, directories and symlinks under src into
// dst (which must not exist), keeping modes: for tests and benchmarks that
// work on a copy of a prepared tree.
func Copy(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(target, info.Mode().Perm())
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			return copyFile(p, target, info.Mode().Perm())
		}
		return nil
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
