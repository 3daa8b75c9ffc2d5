package capture

import (
	"bytes"
	"io"
	"testing"
)

// countingReader counts the reads of a file.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// A read of a file of a known size stops once it holds that many bytes:
// one read(2), not a second to find the end. Without a size, with a size
// of 0, or when the file holds more than it said, it reads to the end.
func TestReadAllStopsAtTheSize(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB: more than the buffer's start
	cases := []struct {
		name      string
		data      []byte
		want      int64
		reads     int
		wantBytes int
	}{
		{"known size", data, int64(len(data)), 1, len(data)},
		{"empty", nil, 0, 1, 0},                 // a size of 0 vouches for nothing: one read finds the end
		{"stats as empty", data[:37], 0, 2, 37}, // a pseudo-file (procfs): its bytes, which its stat does not match
		{"to the end", data, -1, 4, len(data)},  // 64, 128 and 128 KiB, then the end
		{"grew", data, 1000, 4, len(data)},
		{"shrank", data[:500], 1000, 2, 500},
	}
	for _, c := range cases {
		r := &countingReader{r: bytes.NewReader(c.data)}
		got, err := readAll(r, make([]byte, 0, 64<<10), c.want, smallFile)
		if err != nil || !bytes.Equal(got, c.data[:c.wantBytes]) {
			t.Errorf("%s: %d bytes, %v", c.name, len(got), err)
		}
		if r.reads != c.reads {
			t.Errorf("%s: %d reads, want %d", c.name, r.reads, c.reads)
		}
	}
	r := &countingReader{r: bytes.NewReader(make([]byte, smallFile+1))}
	if _, err := readAll(r, nil, smallFile+1, smallFile); err != errTooBig {
		t.Errorf("past the limit: %v", err)
	}
}
