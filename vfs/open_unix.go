//go:build unix

package vfs

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// openFile is os.OpenFile for files on disk. os.OpenFile offers every file
// it opens to the runtime's poller, which costs four system calls more per
// file (three fcntl and an epoll_ctl that fails: a disk file cannot be
// polled); a restore or capture of 20,000 files pays that 20,000 times.
// os.NewFile of an fd opened in blocking mode skips the poller.
func openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	mode := uint32(perm.Perm())
	if perm&fs.ModeSetuid != 0 {
		mode |= unix.S_ISUID
	}
	if perm&fs.ModeSetgid != 0 {
		mode |= unix.S_ISGID
	}
	if perm&fs.ModeSticky != 0 {
		mode |= unix.S_ISVTX
	}
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, mode)
		if err == nil {
			return os.NewFile(uintptr(fd), name), nil
		}
		if err != unix.EINTR {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
}
