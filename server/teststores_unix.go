//go:build unix

package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ownerLockName is the file in the directory of a server's test stores
// that the server holds an exclusive flock on while it runs: a directory
// whose lock can be taken belongs to no running server.
const ownerLockName = ".owner.lock"

// testStoresPrefix starts the name of the directory of a server's test
// stores, in the temporary directory.
const testStoresPrefix = "sbxdb-test-stores-"

// unlockedAfter is how long a directory of test stores without an owner
// lock (made by a server before the lock existed, or being made) must have
// been left unchanged before it counts as abandoned.
const unlockedAfter = 10 * time.Minute

// lockOwner takes the owner lock of base, the directory of test stores
// just made, and returns the file that holds it. The lock file is made
// and locked under another name, then renamed into place, so that it is
// never seen unlocked while the server lives.
func lockOwner(base string) (*os.File, error) {
	tmp := filepath.Join(base, ownerLockName+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if ok, err := tryFlock(f); err != nil || !ok {
		f.Close()
		return nil, errors.Join(err, errors.New("the lock of a new directory is held"))
	}
	if err := os.Rename(tmp, filepath.Join(base, ownerLockName)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// tryFlock takes an exclusive flock on f without waiting; false when
// another holds one.
func tryFlock(f *os.File) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		}
		return false, err
	}
}

// lockable reports whether the exclusive flock of the file at p can be
// taken, holding it in the returned file (to close) when it can; a file
// that does not exist is lockable, with no file to close.
func lockable(p string) (bool, *os.File) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, nil
	}
	if ok, err := tryFlock(f); err != nil || !ok {
		f.Close()
		return false, nil
	}
	return true, f
}

// RemoveAbandonedTestStores removes from tmp (the temporary directory,
// os.TempDir, when "") the directories of test stores that no running
// server holds, and returns how many it removed. A directory is removed
// only when it is a real directory (not a symlink) owned by this user,
// and either its owner lock (held by its server for its life) can be
// taken, or, with no owner lock, it was left unchanged for unlockedAfter
// and the lock of every store in it can be taken. What it cannot remove
// it leaves; this is housekeeping, and serving does not depend on it.
func RemoveAbandonedTestStores(tmp string) int {
	if tmp == "" {
		tmp = os.TempDir()
	}
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), testStoresPrefix) {
			continue
		}
		base := filepath.Join(tmp, e.Name())
		if abandoned(base, time.Now()) {
			if os.RemoveAll(base) == nil {
				removed++
			}
		}
	}
	return removed
}

// abandoned reports whether base, a directory of test stores, belongs to
// no running server (RemoveAbandonedTestStores). The locks it takes are
// released when it returns; the owner lock of a server that starts
// meanwhile is under another name until taken (lockOwner).
func abandoned(base string, now time.Time) bool {
	st, err := os.Lstat(base)
	if err != nil || !st.IsDir() {
		return false
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Getuid() {
		return false
	}
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	ok, f := lockable(filepath.Join(base, ownerLockName))
	if !ok {
		return false
	}
	if f != nil {
		held = append(held, f)
		return true
	}
	if now.Sub(st.ModTime()) < unlockedAfter {
		return false
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		ok, f := lockable(filepath.Join(base, e.Name(), "sbx.lock"))
		if !ok {
			return false
		}
		if f != nil {
			held = append(held, f)
		}
	}
	return true
}
