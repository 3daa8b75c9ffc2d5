package cas

import (
	"fmt"
	"io/fs"
	"sync/atomic"

	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/vfs"
)

// Gate decides whether a Store may still change the disk. The DB a Store
// is opened with may implement it, to share one decision with everything
// else written to its file; a Store whose DB does not keeps its own.
//
// After a failed fsync the state of a file is unknown: the kernel may have
// dropped the dirty pages the fsync was to write, so later writes through
// the same open store could build on bytes that are not on disk. The Store
// therefore reports every failed sync of a pack, a large blob file or a
// directory to its gate, and asks the gate before each change: once
// Refused returns an error, every write of the Store (a batch, a repack, a
// delete, an index transaction, any file created, renamed or removed)
// fails with it; reads go on. Opening the store again clears it: Open
// removes the packs and temporary files no index entry names, as after a
// crash (RemoveOrphans, the large files).
type Gate interface {
	// Refused returns the error every write must fail with, or nil.
	Refused() error
	// SyncFailed is told of a failed sync of one of the store's files or
	// directories; err matches ErrSyncFailed.
	SyncFailed(err error)
}

// ownGate is the Gate of a Store whose DB has none: the first failed sync
// refuses every later write.
type ownGate struct{ failed atomic.Pointer[error] }

func (g *ownGate) Refused() error {
	if p := g.failed.Load(); p != nil {
		return fmt.Errorf("store must be reopened: %w", *p)
	}
	return nil
}

func (g *ownGate) SyncFailed(err error) { g.failed.CompareAndSwap(nil, &err) }

// syncFailed reports a failed sync to the store's gate and returns the
// error for the caller: ErrSyncFailed wrapping err.
func (s *Store) syncFailed(err error) error {
	err = fmt.Errorf("cas: %w: %w", ErrSyncFailed, err)
	s.gate.SyncFailed(err)
	return err
}

// removeUnindexed removes a file a batch wrote and never indexed, even
// when the gate refuses writes: it undoes a failed write (a failed sync
// among them), leaving the store as it was, and no index entry can name
// it.
func (s *Store) removeUnindexed(path string) error { return s.opts.FS.Remove(path) }

// gatedDB is the index's DB with every write transaction asked of the
// gate first.
type gatedDB struct {
	DB
	gate Gate
}

func (g gatedDB) Update(fn func(kv.Tx) error) error {
	if err := g.gate.Refused(); err != nil {
		return err
	}
	return g.DB.Update(fn)
}

// gatedFS is the store's FS with every change asked of the gate first.
// Syncs are not changes, and files opened before the gate closed are not
// asked again: their batch cannot commit.
type gatedFS struct {
	vfs.FS
	gate Gate
}

func (g gatedFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if err := g.gate.Refused(); err != nil {
		return nil, err
	}
	return g.FS.OpenFile(name, flag, perm)
}

func (g gatedFS) CreateTemp(dir, pattern string) (vfs.File, error) {
	if err := g.gate.Refused(); err != nil {
		return nil, err
	}
	return g.FS.CreateTemp(dir, pattern)
}

func (g gatedFS) Mkdir(name string, perm fs.FileMode) error {
	return g.ask(func() error { return g.FS.Mkdir(name, perm) })
}

func (g gatedFS) MkdirAll(name string, perm fs.FileMode) error {
	return g.ask(func() error { return g.FS.MkdirAll(name, perm) })
}

func (g gatedFS) MkdirTemp(dir, pattern string) (string, error) {
	if err := g.gate.Refused(); err != nil {
		return "", err
	}
	return g.FS.MkdirTemp(dir, pattern)
}

func (g gatedFS) Chmod(name string, mode fs.FileMode) error {
	return g.ask(func() error { return g.FS.Chmod(name, mode) })
}

func (g gatedFS) Rename(oldpath, newpath string) error {
	return g.ask(func() error { return g.FS.Rename(oldpath, newpath) })
}

func (g gatedFS) Remove(name string) error {
	return g.ask(func() error { return g.FS.Remove(name) })
}

func (g gatedFS) Symlink(target, name string) error {
	return g.ask(func() error { return g.FS.Symlink(target, name) })
}

func (g gatedFS) ask(op func() error) error {
	if err := g.gate.Refused(); err != nil {
		return err
	}
	return op()
}
