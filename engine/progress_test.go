package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
)

// Tests of Progress: Bytes advances while a large file is read or written,
// not only once it is finished, and the last report equals the totals.

// progressRecorder keeps the reports of a Progress callback and closes
// inFlight at the first report of a file partly done: 0 < Bytes <
// TotalBytes while Files == 0.
type progressRecorder struct {
	mu       sync.Mutex
	reports  []sbxdb.Progress
	inFlight chan struct{}
	once     sync.Once
}

func newProgressRecorder() *progressRecorder {
	return &progressRecorder{inFlight: make(chan struct{})}
}

func (r *progressRecorder) record(p sbxdb.Progress) {
	r.mu.Lock()
	r.reports = append(r.reports, p)
	r.mu.Unlock()
	if p.Files == 0 && p.Bytes > 0 && p.Bytes < p.TotalBytes {
		r.once.Do(func() { close(r.inFlight) })
	}
}

// waitInFlight blocks a test hook until a report showed the file in
// flight. The bound only keeps a broken build from hanging the test.
func (r *progressRecorder) waitInFlight() error {
	select {
	case <-r.inFlight:
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("no report showed the file in flight")
	}
}

// sawInFlight asserts that some report showed the file in flight.
func (r *progressRecorder) sawInFlight(t *testing.T) {
	t.Helper()
	select {
	case <-r.inFlight:
	default:
		t.Fatal("no report showed a file partly done")
	}
}

// check asserts that the reports never went backwards or past the totals
// and that the last one, the only one Done, is exactly files and bytes.
func (r *progressRecorder) check(t *testing.T, files int, bytes int64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reports) == 0 {
		t.Fatal("no report")
	}
	var prev sbxdb.Progress
	for i, p := range r.reports {
		if p.Bytes < prev.Bytes || p.Files < prev.Files || p.Bytes > p.TotalBytes || p.Files > p.TotalFiles {
			t.Fatalf("report %d %+v after %+v", i, p, prev)
		}
		if p.Done != (i == len(r.reports)-1) {
			t.Fatalf("report %d of %d has Done %v", i, len(r.reports), p.Done)
		}
		prev = p
	}
	want := sbxdb.Progress{Files: files, TotalFiles: files, Bytes: bytes, TotalBytes: bytes, Done: true}
	if prev != want {
		t.Fatalf("last report %+v, want %+v", prev, want)
	}
}

// largeContent is size bytes without long runs of zeros (no holes when
// restored) that compress well (cheap to store).
func largeContent(size int) []byte {
	return bytes.Repeat([]byte("progress bytes move inside a file\n"), size/34+1)[:size]
}

// TestProgressCaptureCountsALargeFileWhileRead holds the read of a large
// file after its first chunk until a report shows its bytes partly
// counted with no file done; the last report equals the totals.
func TestProgressCaptureCountsALargeFileWhileRead(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	const size = 16 << 20
	write(t, ws, "big", largeContent(size), 0o644)
	rec := newProgressRecorder()
	var chunks atomic.Int32
	defer f.db.OnPoint("capture.streamed", func() error {
		if chunks.Add(1) == 1 {
			return rec.waitInFlight()
		}
		return nil
	})()
	res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Progress: rec.record})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.BytesRead != size {
		t.Fatalf("stats %+v", res.Stats)
	}
	rec.sawInFlight(t)
	rec.check(t, 1, size)
}

// TestProgressCaptureRereadFileStaysWithinTotals rewrites a file while it
// is read, larger than the walk saw it: the reads count no more than the
// walk's size, and the last report equals the totals.
func TestProgressCaptureRereadFileStaysWithinTotals(t *testing.T) {
	for _, size := range []int{100, 3 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			f := newCaptureFixture(t)
			ws := filepath.Join(f.dir, "ws")
			p := filepath.Join(ws, "f")
			write(t, ws, "f", largeContent(size), 0o644)
			var reads atomic.Int32
			defer f.db.OnPoint("capture.fileRead", func() error {
				if reads.Add(1) == 1 {
					return os.WriteFile(p, largeContent(2*size), 0o644)
				}
				return nil
			})()
			rec := newProgressRecorder()
			res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Progress: rec.record})
			if err != nil {
				t.Fatal(err)
			}
			if reads.Load() != 2 || res.Stats.Changed != 1 || res.Stats.BytesRead != int64(2*size) {
				t.Fatalf("%d reads, stats %+v", reads.Load(), res.Stats)
			}
			rec.check(t, 1, int64(size))
		})
	}
}

// TestProgressCaptureVanishedFileLeavesTheTotals removes a file between
// the walk and its read: it leaves the totals, so the last report still
// equals them.
func TestProgressCaptureVanishedFileLeavesTheTotals(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "keep", []byte("kept"), 0o644)
	write(t, ws, "gone", []byte("vanishes"), 0o644)
	defer f.db.OnPoint("capture.walked", func() error { return os.Remove(filepath.Join(ws, "gone")) })()
	rec := newProgressRecorder()
	res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Progress: rec.record})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.Vanished != 1 || res.Stats.Files != 1 {
		t.Fatalf("stats %+v", res.Stats)
	}
	rec.check(t, 1, 4)
}

// TestProgressRestoreCountsALargeFileWhileWritten holds the writing of a
// large file after its first chunk until a report shows its bytes partly
// counted with no file done; a second path with the same bytes (a copy)
// counts too, and the last report equals the totals.
func TestProgressRestoreCountsALargeFileWhileWritten(t *testing.T) {
	for _, sparse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sparse=%v", sparse), func(t *testing.T) {
			f := newCaptureFixture(t)
			ws := filepath.Join(f.dir, "ws")
			const size = 16 << 20
			data := largeContent(size)
			if sparse { // a run of zeros long enough to be a hole, in each copy
				clear(data[1<<20 : 3<<20])
			}
			write(t, ws, "big", data, 0o644)
			write(t, ws, "copy", data, 0o644)
			res := f.capture(t, ws)
			rec := newProgressRecorder()
			var chunks atomic.Int32
			defer f.db.OnPoint("restore.chunk", func() error {
				if chunks.Add(1) == 1 {
					return rec.waitInFlight()
				}
				return nil
			})()
			out := filepath.Join(f.dir, "out")
			st, err := f.db.Restore(context.Background(), res.Checkpoint.ID, out, &sbxdb.RestoreOptions{Progress: rec.record})
			if err != nil {
				t.Fatal(err)
			}
			if st.Files != 2 || st.Bytes != 2*size {
				t.Fatalf("stats %+v", st)
			}
			for _, name := range []string{"big", "copy"} {
				got, err := os.ReadFile(filepath.Join(out, name))
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%s restored wrong (%v)", name, err)
				}
			}
			rec.sawInFlight(t)
			rec.check(t, 2, 2*size)
		})
	}
}
