//go:build !linux

package testkit

// ProbeHoles reports false: a restore makes holes only on Linux
// (SEEK_HOLE and SEEK_DATA).
func ProbeHoles(string) (bool, string) {
	return false, "a restore makes holes only on Linux"
}
