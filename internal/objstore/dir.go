package objstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
)

// tmpDir is the directory under a Dir's root that holds objects being
// written. Its name starts with ReservedPrefix, so it names no object.
const tmpDir = ReservedPrefix + "tmp"

// staleTmp is the age past which OpenDir removes a temporary file, the
// leftover of a Put that crashed: no Put to a local disk runs this long.
const staleTmp = time.Hour

// Dir is the Store of a local directory: object "a/b/c" is the file
// root/a/b/c. All access goes through an os.Root, so no name and no symbolic
// link placed in the tree reaches outside the directory.
//
// A Put writes a temporary file under root/.objstore-tmp, fsyncs it, renames
// (or, with IfAbsent, hard-links) it into place and fsyncs the directory
// that now holds it: once Put returns, the object survives a crash, and a
// crash before that leaves no partial object. IfAbsent is atomic: the link
// fails if the name exists. Directories Put creates are fsynced into their
// parents; Delete leaves emptied directories in place.
type Dir struct {
	root *os.Root
}

var _ Store = (*Dir)(nil)

// OpenDir opens the Store in directory dir, creating dir if it is missing,
// and removes temporary files older than an hour that crashed Puts left.
func OpenDir(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	d := &Dir{root: root}
	if err := d.root.Mkdir(tmpDir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		root.Close()
		return nil, fmt.Errorf("objstore: %w", err)
	}
	d.removeStale()
	return d, nil
}

// removeStale removes temporary files older than staleTmp. A younger one
// may belong to a Put running in another process.
func (d *Dir) removeStale() {
	f, err := d.root.Open(tmpDir)
	if err != nil {
		return
	}
	ents, _ := f.ReadDir(-1)
	f.Close()
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleTmp {
			d.root.Remove(path.Join(tmpDir, e.Name()))
		}
	}
}

// Close closes the directory.
func (d *Dir) Close() error { return d.root.Close() }

// Put implements Store.
func (d *Dir) Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) error {
	if err := d.put(ctx, name, r, size, opts); err != nil {
		return &Error{Op: "put", Name: name, Err: err}
	}
	return nil
}

func (d *Dir) put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (err error) {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if opts.IfAbsent {
		// Fail early, before copying the bytes; the link below decides.
		if _, err := d.root.Lstat(name); err == nil {
			return ErrExists
		}
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := path.Join(tmpDir, hex.EncodeToString(rnd[:]))
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		d.root.Remove(tmp) // after a rename, tmp is gone; after a link, it is the second name
	}()
	src := ContextReader(ctx, r)
	if size >= 0 {
		n, err := io.Copy(f, io.LimitReader(src, size))
		if err != nil {
			return err
		}
		if n < size {
			return fmt.Errorf("reader ended after %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
		}
	} else if _, err := io.Copy(f, src); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	err = f.Close()
	f = nil
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	parent := path.Dir(name)
	if err := d.mkdirs(parent); err != nil {
		return err
	}
	if opts.IfAbsent {
		if err := d.root.Link(tmp, name); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return ErrExists
			}
			return err
		}
	} else if err := d.root.Rename(tmp, name); err != nil {
		return err
	}
	return d.syncDir(parent)
}

// mkdirs creates dir and its missing parents, fsyncing each new directory's
// parent so the new entry is as durable as the object that needs it.
func (d *Dir) mkdirs(dir string) error {
	if dir == "." {
		return nil
	}
	if fi, err := d.root.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if err := d.mkdirs(path.Dir(dir)); err != nil {
		return err
	}
	if err := d.root.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // made by a concurrent Put, which syncs its parent
		}
		return err
	}
	return d.syncDir(path.Dir(dir))
}

