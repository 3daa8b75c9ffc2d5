package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb"
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

func TestProgressParts(t *testing.T) {
	p := sbxdb.Progress{Files: 200, TotalFiles: 1200, Bytes: 2_900_000, TotalBytes: 14_000_000}
	for _, tc := range []struct {
		elapsed time.Duration
		eta     string
		want    string
	}{
		{0, "", "reading 200/1200 files, 2.9 MB/14.0 MB"},
		{time.Second, "", "reading 200/1200 files, 2.9 MB/14.0 MB, 2.9 MB/s"},
		{100 * time.Millisecond, "", "reading 200/1200 files, 2.9 MB/14.0 MB, 29.0 MB/s"},
		{time.Minute, "4m05s", "reading 200/1200 files, 2.9 MB/14.0 MB, ETA 4m05s, 48.3 kB/s"},
	} {
		if got := strings.Join(progressParts("reading", p, tc.elapsed, tc.eta), ", "); got != tc.want {
			t.Errorf("progressParts after %v = %q, want %q", tc.elapsed, got, tc.want)
		}
	}
	if got := strings.Join(progressParts("writing", sbxdb.Progress{}, time.Second, ""), ", "); got != "writing 0/0 files, 0 B/0 B, 0 B/s" {
		t.Errorf("progressParts of nothing = %q", got)
	}
	if got := strings.Join(progressParts("writing", sbxdb.Progress{TotalFiles: 1, TotalBytes: 5}, 0, ""), ", "); got != "writing 0/1 file, 0 B/5 B" {
		t.Errorf("progressParts of one file = %q", got)
	}
}

// fakeTerminal is a terminal of cols columns that records what is written
// to it: \r returns to the start of the row, \n and a character past the
// last column begin a new row (the terminal wraps), ESC [ K erases from the
// cursor to the end of the row. Only the current row's text is kept.
type fakeTerminal struct {
	cols int
	raw  bytes.Buffer // every byte written
	rows int          // rows begun after the first: wraps and newlines
	row  []rune       // the current row, one rune per column (0 right of a wide rune)
	col  int
	skip int // bytes of an escape sequence still to pass over
}

func (ft *fakeTerminal) Write(p []byte) (int, error) {
	ft.raw.Write(p)
	text := string(p)
	for i, r := range text {
		if ft.skip > 0 {
			ft.skip--
			continue
		}
		switch r {
		case '\x1b':
			if !strings.HasPrefix(text[i:], eraseLine) {
				panic(fmt.Sprintf("unknown escape in %q", text[i:]))
			}
			ft.row = ft.row[:min(ft.col, len(ft.row))]
			ft.skip = len(eraseLine) - 1
		case '\r':
			ft.col = 0
		case '\n':
			ft.rows, ft.col, ft.row = ft.rows+1, 0, nil
		default:
			w := runeCells(r)
			if ft.col+w > ft.cols {
				ft.rows, ft.col, ft.row = ft.rows+1, 0, nil
			}
			for len(ft.row) < ft.col+w {
				ft.row = append(ft.row, ' ')
			}
			if w > 0 {
				ft.row[ft.col] = r
				for i := 1; i < w; i++ {
					ft.row[ft.col+i] = 0
				}
			}
			ft.col += w
		}
	}
	return len(p), nil
}

// screen is the current row as shown, trailing blanks dropped.
func (ft *fakeTerminal) screen() string {
	return strings.TrimRight(strings.ReplaceAll(string(ft.row), "\x00", ""), " ")
}

func newStatus(ft *fakeTerminal) *statusLine {
	return &statusLine{w: ft, cols: func() int { return ft.cols }}
}

// fakeTerminals makes the command's outputs that are fakeTerminals
// terminals of their width, until the test ends.
func fakeTerminals(t *testing.T) {
	isTerm, width := isTerminal, terminalWidth
	t.Cleanup(func() { isTerminal, terminalWidth = isTerm, width })
	isTerminal = func(w io.Writer) bool { _, ok := w.(*fakeTerminal); return ok }
	terminalWidth = func(w io.Writer) int {
		if ft, ok := w.(*fakeTerminal); ok {
			return ft.cols
		}
		return 0
	}
}

