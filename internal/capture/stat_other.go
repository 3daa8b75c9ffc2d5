//go:build !linux

package capture

import (
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sbxdb/sbxdb/vfs"
)

// lstatAt stats name inside dir. Off Linux it has no inode, ctime or
// device; size, mtime and mode still catch ordinary edits, and the
// racy-clean rule applies as everywhere.
func lstatAt(dir *os.File, name string) (fileStat, uint64, error) {
	fi, err := os.Lstat(filepath.Join(dir.Name(), name))
	if err != nil {
		return fileStat{}, 0, err
	}
	return statOfInfo(fi), 0, nil
}

// fstatOpen stats the file f opened at rel beneath root. Off Linux it
// stats the path,
// in the shape lstatAt gives: the bytes were read from f, beneath the
// workspace, whatever the path leads to now.
func fstatOpen(f *vfs.Reader, root, rel string) (fileStat, uint64, error) {
	fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return fileStat{}, 0, err
	}
	return statOfInfo(fi), 0, nil
}

func statOfInfo(fi fs.FileInfo) fileStat {
	return fileStat{size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: uint32(fi.Mode())}
}

// isRegular reports whether a stat's mode is a regular file's.
func isRegular(st fileStat) bool { return fs.FileMode(st.mode).IsRegular() }

// readlinkAt reads the target of the symlink name inside dir.
func readlinkAt(dir *os.File, name string) (string, error) {
	return os.Readlink(filepath.Join(dir.Name(), name))
}
