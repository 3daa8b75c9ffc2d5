//go:build !unix

package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

func openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}

// OpenDir opens the directory name for reading.
func OpenDir(name string) (*os.File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		f.Close()
		if err == nil {
			err = &fs.PathError{Op: "open", Path: name, Err: errors.New("not a directory")}
		}
		return nil, err
	}
	return f, nil
}

// OpenDirBeneath opens the directory at rel beneath dir. Off Unix it
// goes through os.Root: a symlink is followed only while it stays
// beneath dir.
func OpenDirBeneath(dir *os.File, rel string) (*os.File, error) {
	f, err := os.OpenInRoot(dir.Name(), filepath.FromSlash(rel))
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: rel, Err: fs.ErrNotExist}
	}
	return f, nil
}

// OpenBeneath opens the file at rel beneath dir for reading. Off Unix it
// goes through os.Root: a symlink is followed only while it stays beneath
// dir, so nothing outside dir is opened.
func OpenBeneath(dir *os.File, rel string) (*Reader, error) {
	f, err := os.OpenInRoot(dir.Name(), filepath.FromSlash(rel))
	if err != nil {
		return nil, err
	}
	return &Reader{f: f}, nil
}

// IsGone reports whether err, from OpenBeneath or OpenDirBeneath, says
// that nothing can be opened at the name beneath the directory.
func IsGone(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// Reader is a file opened for reading by OpenBeneath.
type Reader struct{ f *os.File }

func (r *Reader) Read(p []byte) (int, error) { return r.f.Read(p) }

// Rewind moves the read offset back to the start of the file.
func (r *Reader) Rewind() error {
	_, err := r.f.Seek(0, io.SeekStart)
	return err
}

// Fd returns the descriptor, valid until Close.
func (r *Reader) Fd() uintptr { return r.f.Fd() }

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }

// Stat returns the open file's information.
func (r *Reader) Stat() (fs.FileInfo, error) { return r.f.Stat() }
