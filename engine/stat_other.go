//go:build !linux

package engine

import "os"

// statOf extracts what the stat cache compares from an lstat result. Off
// Linux it has no inode or ctime; size, mtime and mode still catch ordinary
// edits, and the racy-clean rule applies as everywhere.
func statOf(fi os.FileInfo) fileStat {
	return fileStat{size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: uint32(fi.Mode())}
}
