package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/engine"
)

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 999: "999 B", 1000: "1.0 kB", 1049: "1.0 kB", 1050: "1.1 kB", 999_949: "999.9 kB",
		999_950: "1.0 MB", 312_400_000: "312.4 MB", 2_900_000: "2.9 MB", 5 << 30: "5.4 GB", 1 << 62: "4.6 EB",
	} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
	if got := seconds(410 * time.Millisecond); got != "0.41s" {
		t.Errorf("seconds: %q", got)
	}
}

func TestProgressLine(t *testing.T) {
	p := engine.Progress{Files: 200, TotalFiles: 1200, Bytes: 2_900_000, TotalBytes: 14_000_000}
	for _, tc := range []struct {
		elapsed time.Duration
		want    string
	}{
		{0, "reading 200/1200 files, 2.9 MB/14.0 MB"},
		{time.Second, "reading 200/1200 files, 2.9 MB/14.0 MB, 2.9 MB/s"},
		{100 * time.Millisecond, "reading 200/1200 files, 2.9 MB/14.0 MB, 29.0 MB/s"},
		{time.Minute, "reading 200/1200 files, 2.9 MB/14.0 MB, 48.3 kB/s"},
	} {
		if got := progressLine("reading", p, tc.elapsed); got != tc.want {
			t.Errorf("progressLine after %v = %q, want %q", tc.elapsed, got, tc.want)
		}
	}
	if got := progressLine("writing", engine.Progress{}, time.Second); got != "writing 0/0 files, 0 B/0 B, 0 B/s" {
		t.Errorf("progressLine of nothing = %q", got)
	}
}

func TestProgressPrinter(t *testing.T) {
	start := time.Unix(1000, 0)
	clock := start
	var buf bytes.Buffer
	pp := &progressPrinter{w: &buf, verb: "writing", start: start, now: func() time.Time { return clock }}

	// The last report erases nothing when nothing was drawn.
	pp.report(engine.Progress{Done: true})
	if buf.Len() != 0 {
		t.Errorf("done without a line: %q", buf.String())
	}
	clock = start.Add(time.Second)
	pp.report(engine.Progress{Files: 10, TotalFiles: 20, Bytes: 12_000_000, TotalBytes: 24_000_000})
	first := "writing 10/20 files, 12.0 MB/24.0 MB, 12.0 MB/s"
	if buf.String() != "\r"+first {
		t.Errorf("first line: %q", buf.String())
	}
	// A shorter line is padded over the longer one.
	buf.Reset()
	clock = start.Add(2 * time.Second)
	pp.report(engine.Progress{Files: 20, TotalFiles: 20, Bytes: 24, TotalBytes: 24})
	second := "writing 20/20 files, 24 B/24 B, 12 B/s"
	if want := "\r" + second + strings.Repeat(" ", len(first)-len(second)); buf.String() != want {
		t.Errorf("second line: %q, want %q", buf.String(), want)
	}
	// Done erases the line, leaving the cursor at its start.
	buf.Reset()
	pp.report(engine.Progress{Files: 20, TotalFiles: 20, Bytes: 24, TotalBytes: 24, Done: true})
	if want := "\r" + strings.Repeat(" ", len(second)) + "\r"; buf.String() != want {
		t.Errorf("done: %q, want %q", buf.String(), want)
	}

	// progressFunc draws only on a terminal.
	inv := &invocation{errOut: &buf}
	if inv.progressFunc("reading", start) != nil {
		t.Error("progress without a terminal")
	}
	inv.progress = true
	if inv.progressFunc("reading", start) == nil {
		t.Error("no progress on a terminal")
	}
	if isTerminal(&buf) {
		t.Error("a buffer is a terminal")
	}
}