func TestTruncateCells(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"reading 12/40 files", 80, "reading 12/40 files"},
		{"reading 12/40 files", 19, "reading 12/40 files"},
		{"reading 12/40 files", 18, "reading 12/40 fil…"},
		{"日本語テキスト", 14, "日本語テキスト"},
		{"日本語テキスト", 9, "日本語テ…"},
		{"日本語テキスト", 10, "日本語テ…"}, // a wide rune does not fit in the one column left
		{"café résumé naïve", 12, "café résumé…"},
		{"cafe\u0301 x", 6, "cafe\u0301 x"}, // a combining accent takes no column
		{"🎉🎉🎉🎉", 5, "🎉🎉…"},
		{"abc", 1, "…"},
		{"abc", 0, ""},
	} {
		got := truncateCells(tc.in, tc.limit)
		if got != tc.want {
			t.Errorf("truncateCells(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
		if !utf8.ValidString(got) || cells(got) > tc.limit {
			t.Errorf("truncateCells(%q, %d) = %q: %d cells, valid UTF-8 %v", tc.in, tc.limit, got, cells(got), utf8.ValidString(got))
		}
	}
}

// On terminals 20, 40 and 80 columns wide, every update of a line wider
// than the terminal redraws the same row: the line is cut to the width
// less one column, by display cells, and never wraps.
func TestStatusLineFitsTheTerminal(t *testing.T) {
	lines := []string{
		"reading 200/1200 files, 2.9 MB/14.0 MB, 31.2 MB/s, ETA 12s",
		"writing 日本語のファイル 3/9 files, 1.0 kB/2.0 kB, ETA 4m05s",
		"short",
		"verifying blobs 12/129, ETA 1h02m — café ☕ 🎉🎉🎉 résumé naïve façade",
	}
	for _, cols := range []int{20, 40, 80} {
		ft := &fakeTerminal{cols: cols}
		sl := newStatus(ft)
		for i := range 50 {
			line := lines[i%len(lines)]
			sl.draw(line)
			want := truncateCells(line, cols-1)
			if ft.screen() != strings.TrimRight(want, " ") {
				t.Fatalf("%d columns: screen %q, want %q", cols, ft.screen(), want)
			}
			if cells(line) > cols-1 && !strings.HasSuffix(ft.screen(), "…") {
				t.Errorf("%d columns: a cut line %q does not end in …", cols, ft.screen())
			}
		}
		// Parts that do not fit are left out whole, the last first.
		sl.draw("reading 200/1200 files", "2.9 MB/14.0 MB", "ETA 12s", "31.2 MB/s")
		want := map[int]string{
			20: "reading 200/1200 f…",
			40: "reading 200/1200 files, 2.9 MB/14.0 MB",
			80: "reading 200/1200 files, 2.9 MB/14.0 MB, ETA 12s, 31.2 MB/s",
		}[cols]
		if ft.screen() != want {
			t.Errorf("%d columns: parts drawn as %q, want %q", cols, ft.screen(), want)
		}
		sl.clear()
		if ft.rows != 0 || ft.screen() != "" || ft.col != 0 {
			t.Errorf("%d columns: %d rows begun, screen %q, cursor at %d after clear; raw %q", cols, ft.rows, ft.screen(), ft.col, ft.raw.String())
		}
		if !utf8.Valid(ft.raw.Bytes()) || bytes.ContainsRune(ft.raw.Bytes(), '\n') || strings.Count(ft.raw.String(), "\r") != 52 {
			t.Errorf("%d columns: raw output %q", cols, ft.raw.String())
		}
	}
}

// A terminal narrowed between two draws gets no wrapped row either, and
// nothing of the longer old line is left.
func TestStatusLineFollowsAResize(t *testing.T) {
	ft := &fakeTerminal{cols: 80}
	sl := newStatus(ft)
	sl.draw(strings.Repeat("x", 100))
	if got := ft.screen(); got != strings.Repeat("x", 78)+"…" {
		t.Fatalf("80 columns: %q", got)
	}
	ft.cols = 40 // the terminal cuts its row (no reflow)
	ft.row, ft.col = ft.row[:40], min(ft.col, 40)
	sl.draw("ab")
	if ft.rows != 0 || ft.screen() != "ab" {
		t.Errorf("after narrowing: %d rows begun, screen %q; raw %q", ft.rows, ft.screen(), ft.raw.String())
	}
	sl.draw(strings.Repeat("z", 60))
	if ft.rows != 0 || ft.screen() != strings.Repeat("z", 38)+"…" {
		t.Errorf("a long line after narrowing: %d rows begun, screen %q", ft.rows, ft.screen())
	}
	sl.clear()
	if ft.rows != 0 || ft.screen() != "" || ft.col != 0 {
		t.Errorf("after clear: %d rows begun, screen %q", ft.rows, ft.screen())
	}
}

// An unknown width (0) is taken for 80 columns.
func TestStatusLineUnknownWidth(t *testing.T) {
	var buf bytes.Buffer
	sl := &statusLine{w: &buf, cols: func() int { return 0 }}
	sl.draw(strings.Repeat("y", 200))
	if want := "\r" + strings.Repeat("y", 78) + "…" + eraseLine; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

func TestProgressPrinter(t *testing.T) {
	start := time.Unix(1000, 0)
	clock := start
	var buf bytes.Buffer
	pp := &progressPrinter{line: &statusLine{w: &buf, cols: func() int { return 120 }}, verb: "writing", start: start, now: func() time.Time { return clock }}

	// The last report erases nothing when nothing was drawn.
	pp.report(sbxdb.Progress{Done: true})
	if buf.Len() != 0 {
		t.Errorf("done without a line: %q", buf.String())
	}
	clock = start.Add(time.Second)
	pp.report(sbxdb.Progress{Files: 10, TotalFiles: 20, Bytes: 12_000_000, TotalBytes: 24_000_000})
	if want := "\rwriting 10/20 files, 12.0 MB/24.0 MB, 12.0 MB/s" + eraseLine; buf.String() != want {
		t.Errorf("first line: %q, want %q", buf.String(), want)
	}
	// Half done after a second of reports: the time left shows.
	buf.Reset()
	clock = start.Add(2 * time.Second)
	pp.report(sbxdb.Progress{Files: 15, TotalFiles: 20, Bytes: 18_000_000, TotalBytes: 24_000_000})
	if want := "\rwriting 15/20 files, 18.0 MB/24.0 MB, ETA 1s, 9.0 MB/s" + eraseLine; buf.String() != want {
		t.Errorf("second line: %q, want %q", buf.String(), want)
	}
	buf.Reset()
	clock = start.Add(3 * time.Second)
	pp.report(sbxdb.Progress{Files: 20, TotalFiles: 20, Bytes: 24, TotalBytes: 24})
	if want := "\rwriting 20/20 files, 24 B/24 B, 8 B/s" + eraseLine; buf.String() != want {
		t.Errorf("third line: %q, want %q", buf.String(), want)
	}
	// Done erases the line, leaving the cursor at its start, once.
	buf.Reset()
	pp.report(sbxdb.Progress{Files: 20, TotalFiles: 20, Bytes: 24, TotalBytes: 24, Done: true})
	pp.report(sbxdb.Progress{Files: 20, TotalFiles: 20, Bytes: 24, TotalBytes: 24, Done: true})
	if want := "\r" + eraseLine; buf.String() != want {
		t.Errorf("done: %q, want %q", buf.String(), want)
	}

	// progressFunc draws only on a terminal.
	inv := &invocation{errOut: &buf}
	if inv.progressFunc("reading", start) != nil || inv.checkProgress() != nil {
		t.Error("progress without a terminal")
	}
	if inv.status != nil {
		t.Error("a status line without a terminal")
	}
	inv.progress = true
	if inv.progressFunc("reading", start) == nil || inv.checkProgress() == nil {
		t.Error("no progress on a terminal")
	}
	if isTerminal(&buf) {
		t.Error("a buffer is a terminal")
	}
	if terminalWidth(&buf) != 0 {
		t.Error("a buffer has a width")
	}
}

// Once a progress line is drawn, anything the command prints on standard
// output or error, and the error report, first clears it: on a terminal,
// where both go to the same screen, the output starts on a clean line.
func TestProgressClearedBeforeOutput(t *testing.T) {
	fakeTerminals(t)
	ft := &fakeTerminal{cols: 40}
	inv := &invocation{out: ft, errOut: ft, progress: true}
	report := inv.progressFunc("reading", time.Now())
	report(sbxdb.Progress{Files: 1, TotalFiles: 3, Bytes: 10, TotalBytes: 30})
	drawn := ft.raw.String()
	if !strings.HasPrefix(drawn, "\rreading 1/3 files") || !strings.HasSuffix(drawn, eraseLine) {
		t.Fatalf("drawn: %q", drawn)
	}
	fmt.Fprintf(inv.out, "captured c1\n")
	if want := drawn + "\r" + eraseLine + "captured c1\n"; ft.raw.String() != want {
		t.Errorf("stdout after progress: %q, want %q", ft.raw.String(), want)
	}
	// Nothing is cleared twice, and a warning on standard error after a
	// new draw clears it too.
	ft.raw.Reset()
	fmt.Fprintf(inv.out, "more\n")
	if ft.raw.String() != "more\n" {
		t.Errorf("cleared twice: %q", ft.raw.String())
	}
	report(sbxdb.Progress{Files: 2, TotalFiles: 3, Bytes: 20, TotalBytes: 30})
	ft.raw.Reset()
	fmt.Fprintf(inv.errOut, "sbxdb: warning: x\n")
	if want := "\r" + eraseLine + "sbxdb: warning: x\n"; ft.raw.String() != want {
		t.Errorf("stderr after progress: %q, want %q", ft.raw.String(), want)
	}
	if ft.screen() != "" || ft.rows != 3 {
		t.Errorf("screen %q, %d rows: a line was left or wrapped", ft.screen(), ft.rows)
	}
	// The error report clears a line no Done report erased (a server that
	// went away mid-stream).
	report(sbxdb.Progress{Files: 2, TotalFiles: 3, Bytes: 20, TotalBytes: 30})
	inv.clearStatus()
	if ft.screen() != "" || ft.col != 0 {
		t.Errorf("after clearStatus: screen %q, cursor at %d", ft.screen(), ft.col)
	}
}

// check --verify-blobs on a terminal clears its progress line before its
// report: the report's first line is not written after
// "verifying blobs N/N".
func TestCheckProgressClearedBeforeReport(t *testing.T) {
	ws := t.TempDir()
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%d", i)), []byte(strings.Repeat("x", i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "store")
	if code, _, errOut := runArgs([]string{"capture", "--db", dir, "--thread", "t", ws}); code != 0 {
		t.Fatalf("capture: exit %d: %s", code, errOut)
	}
	args := []string{"check", "--verify-blobs", "--db", dir}
	_, plainOut, plainErr := runArgs(args)

	fakeTerminals(t)
	ft := &fakeTerminal{cols: 40}
	code := run(args, ft, ft)
	out := ft.raw.String()
	m := regexp.MustCompile(`^\rverifying blobs (\d+)/(\d+)` + regexp.QuoteMeta(eraseLine+"\r"+eraseLine)).FindStringSubmatch(out)
	if code != 0 || m == nil || m[1] != m[2] || m[1] == "0" || out[len(m[0]):] != plainOut+plainErr {
		t.Errorf("exit %d, output %q; want the line drawn, cleared, then %q", code, out, plainOut+plainErr)
	}
}

func TestETAText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", -time.Second: "0s", 1500 * time.Millisecond: "2s", 59 * time.Second: "59s",
		60 * time.Second: "1m00s", 245 * time.Second: "4m05s", 3599 * time.Second: "59m59s",
		3600 * time.Second: "1h00m", 3601 * time.Second: "1h01m", 7379 * time.Second: "2h03m",
		3600*time.Second + 59*time.Minute + 30*time.Second: "2h00m", 99 * time.Hour: "99h00m",
	} {
		if got := etaText(d); got != want {
			t.Errorf("etaText(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestETAEstimator(t *testing.T) {
	const total = 1_000_000
	step := 100 * time.Millisecond

	// The first report gives no rate.
	var e etaEstimator
	if _, ok := e.update(5*time.Second, 0, total); ok {
		t.Error("an estimate from one report")
	}
	// 1 kB per 100 ms: 0.1% a report. Hidden until 2 s have passed since
	// the first report, as 3% takes 3 s.
	at, done := 5*time.Second, int64(0)
	for i := 1; ; i++ {
		at, done = at+step, done+1000
		left, ok := e.update(at, done, total)
		if at-5*time.Second < etaMinTime {
			if ok {
				t.Fatalf("shown after %v, %d of %d", at-5*time.Second, done, total)
			}
			continue
		}
		// A steady rate: the estimate is exact, rounded up to a second.
		want := time.Duration((total-done+9_999)/10_000) * time.Second
		if !ok || left != want {
			t.Fatalf("after %v: %v %v, want %v", at-5*time.Second, left, ok, want)
		}
		if i == 30 {
			break
		}
	}

	// Fast work shows once 3% is done, before 2 s.
	e = etaEstimator{}
	e.update(0, 0, total)
	if _, ok := e.update(step, 20_000, total); ok {
		t.Error("shown at 2%")
	}
	if left, ok := e.update(2*step, 40_000, total); !ok || left != 5*time.Second {
		t.Errorf("at 4%% after 200 ms: %v %v, want 5s", left, ok)
	}

	// A sudden change of rate moves the estimate gradually: one fast
	// report after steady ones does not halve it.
	e = etaEstimator{}
	at, done = 0, 0
	e.update(at, done, total)
	for range 100 { // 10 s at 10 kB/s
		at, done = at+step, done+1000
		e.update(at, done, total)
	}
	before, _ := e.update(at, done, total)
	at, done = at+step, done+10_000 // ten times as fast, once
	after, ok := e.update(at, done, total)
	if !ok || after >= before || after < before*3/4 {
		t.Errorf("after one fast report: %v, before %v", after, before)
	}

	// Never negative, never shown when the work is done or overdone, or
	// without progress.
	e = etaEstimator{}
	e.update(0, 0, 100)
	if left, ok := e.update(3*time.Second, 150, 100); ok || left < 0 {
		t.Errorf("past the total: %v %v", left, ok)
	}
	e = etaEstimator{}
	e.update(0, 0, 100)
	if _, ok := e.update(3*time.Second, 0, 100); ok {
		t.Error("shown without progress")
	}
	if _, ok := e.update(3*time.Second, 0, 0); ok {
		t.Error("shown without a total")
	}
	// Absurd estimates are hidden: 1 byte in 3 s of a terabyte.
	e = etaEstimator{}
	e.update(0, 0, 1e12)
	if left, ok := e.update(3*time.Second, 1, 1e12); ok {
		t.Errorf("shown: %v", left)
	}
}

// check's progress draws at most every checkProgressInterval, and always
// its first and last report.
func TestCheckProgressThrottled(t *testing.T) {
	ft := &fakeTerminal{cols: 80}
	clock := time.Unix(0, 0)
	report := newCheckProgress(newStatus(ft), func() time.Time { return clock })
	draws := func() int { return strings.Count(ft.raw.String(), "\r") }
	report(256, 10_000)
	if draws() != 1 || ft.screen() != "verifying blobs 256/10000" {
		t.Fatalf("first: %q", ft.raw.String())
	}
	for i := 2; i <= 10; i++ { // within one interval
		clock = clock.Add(time.Millisecond)
		report(256*i, 10_000)
	}
	if draws() != 1 {
		t.Errorf("%d draws within %v", draws(), checkProgressInterval)
	}
	clock = clock.Add(checkProgressInterval)
	report(256*11, 10_000)
	if draws() != 2 || ft.screen() != "verifying blobs 2816/10000, ETA 1s" {
		t.Errorf("after the interval: %q", ft.screen())
	}
	report(10_000, 10_000)
	if draws() != 3 || ft.screen() != "verifying blobs 10000/10000" {
		t.Errorf("last: %q", ft.screen())
	}
}
