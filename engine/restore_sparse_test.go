package engine_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
)

// A large file that is mostly zeros restores byte-exact into about its
// non-zero bytes of disk: written from the blob at its first path, and
// copied from the first at a second path with the same bytes. A file that
// ends in zeros gets its size.
func TestRestoreSparseFiles(t *testing.T) {
	f := newCaptureFixture(t)
	if ok, why := engine.ProbeHoles(f.dir); !ok {
		t.Skipf("the test file system makes no holes: %s", why)
	}
	ws := filepath.Join(f.dir, "ws")
	rng := rand.NewChaCha8([32]byte{5, 6})
	const M = 1 << 20
	type part struct {
		at   int64
		data []byte
	}
	noise := func(at int64, n int) part {
		b := make([]byte, n)
		rng.Read(b)
		return part{at, b}
	}
	// Each file is zeros but for its parts. The workspace's files have
	// holes too, so they cost little to write and read.
	files := []struct {
		paths []string
		size  int64
		parts []part
		max   int64 // bytes of disk at most, restored
	}{
		{[]string{"disk.img"}, 64 * M, []part{noise(0, 2*M), noise(62*M, 2*M)}, 8 * M},
		{[]string{"mid.img", "copy/mid.img"}, 4 * M, []part{noise(0, M), noise(3*M, M)}, 3 * M},
		{[]string{"tail.img"}, 4*M + 5, []part{noise(0, M)}, 2 * M},
	}
	for _, fl := range files {
		for _, p := range fl.paths {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			w, err := os.Create(filepath.Join(ws, p))
			if err != nil {
				t.Fatal(err)
			}
			for _, pt := range fl.parts {
				if _, err := w.WriteAt(pt.data, pt.at); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Truncate(fl.size); err != nil {
				t.Fatal(err)
			}
			w.Close()
		}
	}
	res := f.capture(t, ws)
	out := f.restore(t, res.Checkpoint.ID)
	got, want := make([]byte, M), make([]byte, M)
	for _, fl := range files {
		for _, p := range fl.paths {
			r, err := os.Open(filepath.Join(out, p))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			st, err := r.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if st.Size() != fl.size {
				t.Fatalf("%s: %d bytes, want %d", p, st.Size(), fl.size)
			}
			for off := int64(0); off < fl.size; off += M {
				n := min(M, fl.size-off)
				clear(want[:n])
				for _, pt := range fl.parts {
					if pt.at < off+n && pt.at+int64(len(pt.data)) > off {
						lo := max(pt.at, off)
						copy(want[lo-off:n], pt.data[lo-pt.at:])
					}
				}
				if _, err := io.ReadFull(r, got[:n]); err != nil || !bytes.Equal(got[:n], want[:n]) {
					t.Fatalf("%s: the bytes at %d are not those captured (%v)", p, off, err)
				}
			}
			if used := st.Sys().(*syscall.Stat_t).Blocks * 512; used > fl.max {
				t.Errorf("%s: %d bytes take %d bytes of disk, want at most %d", p, st.Size(), used, fl.max)
			}
		}
	}
}
