package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb"
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

// terminalWidth returns the width in columns of the terminal w writes to,
// or 0 when w is not one or its size is unknown. It asks the terminal each
// time (one ioctl), so a resized window is followed from the next draw on.
// Tests replace it.
var terminalWidth = func(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	return fileColumns(f)
}

// fallbackColumns is the width assumed for a terminal that does not tell
// its own.
const fallbackColumns = 80

// statusLine is the one line a command redraws on a terminal while it
// works (standard error), each draw over the last. Every drawn line fits
// in the terminal's width minus one column, so the terminal never wraps it
// and \r always returns to its start: a narrow or narrowed terminal gets
// one line per update, not one per wrap. Each draw ends with the terminal's
// erase-to-end-of-line sequence (ANSI EL, eraseLine), which removes the
// rest of a longer line drawn before, whatever the width is now. clear
// erases the line and leaves the cursor at its start, so whatever is
// printed next begins on a clean line; the invocation's outputs clear it
// before every write (invocation.statusLine). Safe for concurrent use.
type statusLine struct {
	mu    sync.Mutex
	w     io.Writer
	cols  func() int // the terminal's width; 0 when unknown
	shown bool       // a line is on screen
}

// eraseLine is ANSI EL (erase in line, to its end), which every terminal
// emulator in use understands.
const eraseLine = "\x1b[K"

// limit is the number of cells a line may take: the terminal's width less
// one column.
func (s *statusLine) limit() int {
	cols := s.cols()
	if cols <= 0 {
		cols = fallbackColumns
	}
	return max(1, cols-1)
}

// draw replaces the line on screen with the parts, joined by ", ", most
// telling first: as many as fit in the terminal's width, and the first cut
// to it when even that one does not fit.
func (s *statusLine) draw(parts ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.limit()
	text := parts[0]
	for _, p := range parts[1:] {
		longer := text + ", " + p
		if cells(longer) > limit {
			break
		}
		text = longer
	}
	io.WriteString(s.w, "\r"+truncateCells(text, limit)+eraseLine)
	s.shown = true
}

// clear erases the line, if one is drawn, leaving the cursor at its start.
func (s *statusLine) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shown {
		io.WriteString(s.w, "\r"+eraseLine)
		s.shown = false
	}
}

// clearingWriter clears a status line before each write through it, so
// that output never lands in the middle of a progress line.
type clearingWriter struct {
	w    io.Writer
	line *statusLine
}

func (c clearingWriter) Write(p []byte) (int, error) {
	c.line.clear()
	return c.w.Write(p)
}

// statusLine returns the invocation's status line on standard error,
// making it on first use. From then on inv.out and inv.errOut clear the
// line before every write: the result, a warning or the error a command
// prints starts on a clean line, whichever command drew progress.
func (inv *invocation) statusLine() *statusLine {
	if inv.status == nil {
		raw := inv.errOut
		inv.status = &statusLine{w: raw, cols: func() int { return terminalWidth(raw) }}
		inv.out = clearingWriter{w: inv.out, line: inv.status}
		inv.errOut = clearingWriter{w: raw, line: inv.status}
	}
	return inv.status
}

// clearStatus erases the status line if a command drew one; the error
// report calls it before printing.
func (inv *invocation) clearStatus() {
	if inv.status != nil {
		inv.status.clear()
	}
}

// progressParts renders one report of a capture or restore that has run
// for elapsed, with the time left when known (eta), as the parts of
//
//	reading 200/1200 files, 2.9 MB/14.0 MB, ETA 12s, 31.2 MB/s
//
// most telling first. verb says what is done to the files ("reading",
// "writing"). The ETA is left out when eta is "", the rate until time has
// passed.
func progressParts(verb string, p sbxdb.Progress, elapsed time.Duration, eta string) []string {
	parts := []string{
		fmt.Sprintf("%s %d/%s", verb, p.Files, count(p.TotalFiles, "file")),
		size(p.Bytes) + "/" + size(p.TotalBytes),
	}
	if eta != "" {
		parts = append(parts, "ETA "+eta)
	}
	if s := elapsed.Seconds(); s > 0 {
		parts = append(parts, size(int64(float64(p.Bytes)/s))+"/s")
	}
	return parts
}

