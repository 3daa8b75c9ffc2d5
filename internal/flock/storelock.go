package flock

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/proc"
)

// StoreLockName is the store's lock: <dir>/sbx.lock, created once and never
// renamed, replaced or removed. Every Open takes it (exclusive for a
// writable handle, shared for a read-only one) before it reads sbx.db, and
// holds it until Close.
//
// Why a file of its own: bbolt locks the database file itself, after
// opening it. Compact renames a new file over sbx.db while it holds that
// lock, so a process waiting for the old file's lock would get it on the
// unlinked inode once Compact closed, and commit there: every write it
// acknowledged would vanish with the file. A process waiting on sbx.lock
// instead opens sbx.db by name only once it holds the lock, when no rename
// can be in progress, so it always opens the current file.
//
// While a writable handle holds it, the file holds that process's identity
// (proc.Identity as JSON), so a process kept out can name it; Close empties
// it. Read-only holders share the lock and write nothing.
const StoreLockName = "sbx.lock"

// StoreLock is a held lock on a store's lock file; nil where the file
// could not be made (a read-only open on a read-only file system), and
// then bbolt's own lock is the only one.
type StoreLock struct {
	f      *os.File
	writer bool // the file names this process while it holds the lock
}

// LockStore takes dir's lock file, waiting up to timeout for another
// holder, and fails with ErrLocked naming the holder once it has waited
// that long.
func LockStore(dir string, readOnly bool, timeout time.Duration) (*StoreLock, error) {
	path := filepath.Join(dir, StoreLockName)
	flag := os.O_RDWR | os.O_CREATE
	if readOnly {
		flag = os.O_RDONLY | os.O_CREATE
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil && readOnly {
		// A store on a read-only medium cannot be compacted or written
		// either: there is nothing for the lock file to guard against.
		if f, err = os.Open(path); err != nil {
			return nil, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sbxdb: lock file: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		ok, err := TryLock(f, !readOnly)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("sbxdb: locking %s: %w", path, err)
		}
		if ok {
			l := &StoreLock{f: f, writer: !readOnly}
			if l.writer {
				// Best effort: the name only serves the message of a
				// process kept out.
				id, _ := json.Marshal(proc.Self())
				if f.Truncate(0) == nil {
					f.WriteAt(id, 0)
				}
			}
			return l, nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%w: %s is held by %s", sbxdb.ErrLocked, dir, Holder(dir))
		}
		time.Sleep(wait)
	}
}

// Release lets the next holder in. Closing the descriptor drops the lock.
func (l *StoreLock) Release() {
	if l != nil && l.f != nil {
		if l.writer {
			l.f.Truncate(0)
		}
		l.f.Close()
		l.f = nil
	}
}

// Holder names the process holding dir's lock, as well as it can be known:
// a writer names itself in the lock file; an empty file, or one naming a
// process that is gone, is held by readers.
func Holder(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, StoreLockName))
	var id proc.Identity
	if err != nil || json.Unmarshal(b, &id) != nil || id.IsZero() {
		return "another process, reading it"
	}
	switch proc.Check(id) {
	case proc.Alive:
		return "another process (" + id.String() + ")"
	case proc.Gone:
		return "another process, reading it"
	}
	if id.OtherNamespace() {
		// "a process in another pid namespace on HOST (pid N there)"
		// names the holder by itself.
		return id.String() + ", if it still runs"
	}
	return "another process (" + id.String() + ", if it still runs)"
}
