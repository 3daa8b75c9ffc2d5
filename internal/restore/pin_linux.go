package restore

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// pinnedPath returns a path that names the open directory f whatever is
// renamed or replaced later: /proc/self/fd/N, checked to lead to f; path
// where it does not (no /proc).
func pinnedPath(f *os.File, path string) string {
	p := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	a, err := os.Stat(p)
	if err != nil {
		return path
	}
	if b, err := f.Stat(); err != nil || !os.SameFile(a, b) {
		return path
	}
	return p
}

// sharedDir reports whether another user may rename or replace the
// entries of the directory st describes: it is not this process's user's,
// or it is writable by its group or others.
func sharedDir(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o022 != 0
}

// checkOwn refuses a directory f that is not this process's user's.
func checkOwn(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is not owned by uid %d", f.Name(), os.Geteuid())
	}
	return nil
}
