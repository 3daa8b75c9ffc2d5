package engine

import (
	"os"
	"syscall"
)

// dbStatOf returns what a record of a clean close compares of fi.
func dbStatOf(fi os.FileInfo) (dbFileStat, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return dbFileStat{}, false
	}
	return dbFileStat{
		dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}, true
}
