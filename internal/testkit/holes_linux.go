package testkit

import (
	"bytes"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ProbeHoles reports whether files in dir can have holes, and if not, why:
// a file with 1 MiB skipped between two written 4 KiB blocks must report a
// hole (SEEK_HOLE) and take less disk than its size. Tests of sparse
// restores skip where it says no.
func ProbeHoles(dir string) (bool, string) {
	const block = 4 << 10
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		return false, err.Error()
	}
	defer os.Remove(f.Name())
	defer f.Close()
	b := bytes.Repeat([]byte{1}, block)
	if _, err := f.Write(b); err != nil {
		return false, err.Error()
	}
	if _, err := f.WriteAt(b, 1<<20); err != nil {
		return false, err.Error()
	}
	h, err := f.Seek(0, unix.SEEK_HOLE)
	if _, serr := f.Seek(0, io.SeekStart); serr != nil || err != nil || h >= 1<<20+block {
		return false, "SEEK_HOLE finds no hole in a file written with one"
	}
	st, err := f.Stat()
	if err != nil {
		return false, err.Error()
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Blocks*512 >= 1<<20 {
		return false, "a file with a 1 MiB hole takes 1 MiB of disk"
	}
	return true, ""
}
