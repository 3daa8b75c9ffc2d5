//go:build unix

package peers

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// DiskUsage returns the bytes allocated to dir and everything under it
// (st_blocks × 512 of each entry, directories and symlinks included, like
// `du -s --block-size=1`). Symlinks are not followed; a file with several
// hard links under dir is counted once.
func DiskUsage(dir string) (int64, error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var n int64
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return &fs.PathError{Op: "stat", Path: p, Err: syscall.ENOTSUP}
		}
		if !fi.IsDir() && st.Nlink > 1 {
			k := inode{uint64(st.Dev), uint64(st.Ino)}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		n += int64(st.Blocks) * 512
		return nil
	})
	return n, err
}
