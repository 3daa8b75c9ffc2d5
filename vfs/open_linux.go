package vfs

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once openat2 turns out to be missing (a kernel before
// 5.6) or filtered (a seccomp profile that does not know it).
var noOpenat2 atomic.Bool

// openat2Beneath opens rel beneath dirfd in one system call, resolving no
// symlink (RESOLVE_NO_SYMLINKS) and nothing outside dirfd
// (RESOLVE_BENEATH). ok is false when openat2 cannot be used: the caller
// then opens one component at a time.
func openat2Beneath(dirfd int, rel string, flags int) (fd int, err error, ok bool) {
	if noOpenat2.Load() {
		return -1, nil, false
	}
	how := unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for tries := 0; ; tries++ {
		fd, err = unix.Openat2(dirfd, rel, &how)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN && tries < 8:
			continue // a concurrent rename the kernel could not rule out: retry
		case err == unix.ENOSYS || err == unix.EINVAL:
			noOpenat2.Store(true)
			return -1, nil, false
		case err == unix.EPERM:
			// seccomp filters answer EPERM for a system call they do not
			// know; an open refused for its own reasons fails the same way
			// one component at a time, which then decides.
			fd, err := openEachBeneath(dirfd, rel, flags)
			if err == nil {
				noOpenat2.Store(true)
			}
			return fd, err, true
		}
		return fd, err, true
	}
}
