//go:build unix

package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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

// OpenDir opens the directory name for reading, following symlinks in
// name as os.Open does: it names the tree beneath which OpenBeneath and
// OpenDirBeneath open.
func OpenDir(name string) (*os.File, error) {
	return openFile(name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

// OpenDirBeneath opens the directory at rel beneath dir for reading (see
// OpenBeneath for what may fail).
func OpenDirBeneath(dir *os.File, rel string) (*os.File, error) {
	fd, err := openBeneath(dir, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), filepath.FromSlash(rel))), nil
}

// OpenBeneath opens the file at rel, a slash-separated path relative to
// dir, for reading, without following a symlink anywhere on the way: if
// rel, or a directory on its way, is a symlink, the open fails (IsGone
// reports it), so nothing outside dir is ever opened, whatever is renamed
// meanwhile. It does not block on a FIFO (O_NONBLOCK, which regular files
// ignore) nor make a terminal the controlling one: a caller that expects a
// regular file checks what it opened with fstat.
func OpenBeneath(dir *os.File, rel string) (*Reader, error) {
	fd, err := openBeneath(dir, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	return &Reader{fd: fd}, nil
}

// openBeneath opens rel beneath dir with openat2 where the kernel has it
// (one system call), else one directory at a time with O_NOFOLLOW.
func openBeneath(dir *os.File, rel string, flags int) (int, error) {
	dirfd := int(dir.Fd())
	if fd, err, ok := openat2Beneath(dirfd, rel, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC); ok {
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		return fd, nil
	}
	fd, err := openEachBeneath(dirfd, rel, flags)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	return fd, nil
}

// openEachBeneath opens rel beneath dirfd one component at a time, each
// with O_NOFOLLOW, each directory with O_DIRECTORY: a symlink anywhere
// fails (ELOOP, or ENOTDIR, EMLINK on some systems). A ".." component is
// EXDEV, as openat2 reports a path that would leave the directory.
func openEachBeneath(dirfd int, rel string, flags int) (int, error) {
	cur := dirfd
	defer func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}()
	for {
		name, rest, more := strings.Cut(rel, "/")
		if name == ".." {
			return -1, unix.EXDEV
		}
		if !more {
			return openatRetry(cur, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		}
		if name == "" || name == "." {
			rel = rest
			continue
		}
		fd, err := openatRetry(cur, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		if err != nil {
			return -1, err
		}
		if cur != dirfd {
			unix.Close(cur)
		}
		cur, rel = fd, rest
	}
}

func openatRetry(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// IsGone reports whether err, from OpenBeneath or OpenDirBeneath, says
// that nothing can be opened at the name without following a symlink: it,
// or a directory on its way, was removed, or replaced by a symlink, by
// something that is not a directory, or by something no open can read (a
// socket, ENXIO).
func IsGone(err error) bool {
	for _, e := range []error{unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.EXDEV, unix.EMLINK, unix.ENXIO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Reader is a file opened for reading by OpenBeneath: a bare descriptor,
// read with read(2) and never offered to the runtime's poller (see
// openFile).
type Reader struct{ fd int }

// Read is read(2); it returns io.EOF at the end of the file.
func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(r.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, &fs.PathError{Op: "read", Path: "", Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Rewind moves the read offset back to the start of the file.
func (r *Reader) Rewind() error {
	_, err := unix.Seek(r.fd, 0, io.SeekStart)
	return err
}

// Fd returns the descriptor, valid until Close.
func (r *Reader) Fd() uintptr { return uintptr(r.fd) }

// Close closes the descriptor.
func (r *Reader) Close() error { return unix.Close(r.fd) }
