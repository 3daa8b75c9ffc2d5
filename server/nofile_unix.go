//go:build unix

package server

import "syscall"

// openFileLimit returns the process's limit of open files (the soft
// RLIMIT_NOFILE), or DefaultMaxConns*2 when it cannot be read.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return DefaultMaxConns * 2
	}
	return r.Cur
}