func (d *Dir) syncDir(dir string) error {
	f, err := d.root.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Open implements Store.
func (d *Dir) Open(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	rc, err := d.open(ctx, name, off, length)
	if err != nil {
		return nil, &Error{Op: "open", Name: name, Err: err}
	}
	return rc, nil
}

func (d *Dir) open(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("negative offset %d: %w", off, fs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := d.root.Open(name)
	if err != nil {
		return nil, notExist(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, ErrNotExist
	}
	n := max(fi.Size()-off, 0)
	if length >= 0 {
		n = min(n, length)
	}
	return RangeReader(sectionCloser{io.NewSectionReader(f, off, n), f}, length), nil
}

type sectionCloser struct {
	*io.SectionReader
	io.Closer
}

// Stat implements Store.
func (d *Dir) Stat(ctx context.Context, name string) (Info, error) {
	info, err := d.stat(ctx, name)
	if err != nil {
		return Info{}, &Error{Op: "stat", Name: name, Err: err}
	}
	return info, nil
}

func (d *Dir) stat(ctx context.Context, name string) (Info, error) {
	if err := ValidName(name); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	fi, err := d.root.Stat(name)
	if err != nil {
		return Info{}, notExist(err)
	}
	if !fi.Mode().IsRegular() {
		return Info{}, ErrNotExist
	}
	return Info{Name: name, Size: fi.Size(), Modified: fi.ModTime()}, nil
}

// Delete implements Store.
func (d *Dir) Delete(ctx context.Context, name string) error {
	if err := d.delete(ctx, name); err != nil {
		return &Error{Op: "delete", Name: name, Err: err}
	}
	return nil
}

func (d *Dir) delete(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fi, err := d.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return nil // a directory is no object, so no object of that name exists
	}
	if err := d.root.Remove(name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return d.syncDir(path.Dir(name))
}

// List implements Store. Names come out in byte-wise order, as S3 lists
// keys, although files are found directory by directory: within a
// directory, a subdirectory d sorts as "d/" among its file names.
func (d *Dir) List(ctx context.Context, prefix string, fn func(Info) error) error {
	err := d.walk(ctx, ".", prefix, fn)
	var stop fnError
	if errors.As(err, &stop) {
		return stop.err
	}
	if err != nil {
		return &Error{Op: "list", Name: prefix, Err: err}
	}
	return nil
}

// fnError carries an error of List's fn through walk unwrapped.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

func (d *Dir) walk(ctx context.Context, dir, prefix string, fn func(Info) error) error {
	f, err := d.root.Open(dir)
	if err != nil {
		if dir != "." && errors.Is(err, fs.ErrNotExist) {
			return nil // removed while listing
		}
		return err
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	type entry struct {
		key string // the name below root; with a trailing slash for a directory
		ent fs.DirEntry
	}
	list := make([]entry, 0, len(ents))
	for _, e := range ents {
		key := e.Name()
		if dir != "." {
			key = dir + "/" + key
		}
		switch {
		case strings.HasPrefix(e.Name(), ReservedPrefix):
			continue // tmpDir, and nothing a valid name can make
		case e.IsDir():
			key += "/"
			if !strings.HasPrefix(key, prefix) && !strings.HasPrefix(prefix, key) {
				continue
			}
		case e.Type().IsRegular():
			if !strings.HasPrefix(key, prefix) {
				continue
			}
		default:
			continue // symbolic links and devices are no objects
		}
		list = append(list, entry{key, e})
	}
	slices.SortFunc(list, func(a, b entry) int { return cmp.Compare(a.key, b.key) })
	for _, e := range list {
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.ent.IsDir() {
			if err := d.walk(ctx, strings.TrimSuffix(e.key, "/"), prefix, fn); err != nil {
				return err
			}
			continue
		}
		fi, err := e.ent.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted while listing
		}
		if err != nil {
			return err
		}
		if err := fn(Info{Name: e.key, Size: fi.Size(), Modified: fi.ModTime()}); err != nil {
			return fnError{err}
		}
	}
	return nil
}

// notExist maps the errors of a path that is missing, or that runs through
// a file, to ErrNotExist.
func notExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return ErrNotExist
	}
	return err
}