// progressPrinter draws the progress lines of a capture or restore on a
// status line. Its report is called from one goroutine at a time
// (sbxdb.Progress's contract).
type progressPrinter struct {
	line  *statusLine
	verb  string
	start time.Time
	now   func() time.Time
	eta   etaEstimator // of the bytes
}

// progressFunc returns the Progress callback for a capture or restore begun
// at start, or nil when standard error is not a terminal.
func (inv *invocation) progressFunc(verb string, start time.Time) func(sbxdb.Progress) {
	if !inv.progress {
		return nil
	}
	return (&progressPrinter{line: inv.statusLine(), verb: verb, start: start, now: time.Now}).report
}

// report redraws the line, with the time left once it can be estimated;
// the last report (Done) erases it, so that the summary or an error starts
// on a clean line.
func (pp *progressPrinter) report(p sbxdb.Progress) {
	if p.Done {
		pp.line.clear()
		return
	}
	elapsed := pp.now().Sub(pp.start)
	eta := ""
	if left, ok := pp.eta.update(elapsed, p.Bytes, p.TotalBytes); ok {
		eta = etaText(left)
	}
	pp.line.draw(progressParts(pp.verb, p, elapsed, eta)...)
}

// checkProgressInterval is the least time between two draws of check's
// progress line, whose callback may come thousands of times a second.
const checkProgressInterval = 100 * time.Millisecond

// checkProgress returns check's Progress callback, which draws
//
//	verifying blobs 1024/52000, ETA 41s
//
// at most every checkProgressInterval (and at the last blob), or nil when
// standard error is not a terminal.
func (inv *invocation) checkProgress() func(done, total int) {
	if !inv.progress {
		return nil
	}
	return newCheckProgress(inv.statusLine(), time.Now)
}

func newCheckProgress(line *statusLine, now func() time.Time) func(done, total int) {
	start := now()
	var eta etaEstimator
	var drawn time.Duration
	first := true
	return func(done, total int) {
		at := now().Sub(start)
		left, ok := eta.update(at, int64(done), int64(total))
		if !first && done < total && at-drawn < checkProgressInterval {
			return
		}
		first, drawn = false, at
		text := fmt.Sprintf("verifying blobs %d/%d", done, total)
		if ok {
			line.draw(text, "ETA "+etaText(left))
		} else {
			line.draw(text)
		}
	}
}

// The estimate of the time left: shown only once etaMinFraction of the work
// is done or etaMinTime has passed since the first report, and never when
// it is over etaMax.
const (
	etaMinFraction = 0.03
	etaMinTime     = 2 * time.Second
	etaMax         = 100 * time.Hour
	// etaSmoothing is the time constant of the rate's moving average: the
	// rate of the last several seconds counts, not one report's.
	etaSmoothing = 5 * time.Second
)

// etaEstimator estimates the time left of work measured in units (bytes,
// blobs) from reports of the units done so far. The rate is an
// exponentially weighted moving average over time: until etaSmoothing has
// passed it is the mean rate since the first report, then recent reports
// weigh most. The estimate is never negative and never shown before there
// is a rate to go by.
type etaEstimator struct {
	started  bool
	t0, last time.Duration // the times of the first and the last report
	lastDone int64
	rate     float64 // units per second
	haveRate bool    // rate is set: there were two reports
}

