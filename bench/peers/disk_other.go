//go:build !unix

package peers

import "errors"

// DiskUsage returns the bytes allocated to dir and everything under it; it
// needs st_blocks, so it is only implemented on Unix systems.
func DiskUsage(dir string) (int64, error) {
	return 0, errors.New("peers: DiskUsage is only implemented on Unix")
}
