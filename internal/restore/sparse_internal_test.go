package restore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/vfs"
)

// dataMap returns the data ranges of the file at p as SEEK_DATA and
// SEEK_HOLE report them.
func dataMap(t *testing.T, p string) [][2]int64 {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	var out [][2]int64
	for pos := int64(0); pos < st.Size(); {
		d, h := dataSpan(f, pos, st.Size())
		if d >= st.Size() {
			break
		}
		out = append(out, [2]int64{d, h})
		pos = h
	}
	return out
}

// wantDataMap is the rule sparseWriter follows, applied to b: each
// maximal run of zeros [a, e) leaves the hole [alignUp(a), alignDown(e))
// (to the end of b for a trailing run) if that covers at least sparseMin
// bytes; the rest is data.
func wantDataMap(b []byte) [][2]int64 {
	var holes [][2]int64
	for i := 0; i < len(b); {
		if b[i] != 0 {
			i++
			continue
		}
		j := i
		for j < len(b) && b[j] == 0 {
			j++
		}
		lo := (int64(i) + sparseBlock - 1) &^ (sparseBlock - 1)
		hi := int64(j) &^ (sparseBlock - 1)
		if j == len(b) {
			hi = int64(j)
		}
		if hi-lo >= sparseMin {
			holes = append(holes, [2]int64{lo, hi})
		}
		i = j
	}
	var data [][2]int64
	pos := int64(0)
	for _, h := range holes {
		if h[0] > pos {
			data = append(data, [2]int64{pos, h[0]})
		}
		pos = h[1]
	}
	if pos < int64(len(b)) {
		data = append(data, [2]int64{pos, int64(len(b))})
	}
	return data
}

// A sparseWriter writes exactly the bytes it is given, however they are cut
// into writes, and leaves holes where its rule says: zero runs covering at
// least 64 KiB of whole 4 KiB blocks, a trailing one included.
func TestSparseWriter(t *testing.T) {
	dir := t.TempDir()
	holes, why := testkit.ProbeHoles(dir)
	if !holes {
		t.Logf("the holes are not checked: %s (%s)", why, dir)
	}
	r := rand.New(rand.NewPCG(3, 4))
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(255) + 1)
		}
		return b
	}
	zeros := func(n int) []byte { return make([]byte, n) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	const K = 1 << 10
	patterns := map[string][]byte{
		"all data":                     data(200 * K),
		"hole in the middle":           cat(data(4*K), zeros(124*K), data(4*K)),
		"run one block short":          cat(data(4*K), zeros(60*K), data(4*K)),
		"unaligned run of 64 KiB":      cat(data(5000), zeros(68*K+5000-4096), data(10)),
		"unaligned run just too short": cat(data(5000), zeros(68*K+5000-4097), data(10)),
		"all zeros":                    zeros(200 * K),
		"short trailing zeros":         cat(data(100*K), zeros(10*K)),
		"long trailing zeros":          cat(data(100*K), zeros(100*K+3)),
		"leading hole":                 cat(zeros(100*K), data(3)),
		"zero data blocks":             cat(data(1), zeros(8*K), data(1), zeros(70*K), data(4*K+1), zeros(64*K), data(1)),
		"many holes":                   cat(data(1), zeros(300*K), data(7*K), zeros(65*K), data(1), zeros(129*K)),
	}
	for name, want := range patterns {
		for _, chunk := range []int{len(want), 4 * K, 1000, 64*K + 7, 0} {
			t.Run(fmt.Sprintf("%s/%d", name, chunk), func(t *testing.T) {
				p := filepath.Join(dir, "f")
				os.Remove(p)
				f, err := vfs.OS.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				w := newSparseWriter(f)
				for rest := want; len(rest) > 0; {
					n := chunk
					if n == 0 { // random sizes
						n = 1 + r.IntN(20*K)
					}
					n = min(n, len(rest))
					if m, err := w.Write(rest[:n]); err != nil || m != n {
						t.Fatalf("Write = %d, %v", m, err)
					}
					rest = rest[n:]
				}
				if err := w.finish(); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(p)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("the file holds other bytes (%d, want %d; %v)", len(got), len(want), err)
				}
				if holes {
					if got, want := dataMap(t, p), wantDataMap(want); fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("data at %v, want %v", got, want)
					}
				}
			})
		}
	}
}

// errFile fails its Seek and Truncate.
type errFile struct{ vfs.File }

var errSeek = errors.New("seek refused")

func (errFile) Seek(int64, int) (int64, error) { return 0, errSeek }
func (errFile) Truncate(int64) error           { return errSeek }

// A failed Seek or Truncate is the write's error.
func TestSparseWriterErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tail := range []bool{false, true} {
		f, err := vfs.OS.OpenFile(filepath.Join(dir, fmt.Sprint(tail)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		w := newSparseWriter(errFile{f})
		b := append(make([]byte, 128<<10), 1)
		if tail {
			b = b[:len(b)-1]
		}
		_, err = io.Copy(w, bytes.NewReader(b))
		if err == nil {
			err = w.finish()
		}
		f.Close()
		if !errors.Is(err, errSeek) {
			t.Errorf("trailing hole %v: error %v, want the Seek's or Truncate's", tail, err)
		}
	}
}
