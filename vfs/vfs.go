// Package vfs is the seam between sbxdb and the filesystem: every operation
// that changes a file — creating, writing, truncating, syncing, renaming, removing,
// making directories and links — goes through an FS, so tests can make any
// one of them fail (a full disk, an I/O error) and check that the store is
// left exactly as it was. Reads are not faulted (a failed read changes
// nothing): files on disk are opened for reading with Open, os.Open at
// fewer system calls per file.
//
// The database file is the exception bbolt imposes: bbolt writes and syncs
// it itself through an *os.File. An FS is asked before each database
// commit instead (BeforeCommit), and can fail it the way a failed page
// write fails bbolt's Commit: the transaction is rolled back and nothing of
// it reaches the file.
package vfs

import (
	"io"
	"io/fs"
	"os"
)

// FS performs the file operations that change the disk.
type FS interface {
	// OpenFile is os.OpenFile; sbxdb opens files for writing with it.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// CreateTemp is os.CreateTemp.
	CreateTemp(dir, pattern string) (File, error)
	// Mkdir, MkdirAll and MkdirTemp are their os namesakes.
	Mkdir(name string, perm fs.FileMode) error
	MkdirAll(name string, perm fs.FileMode) error
	MkdirTemp(dir, pattern string) (string, error)
	// Chmod is os.Chmod.
	Chmod(name string, mode fs.FileMode) error
	// Rename, Remove and Symlink are their os namesakes.
	Rename(oldpath, newpath string) error
	Remove(name string) error
	Symlink(target, name string) error
	// SyncDir makes the names in directory dir durable (fsync of the
	// directory), after a file was created, renamed into or removed from
	// it.
	SyncDir(dir string) error
	// BeforeCommit is called just before a database transaction on the
	// file at path commits; an error rolls the transaction back and, as a
	// failed commit's would, poisons the open store (its outcome counts as
	// unknown).
	BeforeCommit(path string) error
}

// File is a file opened for writing. Seek moves the offset Write writes
// at (a restore skips a run of zero bytes with it, leaving a hole);
// Truncate sets the file's size.
type File interface {
	io.Writer
	io.WriterAt
	io.Seeker
	Name() string
	Truncate(size int64) error
	Chmod(mode fs.FileMode) error
	Sync() error
	Close() error
}

// OS is the FS of the operating system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := openFile(name, flag, perm)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return f, nil
}

func (osFS) CreateTemp(dir, pattern string) (File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Mkdir(name string, perm fs.FileMode) error     { return os.Mkdir(name, perm) }
func (osFS) MkdirAll(name string, perm fs.FileMode) error  { return os.MkdirAll(name, perm) }
func (osFS) MkdirTemp(dir, pattern string) (string, error) { return os.MkdirTemp(dir, pattern) }
func (osFS) Chmod(name string, mode fs.FileMode) error     { return os.Chmod(name, mode) }
func (osFS) Rename(oldpath, newpath string) error          { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                      { return os.Remove(name) }
func (osFS) Symlink(target, name string) error             { return os.Symlink(target, name) }
func (osFS) BeforeCommit(string) error                     { return nil }

// Open opens a file or directory for reading, as os.Open does but at less
// cost per file (see openFile). sbxdb reads files on disk with it.
func Open(name string) (*os.File, error) { return openFile(name, os.O_RDONLY, 0) }

func (osFS) SyncDir(dir string) error {
	d, err := Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
