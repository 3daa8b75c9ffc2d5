package cas

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
)

// TestReadEachLooksUpInParallel: enough keys for lookupAll to split them
// among workers; every blob still arrives once with its bytes, and of two
// missing keys the first in order is the one reported, whichever worker
// finds its key first.
func TestReadEachLooksUpInParallel(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	b := f.s.NewBatch()
	want := map[string][]byte{}
	for i := range 3 * 4096 {
		d := fmt.Appendf(nil, "blob %d", i)
		res, err := b.Add(ctx, Files, d)
		if err != nil {
			t.Fatal(err)
		}
		want[res.Key] = d
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	err := f.s.ReadEach(ctx, keys, 4, func(key string, r *Reader) error {
		got, err := io.ReadAll(r)
		mu.Lock()
		defer mu.Unlock()
		seen[key]++
		if err != nil || !bytes.Equal(got, want[key]) {
			t.Errorf("%s: %q, %v", key, got, err)
		}
		return nil
	})
	if err != nil || len(seen) != len(want) {
		t.Fatalf("ReadEach read %d of %d blobs: %v", len(seen), len(want), err)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s passed %d times", k, n)
		}
	}

	// Two missing keys just before the third of the keys where lookupAll
	// splits them: the worker of the first scans its whole share before it
	// meets it, the next worker meets the second at once.
	slices.Sort(keys)
	n := len(keys) + 2
	next := keys[n/3-1] // the first key of the second share, once the two are in
	second := keyBefore(t, next)
	first := keyBefore(t, second)
	for range 10 {
		err := f.s.ReadEach(ctx, append(keys, second, first), 3, func(string, *Reader) error { return nil })
		var ce *sbxdb.BlobError
		if !errors.Is(err, sbxdb.ErrBlobNotFound) || !errors.As(err, &ce) || ce.Key != first {
			t.Fatalf("ReadEach with two missing keys = %v, want ErrNotFound naming %s", err, first)
		}
	}
}

// keyBefore returns the files key whose digest is one less than key's.
func keyBefore(t *testing.T, key string) string {
	t.Helper()
	d, ok := new(big.Int).SetString(strings.TrimPrefix(key, chain.FilePrefix), 16)
	if !ok {
		t.Fatalf("bad key %s", key)
	}
	return fmt.Sprintf("%s%064x", chain.FilePrefix, d.Sub(d, big.NewInt(1)))
}

// countingWriter counts the Write calls it gets; it fails with err, if
// set, after taking the bytes.
type countingWriter struct {
	buf   bytes.Buffer // not embedded: its ReadFrom would bypass Write
	calls int
	err   error
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.calls++
	w.buf.Write(p)
	return len(p), w.err
}

// TestReaderWriteTo: a packed blob goes to the writer in one Write; a large
// one streams, verified as Read verifies it; the writer's errors come back
// as they are.
func TestReaderWriteTo(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	small, large := text(MaxPacked-1000, 1), text(MaxPacked*3, 2) // small is packed
	for _, d := range [][]byte{small, large} {
		if err := f.s.Put(ctx, keyOf(Files, d), d); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range [][]byte{small, large} {
		r, err := f.s.Open(ctx, keyOf(Files, d))
		if err != nil {
			t.Fatal(err)
		}
		var w countingWriter
		n, err := io.Copy(&w, r)
		r.Close()
		if err != nil || n != int64(len(d)) || !bytes.Equal(w.buf.Bytes(), d) {
			t.Fatalf("io.Copy of a %d-byte blob = %d, %v", len(d), n, err)
		}
		if len(d) == len(small) && w.calls != 1 { // not copied through a buffer
			t.Errorf("a packed blob of %d bytes took %d writes, want 1", len(d), w.calls)
		}
	}

	// The writer's error is its own, not a blob error.
	boom := errors.New("disk full")
	r, err := f.s.Open(ctx, keyOf(Files, large))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.WriteTo(&countingWriter{err: boom})
	r.Close()
	var ce *sbxdb.BlobError
	if err != boom || errors.As(err, &ce) {
		t.Fatalf("WriteTo into a failing writer = %v, want its error", err)
	}

	// A damaged large blob fails WriteTo with ErrCorrupt naming it.
	p := filepath.Join(f.dir, "blobs", largePath(Files, sha256.Sum256(large)))
	stored, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	stored[len(stored)/2] ^= 0x20
	if err := os.WriteFile(p, stored, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = f.s.Open(ctx, keyOf(Files, large))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.WriteTo(io.Discard); !errors.Is(err, sbxdb.ErrBlobCorrupt) || !errors.As(err, &ce) || ce.Key != keyOf(Files, large) {
		t.Fatalf("WriteTo of a damaged large blob = %v", err)
	}
}

// readFromWriter has a ReadFrom, as *os.File has, that copies through its
// own 32 KiB buffer as os.File's fallback does.
type readFromWriter struct{ readFrom, maxWrite int }

func (w *readFromWriter) Write(p []byte) (int, error) {
	w.maxWrite = max(w.maxWrite, len(p))
	return len(p), nil
}

func (w *readFromWriter) ReadFrom(r io.Reader) (int64, error) {
	w.readFrom++
	return io.Copy(struct{ io.Writer }{w}, r)
}

// TestReaderWriteToUsesItsBuffer: a large blob streams through WriteTo's
// pooled buffer, not through the writer's ReadFrom and its smaller one.
func TestReaderWriteToUsesItsBuffer(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	large := text(MaxPacked*3, 2)
	if err := f.s.Put(ctx, keyOf(Files, large), large); err != nil {
		t.Fatal(err)
	}
	r, err := f.s.Open(ctx, keyOf(Files, large))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var w readFromWriter
	if _, err := r.WriteTo(&w); err != nil {
		t.Fatal(err)
	}
	if w.readFrom != 0 || w.maxWrite <= 32<<10 {
		t.Fatalf("WriteTo went through the writer's ReadFrom %d times, largest write %d bytes", w.readFrom, w.maxWrite)
	}
}
