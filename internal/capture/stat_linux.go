package capture

import (
	"os"

	"github.com/sbxdb/sbxdb/vfs"
	"golang.org/x/sys/unix"
)

// lstatAt stats name inside the open directory dir without following a
// symlink, and returns its device too. fstatat on the directory's
// descriptor resolves one name, not the whole path from the root: about a
// third of a capture's walk is lstat.
func lstatAt(dir *os.File, name string) (fileStat, uint64, error) {
	var s unix.Stat_t
	for {
		err := unix.Fstatat(int(dir.Fd()), name, &s, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fileStat{}, 0, &os.PathError{Op: "lstat", Path: name, Err: err}
		}
		return statOf(&s), s.Dev, nil
	}
}

// fstatOpen stats the open file f (opened at rel beneath root, which only
// other systems use) and returns its device too.
func fstatOpen(f *vfs.Reader, root, rel string) (fileStat, uint64, error) {
	var s unix.Stat_t
	for {
		err := unix.Fstat(int(f.Fd()), &s)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fileStat{}, 0, &os.PathError{Op: "fstat", Path: rel, Err: err}
		}
		return statOf(&s), s.Dev, nil
	}
}

func statOf(s *unix.Stat_t) fileStat {
	return fileStat{size: s.Size, mtime: s.Mtim.Nano(), ctime: s.Ctim.Nano(), ino: s.Ino, mode: s.Mode}
}

// isRegular reports whether a stat's mode is a regular file's.
func isRegular(st fileStat) bool { return st.mode&unix.S_IFMT == unix.S_IFREG }

// readlinkAt reads the target of the symlink name inside the open
// directory dir.
func readlinkAt(dir *os.File, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
		if err == unix.EINTR {
			size /= 2
			continue
		}
		if err != nil {
			return "", &os.PathError{Op: "readlink", Path: name, Err: err}
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
