// Package flock takes advisory whole-file locks (flock(2)) without waiting:
// the store lock beside sbx.db and a restore's staging directory lock are
// taken with it. A lock is held until the file is closed, and a process
// that dies releases its locks. It imports nothing of sbxdb.
package flock
