//go:build unix && !linux

package vfs

// openat2Beneath reports that openat2 is Linux's: elsewhere paths are
// opened one component at a time.
func openat2Beneath(dirfd int, rel string, flags int) (int, error, bool) { return -1, nil, false }
