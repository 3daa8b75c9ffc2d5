package restore

import (
	"bytes"
	"context"
	"io"
	"os"

	"github.com/sbxdb/sbxdb/internal/progress"
	"github.com/sbxdb/sbxdb/vfs"
)

// A restored file of at least sparseMin bytes is written with holes: its
// runs of zero bytes that cover at least sparseMin bytes of whole
// sparseBlock blocks (at offsets that are multiples of sparseBlock) are
// skipped instead of written. sparseBlock is 4 KiB, the page size and the
// default block size of ext4, XFS, btrfs and tmpfs: on a file system with
// larger blocks a run covers fewer whole blocks and leaves a smaller hole,
// or none. What a reader of the file sees is unchanged, and so is the
// verification of the blob (every byte, zeros included, is hashed).
const (
	sparseBlock = 4 << 10
	sparseMin   = 64 << 10
)

// zeroBlock is sparseMin zero bytes, never written to.
var zeroBlock [sparseMin]byte

// sparseWriter writes a file front to back through f, leaving holes (see
// sparseMin): a run of zero blocks long enough is skipped with Seek, and
// finish sets the file's size with Truncate when the file ends in one.
// Every other byte, zero or not, is written. Testing a block for zeros is
// one memory comparison that stops at the first non-zero byte, so data
// without long zero runs costs nothing measurable, and it is written in as
// many Write calls as it was given in.
type sparseWriter struct {
	f   vfs.File
	off int64 // bytes given so far
	// run is where the trailing run of zero bytes not yet written starts
	// (a block boundary), or -1. When run < 0, the file's offset is off;
	// otherwise it is run, and bytes [run, off) are zeros.
	run int64
}

func newSparseWriter(f vfs.File) *sparseWriter { return &sparseWriter{f: f, run: -1} }

// Write takes p's bytes. p is cut at the file's block boundaries; the
// blocks of data are written together, with any run of zero blocks
// between two of them in p too short to be a hole.
func (w *sparseWriter) Write(p []byte) (int, error) {
	base := w.off
	piece := func(i int) int { // the length of the piece at p[i:]
		return min(sparseBlock-int((base+int64(i))%sparseBlock), len(p)-i)
	}
	start, i := 0, 0 // p[start:i] is data not yet written
	for i < len(p) {
		j := i
		for j < len(p) {
			n := piece(j)
			if !bytes.Equal(p[j:j+n], zeroBlock[:n]) {
				break
			}
			j += n
		}
		switch {
		case j == i: // a piece of data
			i += piece(i)
			continue
		case i > 0 && j < len(p) && j-i < sparseMin: // too short, between data
			i = j
			continue
		}
		if err := w.data(p[start:i]); err != nil {
			return start, err
		}
		if err := w.zeros(int64(j - i)); err != nil {
			return i, err
		}
		start, i = j, j
	}
	if err := w.data(p[start:]); err != nil {
		return start, err
	}
	return len(p), nil
}

// data writes b at the end of the bytes given, after the pending run of
// zeros: skipped (a hole) up to the last block boundary if it is long
// enough, else written.
func (w *sparseWriter) data(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if w.run >= 0 {
		at := w.run
		if end := w.off &^ (sparseBlock - 1); end-w.run >= sparseMin {
			if _, err := w.f.Seek(end, io.SeekStart); err != nil {
				return err
			}
			at = end
		}
		if err := w.writeZeros(w.off - at); err != nil {
			return err
		}
		w.run = -1
	}
	_, err := w.f.Write(b)
	w.off += int64(len(b))
	return err
}

// zeros takes n zero bytes. A run starts at a block boundary: the zeros
// before the next one are written at once.
func (w *sparseWriter) zeros(n int64) error {
	if n <= 0 {
		return nil
	}
	if w.run < 0 {
		head := min(n, -w.off&(sparseBlock-1))
		if err := w.writeZeros(head); err != nil {
			return err
		}
		w.off += head
		n -= head
		if n == 0 {
			return nil
		}
		w.run = w.off
	}
	w.off += n
	return nil
}

// finish ends the file: a trailing run of zeros long enough is a hole
// (Truncate sets the size), a shorter one is written.
func (w *sparseWriter) finish() error {
	if w.run < 0 {
		return nil
	}
	if w.off-w.run >= sparseMin {
		return w.f.Truncate(w.off)
	}
	err := w.writeZeros(w.off - w.run)
	w.run = -1
	return err
}

func (w *sparseWriter) writeZeros(n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeroBlock)))
		if _, err := w.f.Write(zeroBlock[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// copySparse copies the first size bytes of src, a file with holes, to f
// through a sparseWriter, reading only its data (dataSpan): the holes of
// src become holes of f. It stops between two pieces of at most copyChunk
// bytes once ctx ends, and counts each piece and each hole in fb.
func copySparse(ctx context.Context, src *os.File, f vfs.File, size int64, fb *progress.File) error {
	w := newSparseWriter(f)
	buf := make([]byte, 256<<10)
	for pos := int64(0); pos < size; {
		data, hole := dataSpan(src, pos, size)
		if err := w.zeros(data - pos); err != nil {
			return err
		}
		fb.Add(data - pos)
		for pos = data; pos < hole; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := io.CopyBuffer(w, io.NewSectionReader(src, pos, min(copyChunk, hole-pos)), buf)
			pos += n
			fb.Add(n)
			if err != nil {
				return err
			}
			if n == 0 {
				return io.ErrUnexpectedEOF
			}
		}
	}
	return w.finish()
}
