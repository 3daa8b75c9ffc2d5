package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb/engine"
)

// isTerminal reports whether w is a terminal (a character device), where a
// progress line redrawn with \r makes sense. Tests replace it.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLine renders one report of a capture or restore that has run for
// elapsed, as in
//
//	reading 200/1200 files, 2.9 MB/14.0 MB, 31.2 MB/s
//
// verb says what is done to the files ("reading", "writing"). The rate is
// left out until time has passed.
func progressLine(verb string, p engine.Progress, elapsed time.Duration) string {
	line := fmt.Sprintf("%s %d/%d files, %s/%s", verb, p.Files, p.TotalFiles, size(p.Bytes), size(p.TotalBytes))
	if s := elapsed.Seconds(); s > 0 {
		line += ", " + size(int64(float64(p.Bytes)/s)) + "/s"
	}
	return line
}

// progressPrinter draws progress lines on a terminal, each over the last.
// Its report is called from one goroutine at a time (engine.Progress's
// contract), so it needs no lock.
type progressPrinter struct {
	w     io.Writer
	verb  string
	start time.Time
	now   func() time.Time
	width int // of the line on screen; 0 when none is
}

// progressFunc returns the Progress callback for a capture or restore begun
// at start, or nil when standard error is not a terminal.
func (inv *invocation) progressFunc(verb string, start time.Time) func(engine.Progress) {
	if !inv.progress {
		return nil
	}
	return (&progressPrinter{w: inv.errOut, verb: verb, start: start, now: time.Now}).report
}

// report redraws the line; the last report (Done) erases it, so that the
// summary or an error starts on a clean line.
func (pp *progressPrinter) report(p engine.Progress) {
	if p.Done {
		if pp.width > 0 {
			fmt.Fprintf(pp.w, "\r%s\r", strings.Repeat(" ", pp.width))
			pp.width = 0
		}
		return
	}
	line := progressLine(pp.verb, p, pp.now().Sub(pp.start))
	pad := strings.Repeat(" ", max(0, pp.width-len(line)))
	fmt.Fprintf(pp.w, "\r%s%s", line, pad)
	pp.width = len(line)
}

// size renders a byte count in SI units: "512 B", "1.5 kB", "312.4 MB".
func size(n int64) string {
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	const units = "kMGTPE"
	v, i := float64(n)/1000, 0
	for v >= 999.95 && i < len(units)-1 {
		v /= 1000
		i++
	}
	return fmt.Sprintf("%.1f %cB", v, units[i])
}

// seconds renders a duration as seconds with two decimals: "0.41s".
func seconds(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
