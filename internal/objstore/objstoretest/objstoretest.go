// Package objstoretest is the conformance suite every objstore.Store
// implementation passes: the behaviour the Store documentation promises,
// checked the same way on a local directory and on an S3 server.
package objstoretest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"testing"

	"github.com/sbxdb/sbxdb/internal/objstore"
)

// Options sizes the suite for an implementation.
type Options struct {
	// Multipart is a size at which a Put takes the implementation's
	// multipart path (0: none), so the failure cases run on it too.
	Multipart int64
	// Many is how many objects the listing test puts; more than the
	// implementation's list page holds, so pagination is crossed.
	Many int
	// Big is the size of the streamed Put whose memory is checked (0: skip).
	Big int64
	// MaxHeap bounds how far the heap may grow above its size before that
	// Put while the Put runs: a Put that buffered the stream would exceed it.
	MaxHeap uint64
	// AtomicIfAbsent: concurrent IfAbsent Puts of one name let exactly one
	// through.
	AtomicIfAbsent bool
}

// Run runs the suite; open returns a new, empty store for each subtest and
// arranges for its cleanup.
func Run(t *testing.T, open func(t *testing.T) objstore.Store, o Options) {
	ctx := context.Background()
	sub := func(name string, f func(t *testing.T, s objstore.Store)) {
		t.Run(name, func(t *testing.T) { f(t, open(t)) })
	}

	sub("PutOpenStat", func(t *testing.T, s objstore.Store) {
		data := randBytes(1, 10_000)
		mustPut(t, s, "a/b/c.pack", data)
		if got := read(t, s, "a/b/c.pack", 0, -1); !bytes.Equal(got, data) {
			t.Fatalf("whole read: %d bytes, want the %d put", len(got), len(data))
		}
		for _, r := range [][2]int64{{0, 1}, {10, 100}, {9_000, 1_000}, {9_999, 1}, {500, 0}, {4_000, -1}} {
			want := data[r[0]:]
			if r[1] >= 0 {
				want = want[:r[1]]
			}
			if got := read(t, s, "a/b/c.pack", r[0], r[1]); !bytes.Equal(got, want) {
				t.Errorf("read(%d, %d): %d bytes, not the %d expected", r[0], r[1], len(got), len(want))
			}
		}
		info, err := s.Stat(ctx, "a/b/c.pack")
		if err != nil {
			t.Fatal(err)
		}
		if info.Name != "a/b/c.pack" || info.Size != int64(len(data)) || info.Modified.IsZero() {
			t.Errorf("Stat = %+v", info)
		}
		mustPut(t, s, "empty", nil)
		if got := read(t, s, "empty", 0, -1); len(got) != 0 {
			t.Errorf("empty object read %d bytes", len(got))
		}
	})

	sub("ReadPastEnd", func(t *testing.T, s objstore.Store) {
		data := randBytes(2, 1000)
		mustPut(t, s, "x", data)
		for _, r := range [][2]int64{{990, 20}, {1000, 1}, {1500, 10}, {0, 1001}} {
			rc, err := s.Open(ctx, "x", r[0], r[1])
			if err != nil {
				t.Fatalf("Open(%d, %d): %v", r[0], r[1], err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("read(%d, %d) past the end: err %v, want io.ErrUnexpectedEOF", r[0], r[1], err)
			}
			if want := data[min(r[0], 1000):]; !bytes.Equal(got, want) {
				t.Errorf("read(%d, %d) past the end gave %d bytes, want the %d there are", r[0], r[1], len(got), len(want))
			}
		}
		for _, off := range []int64{1000, 2000} {
			if got := read(t, s, "x", off, -1); len(got) != 0 {
				t.Errorf("read(%d, to end) gave %d bytes", off, len(got))
			}
		}
		if _, err := s.Open(ctx, "x", -1, 10); err == nil {
			t.Error("Open at a negative offset succeeded")
		}
	})

	sub("Missing", func(t *testing.T, s objstore.Store) {
		_, err := s.Stat(ctx, "no/such")
		wantNotExist(t, "Stat", err)
		_, err = s.Open(ctx, "no/such", 0, -1)
		wantNotExist(t, "Open", err)
		_, err = s.Open(ctx, "no/such", 5, 10)
		wantNotExist(t, "ranged Open", err)
		if err := s.Delete(ctx, "no/such"); err != nil {
			t.Errorf("Delete of a missing object: %v", err)
		}
		mustPut(t, s, "no/such/deeper", []byte("x"))
		_, err = s.Stat(ctx, "no/such")
		wantNotExist(t, "Stat of a name that is only a prefix", err)
		if err := s.Delete(ctx, "no/such/deeper"); err != nil {
			t.Fatal(err)
		}
		_, err = s.Stat(ctx, "no/such/deeper")
		wantNotExist(t, "Stat after Delete", err)
		if err := s.Delete(ctx, "no/such/deeper"); err != nil {
			t.Errorf("second Delete: %v", err)
		}
	})

	sub("Replace", func(t *testing.T, s objstore.Store) {
		mustPut(t, s, "r", []byte("first"))
		mustPut(t, s, "r", []byte("second, longer"))
		if got := read(t, s, "r", 0, -1); string(got) != "second, longer" {
			t.Errorf("after a replacing Put read %q", got)
		}
	})

	sub("IfAbsent", func(t *testing.T, s objstore.Store) {
		sizes := []int64{100}
		if o.Multipart > 0 {
			sizes = append(sizes, o.Multipart+1)
		}
		for i, size := range sizes {
			name := fmt.Sprintf("abs/%d", i)
			first := randBytes(uint64(10+i), int(size))
			if err := s.Put(ctx, name, bytes.NewReader(first), size, objstore.PutOptions{IfAbsent: true}); err != nil {
				t.Fatalf("IfAbsent Put of a new name: %v", err)
			}
			second := randBytes(uint64(20+i), int(size))
			err := s.Put(ctx, name, bytes.NewReader(second), size, objstore.PutOptions{IfAbsent: true})
			if !errors.Is(err, objstore.ErrExists) || !errors.Is(err, fs.ErrExist) {
				t.Fatalf("IfAbsent Put of a taken name (%d bytes): %v, want ErrExists", size, err)
			}
			if got := read(t, s, name, 0, -1); !bytes.Equal(got, first) {
				t.Errorf("IfAbsent Put of a taken name (%d bytes) changed the object", size)
			}
		}
	})

	if o.AtomicIfAbsent {
		sub("IfAbsentRace", func(t *testing.T, s objstore.Store) {
			const n = 8
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					data := randBytes(uint64(i), 1000)
					errs[i] = s.Put(ctx, "race", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfAbsent: true})
				})
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, objstore.ErrExists):
					t.Errorf("racing IfAbsent Put: %v", err)
				}
			}
			if won != 1 {
				t.Errorf("%d of %d racing IfAbsent Puts succeeded, want 1", won, n)
			}
		})
	}

	failSizes := []int64{10_000}
	if o.Multipart > 0 {
		failSizes = append(failSizes, 2*o.Multipart+100)
	}
	sub("FailedPutLeavesNothing", func(t *testing.T, s objstore.Store) {
		for _, size := range failSizes {
			// The reader fails past the first part, so a multipart upload
			// is under way when it does.
			boom := errors.New("reader broke")
			r := io.MultiReader(io.LimitReader(newGen(3), size-50), errReader{boom})
			err := s.Put(ctx, "f/fail", r, size, objstore.PutOptions{})
			if !errors.Is(err, boom) {
				t.Errorf("Put from a failing reader (%d bytes): %v, want the reader's error", size, err)
			}
			_, err = s.Stat(ctx, "f/fail")
			wantNotExist(t, "Stat after a failed Put", err)

			err = s.Put(ctx, "f/short", io.LimitReader(newGen(4), size-50), size, objstore.PutOptions{})
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("Put from a short reader (%d bytes): %v, want io.ErrUnexpectedEOF", size, err)
			}
			_, err = s.Stat(ctx, "f/short")
			wantNotExist(t, "Stat after a short Put", err)

			cctx, cancel := context.WithCancel(ctx)
			r = io.MultiReader(io.LimitReader(newGen(5), size-50), cancelReader{cancel}, newGen(6))
			err = s.Put(cctx, "f/cancel", r, size, objstore.PutOptions{})
			cancel()
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Put cancelled mid-stream (%d bytes): %v, want context.Canceled", size, err)
			}
			_, err = s.Stat(ctx, "f/cancel")
			wantNotExist(t, "Stat after a cancelled Put", err)

			// A failed replacing Put leaves the old object.
			mustPut(t, s, "f/old", []byte("old"))
			r = io.MultiReader(io.LimitReader(newGen(7), size-50), errReader{boom})
			if err := s.Put(ctx, "f/old", r, size, objstore.PutOptions{}); err == nil {
				t.Error("failed replacing Put succeeded")
			}
			if got := read(t, s, "f/old", 0, -1); string(got) != "old" {
				t.Errorf("failed replacing Put left %d bytes, not the old object", len(got))
			}
		}
		if err := s.List(ctx, "", func(i objstore.Info) error {
			if i.Name != "f/old" {
				t.Errorf("failed Puts left %q", i.Name)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})

	sub("UnknownSize", func(t *testing.T, s objstore.Store) {
		for _, size := range []int64{0, 1000, o.Multipart + 7} {
			data := randBytes(8, int(size))
			if err := s.Put(ctx, "u", bytes.NewBuffer(data), -1, objstore.PutOptions{}); err != nil {
				t.Fatalf("Put of %d bytes of unknown size: %v", size, err)
			}
			if got := read(t, s, "u", 0, -1); !bytes.Equal(got, data) {
				t.Errorf("Put of %d bytes of unknown size stored %d", size, len(got))
			}
		}
	})

	sub("ListOrder", func(t *testing.T, s objstore.Store) {
		// "a-c" sorts before "a/b" byte-wise ('-' < '/') although a
		// directory walk that sorts entry names meets "a" first.
		put := []string{"a/b", "a-c", "a0", "a/c/d", "a/c-d", "b", "packs/0a.pack", "packs/0b.pack", "packs/1a.pack", "z/z/z/z"}
		for i, n := range put {
			mustPut(t, s, n, bytes.Repeat([]byte{'x'}, i))
		}
		names := slices.Sorted(slices.Values(put))
		for _, c := range []struct {
			prefix string
			want   []string
		}{
			{"", names},
			{"a", []string{"a-c", "a/b", "a/c-d", "a/c/d", "a0"}},
			{"a/", []string{"a/b", "a/c-d", "a/c/d"}},
			{"a/c", []string{"a/c-d", "a/c/d"}},
			{"packs/0", []string{"packs/0a.pack", "packs/0b.pack"}},
			{"packs/1a.pack", []string{"packs/1a.pack"}},
			{"q", nil},
		} {
			got := list(t, s, c.prefix)
			if !slices.Equal(got, c.want) {
				t.Errorf("List(%q) = %q, want %q", c.prefix, got, c.want)
			}
		}
		err := s.List(ctx, "", func(i objstore.Info) error {
			if i.Size != int64(slices.Index(put, i.Name)) {
				t.Errorf("List gave %q size %d", i.Name, i.Size)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		stop := errors.New("stop")
		calls := 0
		err = s.List(ctx, "", func(objstore.Info) error { calls++; return stop })
		if err != stop || calls != 1 {
			t.Errorf("List stopped by fn: err %v after %d calls, want fn's error after 1", err, calls)
		}
	})

	if o.Many > 0 {
		sub("ListMany", func(t *testing.T, s objstore.Store) {
			var want []string
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			for i := range o.Many {
				name := fmt.Sprintf("m/%05d", (i*7919)%o.Many)
				want = append(want, name)
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					if err := s.Put(ctx, name, bytes.NewReader([]byte(name)), int64(len(name)), objstore.PutOptions{}); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			mustPut(t, s, "n", nil)
			slices.Sort(want)
			if got := list(t, s, "m/"); !slices.Equal(got, want) {
				t.Errorf("List of %d objects gave %d, or out of order", len(want), len(got))
			}
		})
	}

	sub("InvalidNames", func(t *testing.T, s objstore.Store) {
		for _, name := range []string{"", "/abs", "a//b", "a/", "../x", "a/../b", "./a", "a\x00b", `a\b`, objstore.ReservedPrefix + "tmp/x", string(bytes.Repeat([]byte{'n'}, 1025))} {
			errs := map[string]error{"Put": s.Put(ctx, name, bytes.NewReader(nil), 0, objstore.PutOptions{}), "Delete": s.Delete(ctx, name)}
			_, errs["Stat"] = s.Stat(ctx, name)
			_, errs["Open"] = s.Open(ctx, name, 0, -1)
			for op, err := range errs {
				if !errors.Is(err, objstore.ErrInvalidName) {
					t.Errorf("%s(%q): %v, want ErrInvalidName", op, name, err)
				}
			}
		}
		if got := list(t, s, ""); len(got) != 0 {
			t.Errorf("invalid names made objects %q", got)
		}
	})

	if o.Big > 0 {
		sub("BigStreamedPut", func(t *testing.T, s objstore.Store) {
			h := sha256.New()
			runtime.GC()
			src := &heapSampler{r: io.TeeReader(io.LimitReader(newGen(9), o.Big), h), base: heapBytes()}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if err := s.Put(ctx, "big", src, o.Big, objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("Put of %d MiB: heap grew by at most %.1f MiB; %.1f MiB allocated in all", o.Big>>20,
				float64(src.peak)/(1<<20), float64(alloc)/(1<<20))
			if src.peak > o.MaxHeap {
				t.Errorf("Put of %d MiB grew the heap by %d MiB, over the %d MiB bound: it buffers the stream", o.Big>>20, src.peak>>20, o.MaxHeap>>20)
			}
			want := h.Sum(nil)
			rc, err := s.Open(ctx, "big", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			h.Reset()
			if n, err := io.Copy(h, rc); err != nil || n != o.Big {
				t.Fatalf("read back %d bytes, err %v", n, err)
			}
			if !bytes.Equal(h.Sum(nil), want) {
				t.Error("the big object read back differs from what was put")
			}
		})
	}
}

func mustPut(t *testing.T, s objstore.Store, name string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), name, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatalf("Put(%q): %v", name, err)
	}
}

func read(t *testing.T, s objstore.Store, name string, off, length int64) []byte {
	t.Helper()
	rc, err := s.Open(context.Background(), name, off, length)
	if err != nil {
		t.Fatalf("Open(%q, %d, %d): %v", name, off, length, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read(%q, %d, %d): %v", name, off, length, err)
	}
	return b
}

func list(t *testing.T, s objstore.Store, prefix string) []string {
	t.Helper()
	var names []string
	if err := s.List(context.Background(), prefix, func(i objstore.Info) error {
		names = append(names, i.Name)
		return nil
	}); err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return names
}

func wantNotExist(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, objstore.ErrNotExist) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: %v, want ErrNotExist", what, err)
	}
}

func randBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	newGen(seed).Read(b)
	return b
}

// gen is an endless reader of pseudo-random bytes.
type gen struct{ r *rand.ChaCha8 }

func newGen(seed uint64) *gen {
	var s [32]byte
	s[0] = byte(seed)
	return &gen{rand.NewChaCha8(s)}
}

func (g *gen) Read(p []byte) (int, error) { return g.r.Read(p) }

// heapSampler reads r, noting after each MiB how far the heap (live and
// not yet collected objects) has grown above base.
type heapSampler struct {
	r         io.Reader
	base      uint64
	peak      uint64
	sinceLast int
}

func (h *heapSampler) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if h.sinceLast += n; h.sinceLast >= 1<<20 || err != nil {
		h.sinceLast = 0
		if b := heapBytes(); b > h.base {
			h.peak = max(h.peak, b-h.base)
		}
	}
	return n, err
}

// heapBytes returns the bytes of heap objects, without stopping the world
// as runtime.ReadMemStats does.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// cancelReader cancels its context when first read and yields nothing, so
// the next read of the stream runs under a cancelled context.
type cancelReader struct{ cancel context.CancelFunc }

func (c cancelReader) Read([]byte) (int, error) { c.cancel(); return 0, io.EOF }