// update takes the report that done of total units are done at time at
// (since any fixed start), and returns the time left and whether to show
// it.
func (e *etaEstimator) update(at time.Duration, done, total int64) (time.Duration, bool) {
	if !e.started {
		e.started, e.t0, e.last, e.lastDone = true, at, at, done
		return 0, false
	}
	if dt := at - e.last; dt > 0 {
		inst := float64(done-e.lastDone) / dt.Seconds()
		// Weight dt/T with T the time since the first report makes the
		// average the mean rate since then; the time constant takes over
		// once it weighs more.
		// (1 for the first interval: dt is all of T).
		alpha := max(1-math.Exp(-dt.Seconds()/etaSmoothing.Seconds()), dt.Seconds()/(at-e.t0).Seconds())
		e.rate += alpha * (inst - e.rate)
		e.haveRate = true
		e.last, e.lastDone = at, done
	}
	if total <= 0 || done >= total || !e.haveRate || e.rate <= 0 {
		return 0, false
	}
	if float64(done) < etaMinFraction*float64(total) && at-e.t0 < etaMinTime {
		return 0, false
	}
	secs := float64(total-done) / e.rate
	if secs > etaMax.Seconds() {
		return 0, false
	}
	return time.Duration(math.Ceil(secs)) * time.Second, true
}

// etaText renders a time left rounded up to a second: "7s", "4m05s",
// "2h03m".
func etaText(d time.Duration) string {
	s := int64(math.Ceil(max(0, d.Seconds())))
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	m := (s + 59) / 60
	return fmt.Sprintf("%dh%02dm", m/60, m%60)
}

// cells is the number of terminal columns s takes (runeCells of each
// rune).
func cells(s string) int {
	n := 0
	for _, r := range s {
		n += runeCells(r)
	}
	return n
}

// truncateCells cuts s to at most limit columns, ending it with "…" when
// anything was cut. It cuts between runes, so the result is valid UTF-8
// when s is.
func truncateCells(s string, limit int) string {
	if cells(s) <= limit {
		return s
	}
	if limit <= 0 {
		return ""
	}
	n := 0
	for i, r := range s {
		w := runeCells(r)
		if n+w > limit-1 {
			return s[:i] + "…"
		}
		n += w
	}
	return s
}

// runeCells is the number of columns a terminal gives r: 0 for combining
// marks and format characters, 2 for the wide characters of East Asian
// scripts, fullwidth forms and emoji, 1 otherwise. The wide ranges are the
// main blocks of Unicode's East Asian Width W and F classes, not all of
// them: a rare wide character counts 1 and makes a line one column longer
// than counted, which the column left free at the end absorbs.
func runeCells(r rune) int {
	switch {
	case r == utf8.RuneError:
		return 1
	case unicode.Is(unicode.Mn, r), unicode.Is(unicode.Me, r), unicode.Is(unicode.Cf, r):
		return 0
	}
	for _, w := range wideRanges {
		if r >= w[0] && r <= w[1] {
			return 2
		}
	}
	return 1
}

var wideRanges = [...][2]rune{
	{0x1100, 0x115F},   // Hangul Jamo initial consonants
	{0x2E80, 0x303E},   // CJK radicals, Kangxi, CJK symbols and punctuation
	{0x3041, 0x33FF},   // Hiragana, Katakana, Bopomofo, compatibility
	{0x3400, 0x4DBF},   // CJK extension A
	{0x4E00, 0x9FFF},   // CJK unified ideographs
	{0xA000, 0xA4CF},   // Yi
	{0xA960, 0xA97F},   // Hangul Jamo extended A
	{0xAC00, 0xD7A3},   // Hangul syllables
	{0xF900, 0xFAFF},   // CJK compatibility ideographs
	{0xFE10, 0xFE19},   // vertical forms
	{0xFE30, 0xFE6F},   // CJK compatibility forms, small forms
	{0xFF00, 0xFF60},   // fullwidth forms
	{0xFFE0, 0xFFE6},   // fullwidth signs
	{0x1F300, 0x1F64F}, // pictographs, emoticons
	{0x1F900, 0x1F9FF}, // supplemental symbols and pictographs
	{0x20000, 0x2FFFD}, // CJK extensions B and later
	{0x30000, 0x3FFFD}, // CJK extension G and later
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
