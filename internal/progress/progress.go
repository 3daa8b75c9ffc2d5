// Package progress counts the files and bytes a capture reads or a restore
// writes, from many goroutines at once, and reports them to the caller's
// sbxdb.Progress function every 100 ms from one goroutine of its own. It
// knows nothing of the store.
package progress

import (
	"sync/atomic"
	"time"

	"github.com/sbxdb/sbxdb"
)

// Counters are updated by the workers and read by the reporter.
type Counters struct {
	Files, TotalFiles atomic.Int64
	Bytes, TotalBytes atomic.Int64
}

// File counts one file's bytes in Counters.Bytes as they are read or
// written, one atomic add per chunk. A file never counts more than size,
// its bytes in TotalBytes: a pass that restarts (a file read again because
// it changed) adds only what goes past the most any earlier pass counted,
// and Done makes the file's share exactly size, so the last report equals
// the totals whatever the passes read.
type File struct {
	p       *Counters
	size    int64 // the file's bytes in TotalBytes
	counted int64 // the file's bytes in Bytes
	pass    int64 // bytes of the current pass
}

// NewFile returns the counter of one file of size bytes in p.
func NewFile(p *Counters, size int64) *File { return &File{p: p, size: size} }

// Add counts n more bytes of the current pass.
func (f *File) Add(n int64) {
	f.pass += n
	if d := min(f.pass, f.size) - f.counted; d > 0 {
		f.counted += d
		f.p.Bytes.Add(d)
	}
}

// Restart begins a new pass over the file from its first byte.
func (f *File) Restart() { f.pass = 0 }

// Done counts the file finished: one more file, and its share of bytes
// made exactly size.
func (f *File) Done() {
	if d := f.size - f.counted; d != 0 {
		f.p.Bytes.Add(d)
	}
	f.counted = f.size
	f.p.Files.Add(1)
}

// Drop takes the file out of the counts and the totals: it is left out.
func (f *File) Drop() {
	f.p.Bytes.Add(-f.counted)
	f.p.TotalBytes.Add(-f.size)
	f.p.TotalFiles.Add(-1)
	f.counted = 0
}

func (p *Counters) snapshot(done bool) sbxdb.Progress {
	return sbxdb.Progress{Files: int(p.Files.Load()), TotalFiles: int(p.TotalFiles.Load()),
		Bytes: p.Bytes.Load(), TotalBytes: p.TotalBytes.Load(), Done: done}
}

// Report calls fn every 100 ms from one goroutine until the returned stop
// is called, which makes the final report. A nil fn reports nothing.
func Report(fn func(sbxdb.Progress), p *Counters) (stop func()) {
	if fn == nil {
		return func() {}
	}
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fn(p.snapshot(false))
			case <-quit:
				fn(p.snapshot(true))
				return
			}
		}
	}()
	return func() { close(quit); <-exited }
}
