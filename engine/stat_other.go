//go:build !linux

package engine

import (
	"os"
	"path/filepath"
)

// lstatAt stats name inside dir. Off Linux it has no inode or ctime; size,
// mtime and mode still catch ordinary edits, and the racy-clean rule
// applies as everywhere.
func lstatAt(dir *os.File, name string) (fileStat, error) {
	fi, err := os.Lstat(filepath.Join(dir.Name(), name))
	if err != nil {
		return fileStat{}, err
	}
	return fileStat{size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: uint32(fi.Mode())}, nil
}
