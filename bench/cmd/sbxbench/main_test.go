package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

// These tests check the report's arithmetic and rendering on made-up
// figures; nothing is timed.

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 3: "3", 12: "12", 0.315: "0.315", 1.874: "1.87", 15.44: "15.4", 742.4: "742",
		4019: "4,019", 58018: "58,018", 290357.2: "290,357", 3848962: "3.85 M", 12_345_678: "12.3 M",
		0.00123: "0.00123", -2500: "-2,500",
	} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{0.23: "0.23x", 1: "1.00x", 0.0283: "0.028x", 250: "250x"} {
		if got := ratioText(v); got != want {
			t.Errorf("ratioText(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestMedian(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median = %v", m)
	}
	if m := median(nil); !math.IsNaN(m) {
		t.Errorf("median(nil) = %v", m)
	}
}

// sample is a small report: a figure with ratios to two peers, one
// missing, single-valued rows, targets met and not, and chart data.
func sample() *Report {
	r := newReport()
	r.Quick, r.Runs, r.Started = true, 3, "2026-11-30T12:00:00Z"
	r.Tree.Bytes = 32_600_000
	r.Machine = Machine{NProc: 2, CPU: "Test CPU", GoVersion: "go1.26", Commit: "0123456789abcdef", Tools: map[string]string{}}
	r.setSection("First capture")
	sbx := r.add("capture.first.sbxdb", "sbxdb capture", "s", []float64{0.4, 0.5, 0.3}, "a | note")
	r.add("capture.first.tar", "tar | zstd", "s", []float64{0.2, 0.5, 0.3}, "")
	r.missing("capture.first.restic", "restic backup", "s", noRestic)
	r.ratio(sbx, "capture.first.tar", "÷ tar|zstd").want("<=", 2)
	if q := r.ratio(sbx, "capture.first.restic", "÷ restic"); q != nil {
		panic("ratio to a missing row")
	}
	r.setSection("Sizes")
	size := r.add("size.sbxdb", "sbxdb blob bytes", "MB", []float64{13.4}, "")
	r.add("size.tar", "tar archive", "MB", []float64{13.2}, "")
	r.ratio(size, "size.tar", "÷ tar|zstd").want("<=", 1)
	r.add("unchanged", "unchanged", "ms", []float64{90, 120, 110}, "").want("<=", 100)
	r.check("round trip", "byte-exact")
	r.series("first capture", "sbxdb", r.Tree.Bytes, []float64{0.4, 0.5, 0.3})
	r.series("first capture", "tar | zstd -1 -T0", r.Tree.Bytes, []float64{0.2, 0.5, 0.3})
	r.series("restore", "sbxdb", r.Tree.Bytes, []float64{0.3, 0.3, 0.4})
	return r
}

func TestRatiosRunByRun(t *testing.T) {
	r := sample()
	q := r.byID["capture.first.sbxdb"].Ratios[0]
	// Run by run: 0.4/0.2, 0.5/0.5, 0.3/0.3, not the ratio of the medians.
	if want := []float64{2, 1, 1}; !equal(q.Values, want) || q.Median != 1 || q.Min != 1 || q.Max != 2 {
		t.Errorf("ratio %+v, want values %v, median 1, 1–2", q, want)
	}
	if q.Target == nil || !q.Target.Met {
		t.Errorf("target %+v: 1 <= 2 is met", q.Target)
	}
	if tg := r.byID["unchanged"].Target; tg == nil || tg.Met {
		t.Errorf("target %+v: 110 <= 100 is not met", tg)
	}
	if s := r.Throughput[0]; s.Median != 32.6/0.4 || s.Min != 32.6/0.5 || s.Max != 32.6/0.3 {
		t.Errorf("series %+v", s)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-12 {
			return false
		}
	}
	return true
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	writeTable(&b, sample())
	out := b.String()
	for _, want := range []string{
		"sbxbench `--quick` run, started 2026-11-30T12:00:00Z",
		"commit 0123456789ab.",
		"| **First capture** | | | | | |",
		"| sbxdb capture | 0.4 s | 0.3–0.5 | ÷ tar\\|zstd: 1.00x (1.00x–2.00x) | ÷ tar\\|zstd ≤ 2x: met | a \\| note |",
		"| restic backup | — | | | | restic not installed",
		"| sbxdb blob bytes | 13.4 MB |  | ÷ tar\\|zstd: 1.02x | ÷ tar\\|zstd ≤ 1x: **not met** |  |",
		"≤ 100 ms: **not met**",
		"- round trip: byte-exact",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Every table line has the same number of cells.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "|") {
			if n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|"); n != 7 {
				t.Errorf("%d separators in %q", n, line)
			}
		}
	}
}

func TestJSONFieldNames(t *testing.T) {
	b, err := json.Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "command", "quick", "runs", "started", "finished", "wall_seconds", "machine", "tree", "settings", "rows", "checks", "throughput"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	machine := m["machine"].(map[string]any)
	for _, k := range []string{"nproc", "cpu", "go_version", "kernel", "commit", "tools"} {
		if _, ok := machine[k]; !ok {
			t.Errorf("JSON machine lacks %q", k)
		}
	}
	row := m["rows"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "section", "name", "unit", "values", "median", "min", "max", "ratios"} {
		if _, ok := row[k]; !ok {
			t.Errorf("JSON row lacks %q", k)
		}
	}
	missing := m["rows"].([]any)[2].(map[string]any)
	if missing["missing"] == nil || missing["values"] == nil {
		t.Errorf("missing row %v: wants a reason and an empty values list", missing)
	}
}

func TestChartIsWellFormedSVG(t *testing.T) {
	svg := chart(sample())
	d := xml.NewDecoder(bytes.NewReader(svg))
	var rects, texts int
	var first string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if first == "" {
				first = se.Name.Local
			}
			switch se.Name.Local {
			case "rect":
				rects++
			case "text":
				texts++
			}
		}
	}
	if first != "svg" {
		t.Errorf("root element %q", first)
	}
	// The background and three bars.
	if rects != 4 {
		t.Errorf("%d rects, want 4", rects)
	}
	for _, want := range []string{"first capture", "restore", "not measured", "81.5 MB/s", "tar | zstd -1 -T0", "kopia"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

func TestNiceAxis(t *testing.T) {
	for _, c := range []struct{ v, max, step float64 }{{163, 200, 50}, {81.5, 100, 20}, {1, 1, 0.2}, {0, 1, 0.2}} {
		if m, s := niceAxis(c.v); math.Abs(m-c.max) > 1e-9 || math.Abs(s-c.step) > 1e-9 {
			t.Errorf("niceAxis(%v) = %v, %v; want %v, %v", c.v, m, s, c.max, c.step)
		}
	}
}
