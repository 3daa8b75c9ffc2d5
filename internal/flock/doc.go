// Package flock holds sbxdb's advisory file locks (flock(2)): TryLock,
// which takes one without waiting (a restore's staging directory lock),
// and the store lock, <dir>/sbx.lock, that every Open holds until Close
// (LockStore), naming a writer that holds it (Holder). A lock is held until
// its file is closed, and a process that dies releases its locks. It
// imports the contract (ErrLocked) and internal/proc only.
package flock
