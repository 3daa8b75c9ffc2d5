// Package faultfs wraps a vfs.FS to fail chosen operations, for tests that
// prove a failed write leaves a store as it was. It counts every operation
// by kind, so a test can first record what a call does and then fail each
// of its steps in turn: "the 3rd Sync", "the 1st Commit".
package faultfs

import (
	"fmt"
	"io/fs"
	"sync"

	"github.com/sbxdb/sbxdb/vfs"
)

// Op is a kind of operation.
type Op uint8

// The operations an FS counts. Write covers Write and WriteAt; Mkdir covers
// Mkdir, MkdirAll and MkdirTemp; Create covers OpenFile and CreateTemp;
// Chmod covers FS.Chmod and File.Chmod; Truncate is File.Truncate (a
// File's Seek changes nothing on disk and is not counted).
const (
	Create Op = iota
	Write
	Sync
	Close
	Chmod
	Mkdir
	Rename
	Remove
	Symlink
	SyncDir
	Commit
	Truncate
	numOps
)

var opNames = [numOps]string{"create", "write", "sync", "close", "chmod", "mkdir", "rename", "remove", "symlink", "syncdir", "commit", "truncate"}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("op%d", o)
}

// Event is one operation an FS performed or failed.
type Event struct {
	Op   Op
	N    int    // 1 for the first operation of its kind since Reset, 2 for the next…
	Path string // the file, directory or database it was about
}

func (e Event) String() string { return fmt.Sprintf("%s #%d %s", e.Op, e.N, e.Path) }

// FS is a vfs.FS that passes operations to its base until told to fail one.
// It is safe for concurrent use.
type FS struct {
	base vfs.FS

	mu     sync.Mutex
	counts [numOps]int
	events []Event
	fault  *fault
	fired  []Event
}

type fault struct {
	op  Op
	n   int
	err error
}

// New returns an FS over base that fails nothing yet.
func New(base vfs.FS) *FS { return &FS{base: base} }

// Reset zeroes the counts, forgets the events and removes the fault.
func (f *FS) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts, f.events, f.fault, f.fired = [numOps]int{}, nil, nil, nil
}

// FailNth makes the n-th operation of kind op counted since Reset (n ≥ 1)
// fail with err, once. It replaces an earlier fault.
func (f *FS) FailNth(op Op, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = &fault{op: op, n: n, err: err}
}

// Events returns the operations since Reset, in order.
func (f *FS) Events() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Event(nil), f.events...)
}

// Fired returns the operations that were failed since Reset.
func (f *FS) Fired() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Event(nil), f.fired...)
}

// check counts one operation and returns the error it must fail with.
func (f *FS) check(op Op, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[op]++
	e := Event{Op: op, N: f.counts[op], Path: path}
	f.events = append(f.events, e)
	if ft := f.fault; ft != nil && ft.op == op && ft.n == e.N {
		f.fault = nil
		f.fired = append(f.fired, e)
		return &fs.PathError{Op: op.String(), Path: path, Err: ft.err}
	}
	return nil
}

func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if err := f.check(Create, name); err != nil {
		return nil, err
	}
	file, err := f.base.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &File{File: file, fs: f}, nil
}

func (f *FS) CreateTemp(dir, pattern string) (vfs.File, error) {
	if err := f.check(Create, dir+"/"+pattern); err != nil {
		return nil, err
	}
	file, err := f.base.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return &File{File: file, fs: f}, nil
}

func (f *FS) Mkdir(name string, perm fs.FileMode) error {
	if err := f.check(Mkdir, name); err != nil {
		return err
	}
	return f.base.Mkdir(name, perm)
}

func (f *FS) MkdirAll(name string, perm fs.FileMode) error {
	if err := f.check(Mkdir, name); err != nil {
		return err
	}
	return f.base.MkdirAll(name, perm)
}

func (f *FS) MkdirTemp(dir, pattern string) (string, error) {
	if err := f.check(Mkdir, dir+"/"+pattern); err != nil {
		return "", err
	}
	return f.base.MkdirTemp(dir, pattern)
}

func (f *FS) Chmod(name string, mode fs.FileMode) error {
	if err := f.check(Chmod, name); err != nil {
		return err
	}
	return f.base.Chmod(name, mode)
}

func (f *FS) Rename(oldpath, newpath string) error {
	if err := f.check(Rename, newpath); err != nil {
		return err
	}
	return f.base.Rename(oldpath, newpath)
}

func (f *FS) Remove(name string) error {
	if err := f.check(Remove, name); err != nil {
		return err
	}
	return f.base.Remove(name)
}

func (f *FS) Symlink(target, name string) error {
	if err := f.check(Symlink, name); err != nil {
		return err
	}
	return f.base.Symlink(target, name)
}

func (f *FS) SyncDir(dir string) error {
	if err := f.check(SyncDir, dir); err != nil {
		return err
	}
	return f.base.SyncDir(dir)
}

func (f *FS) BeforeCommit(path string) error {
	if err := f.check(Commit, path); err != nil {
		return err
	}
	return f.base.BeforeCommit(path)
}

// File is a vfs.File whose writes, truncates, syncs, chmods and close can
// be failed.
// A failed write is a short one, as a disk filling up gives: the first half
// of the bytes are written, then the error.
type File struct {
	vfs.File
	fs *FS
}

func (w *File) Write(p []byte) (int, error) {
	if err := w.fs.check(Write, w.Name()); err != nil {
		n, _ := w.File.Write(p[:len(p)/2])
		return n, err
	}
	return w.File.Write(p)
}

func (w *File) WriteAt(p []byte, off int64) (int, error) {
	if err := w.fs.check(Write, w.Name()); err != nil {
		n, _ := w.File.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return w.File.WriteAt(p, off)
}

func (w *File) Truncate(size int64) error {
	if err := w.fs.check(Truncate, w.Name()); err != nil {
		return err
	}
	return w.File.Truncate(size)
}

func (w *File) Sync() error {
	if err := w.fs.check(Sync, w.Name()); err != nil {
		return err
	}
	return w.File.Sync()
}

func (w *File) Chmod(mode fs.FileMode) error {
	if err := w.fs.check(Chmod, w.Name()); err != nil {
		return err
	}
	return w.File.Chmod(mode)
}

// Close closes the file even when it fails: the descriptor must not leak.
func (w *File) Close() error {
	err := w.fs.check(Close, w.Name())
	if cerr := w.File.Close(); err == nil {
		err = cerr
	}
	return err
}
