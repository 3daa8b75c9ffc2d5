package engine

import (
	"os"
	"syscall"
)

// statOf extracts what the stat cache compares from an lstat result.
func statOf(fi os.FileInfo) fileStat {
	st := fileStat{size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: uint32(fi.Mode())}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = s.Ino
		st.ctime = s.Ctim.Nano()
	}
	return st
}
