package engine

import (
	"os"

	"golang.org/x/sys/unix"
)

// lstatAt stats name inside the open directory dir without following a
// symlink. fstatat on the directory's descriptor resolves one name, not the
// whole path from the root: about a third of a capture's walk is lstat.
func lstatAt(dir *os.File, name string) (fileStat, error) {
	var s unix.Stat_t
	for {
		err := unix.Fstatat(int(dir.Fd()), name, &s, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fileStat{}, &os.PathError{Op: "lstat", Path: name, Err: err}
		}
		break
	}
	return fileStat{size: s.Size, mtime: s.Mtim.Nano(), ctime: s.Ctim.Nano(), ino: s.Ino, mode: s.Mode}, nil
}
