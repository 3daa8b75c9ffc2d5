package boltcheck

import (
	"os"
	"syscall"
)

// StatOf returns what a record of a clean close compares of fi.
func StatOf(fi os.FileInfo) (FileStat, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileStat{}, false
	}
	return FileStat{
		dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}, true
}
