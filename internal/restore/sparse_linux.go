package restore

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// hasHole reports whether the first size bytes of f hold a hole
// (SEEK_HOLE finds one before size). It leaves f's offset at 0.
func hasHole(f *os.File, size int64) bool {
	h, err := f.Seek(0, unix.SEEK_HOLE)
	if _, serr := f.Seek(0, io.SeekStart); serr != nil {
		return false
	}
	return err == nil && h < size
}

// dataSpan returns the next range [data, hole) of f's first size bytes at
// or after pos that may hold data; data is size when none does. Where
// SEEK_DATA fails, everything from pos is data.
func dataSpan(f *os.File, pos, size int64) (data, hole int64) {
	d, err := f.Seek(pos, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) || err == nil && d >= size {
		return size, size
	}
	if err != nil {
		return pos, size
	}
	h, err := f.Seek(d, unix.SEEK_HOLE)
	if err != nil || h > size {
		h = size
	}
	return d, h
}
