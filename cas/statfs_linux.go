package cas

import "syscall"

// statfsSize returns the size of the file system holding path.
func statfsSize(path string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, false
	}
	return int64(st.Blocks) * int64(st.Bsize), true
}
