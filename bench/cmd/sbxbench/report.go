package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is the whole result of one run of the command: the machine, the
// tree, and one table of rows. Its JSON form (--json) keeps these field
// names stable so that runs can be compared across commits; rows are found
// by ID, never by position.
type Report struct {
	Schema      int       `json:"schema"` // 1
	Command     string    `json:"command"`
	Quick       bool      `json:"quick"`
	Runs        int       `json:"runs"`
	Started     string    `json:"started"`  // RFC 3339, UTC
	Finished    string    `json:"finished"` // RFC 3339, UTC
	WallSeconds float64   `json:"wall_seconds"`
	Machine     Machine   `json:"machine"`
	Tree        TreeInfo  `json:"tree"`
	Settings    Settings  `json:"settings"`
	Rows        []*Row    `json:"rows"`
	Checks      []Check   `json:"checks"`
	Throughput  []*Series `json:"throughput"` // the chart's data

	byID    map[string]*Row
	section string
}

// Machine holds the facts of the machine and the tree the run measured.
type Machine struct {
	NProc     int               `json:"nproc"`
	CPU       string            `json:"cpu"`
	GoVersion string            `json:"go_version"`
	OS        string            `json:"os"`
	Arch      string            `json:"arch"`
	Kernel    string            `json:"kernel"`
	WorkFS    string            `json:"work_fs"`
	Commit    string            `json:"commit"`          // git HEAD of the source tree, "" if unknown
	Dirty     *bool             `json:"dirty,omitempty"` // tracked files differ from Commit
	Tools     map[string]string `json:"tools"`           // peer name -> version, "" when not installed
}

// TreeInfo describes the generated workspace.
type TreeInfo struct {
	Spec     any   `json:"spec"`
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
}

// Settings are the scale of the run.
type Settings struct {
	LargeMiB      int    `json:"large_mib"`
	CoreBenchtime string `json:"core_benchtime"`
	GCReferences  int    `json:"gc_references"`
}

// Row is one figure: the values of the runs (in run order), their median
// and range, and its ratios to other rows.
type Row struct {
	ID      string    `json:"id"`
	Section string    `json:"section"`
	Name    string    `json:"name"`
	Unit    string    `json:"unit"`
	Values  []float64 `json:"values"`
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	// Missing says why the row has no figure (a peer not installed).
	Missing string   `json:"missing,omitempty"`
	Ratios  []*Ratio `json:"ratios,omitempty"`
	Target  *Target  `json:"target,omitempty"` // on Median
	Note    string   `json:"note,omitempty"`
}

// Ratio is a row's figure divided by another row's, run by run: Values[i]
// is row.Values[i] / To.Values[i], both measured in run i of this
// invocation (for single-valued rows, the one value of each).
type Ratio struct {
	To     string    `json:"to"` // the ID of the row divided by
	Label  string    `json:"label"`
	Values []float64 `json:"values"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Target *Target   `json:"target,omitempty"` // on Median
}

// Target is one of the engine's performance goals, checked on a median.
type Target struct {
	Op    string  `json:"op"` // "<=" or ">="
	Value float64 `json:"value"`
	Met   bool    `json:"met"`
}

// Check is a result that is not a number: a round trip, a budget.
type Check struct {
	Name   string `json:"name"`
	Result string `json:"result"`
}

// Series is one bar of the chart: MB/s per run of one tool in one group.
type Series struct {
	Group  string    `json:"group"` // "first capture" or "restore"
	Tool   string    `json:"tool"`
	Values []float64 `json:"values"` // MB/s, per run
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

func newReport() *Report {
	return &Report{Schema: 1, byID: map[string]*Row{}, Rows: []*Row{}, Checks: []Check{}, Throughput: []*Series{}}
}

// setSection names the section of the rows added next.
func (r *Report) setSection(name string) {
	r.section = name
	progress("== %s", name)
}

// started is when the command started; progress lines show the time since.
var started = time.Now()

// progress logs a line to stderr, headed by the seconds since the start.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%4.0fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
}

// add appends a row with the given values (one per run) and logs it.
func (r *Report) add(id, name, unit string, values []float64, note string) *Row {
	if r.byID[id] != nil {
		panic("duplicate row " + id)
	}
	if values == nil {
		values = []float64{}
	}
	x := &Row{ID: id, Section: r.section, Name: name, Unit: unit, Values: values, Note: note}
	if len(values) > 0 {
		x.Median, x.Min, x.Max = median(values), slices.Min(values), slices.Max(values)
	}
	r.Rows = append(r.Rows, x)
	r.byID[id] = x
	if len(values) > 0 {
		fmt.Fprintf(os.Stderr, "  %-52s %12s %s  (%s–%s)\n", name, num(x.Median), unit, num(x.Min), num(x.Max))
	}
	return x
}

// missing appends a row without a figure, saying why.
func (r *Report) missing(id, name, unit, why string) *Row {
	x := r.add(id, name, unit, nil, "")
	x.Missing = why
	fmt.Fprintf(os.Stderr, "  %-52s %s\n", name, why)
	return x
}

// check records a result that is not a number.
func (r *Report) check(name, result string) {
	r.Checks = append(r.Checks, Check{Name: name, Result: result})
}

// ratio adds the ratio of row to the row with ID to, run by run, unless
// either has no figure. It returns nil then.
func (r *Report) ratio(row *Row, to, label string) *Ratio {
	d := r.byID[to]
	if row == nil || d == nil || len(row.Values) == 0 || len(d.Values) == 0 {
		return nil
	}
	var v []float64
	switch {
	case len(row.Values) == len(d.Values):
		for i := range row.Values {
			v = append(v, row.Values[i]/d.Values[i])
		}
	default: // not paired run by run: the ratio of the medians
		v = []float64{row.Median / d.Median}
	}
	x := &Ratio{To: to, Label: label, Values: v, Median: median(v), Min: slices.Min(v), Max: slices.Max(v)}
	row.Ratios = append(row.Ratios, x)
	fmt.Fprintf(os.Stderr, "  %-52s %12s   (%s–%s)\n", "  "+label, ratioText(x.Median), ratioText(x.Min), ratioText(x.Max))
	return x
}

// want returns the target op value checked on median.
func want(median float64, op string, value float64) *Target {
	t := &Target{Op: op, Value: value}
	switch op {
	case "<=":
		t.Met = median <= value
	case ">=":
		t.Met = median >= value
	default:
		panic("target op " + op)
	}
	return t
}

// want sets a target on the row's median; a nil or empty row gets none.
func (row *Row) want(op string, value float64) {
	if row != nil && len(row.Values) > 0 {
		row.Target = want(row.Median, op, value)
	}
}

// want sets a target on the ratio's median; a nil ratio gets none.
func (x *Ratio) want(op string, value float64) {
	if x != nil {
		x.Target = want(x.Median, op, value)
	}
}

// series adds a bar of the chart: MB/s of bytes over each run's seconds.
func (r *Report) series(group, tool string, bytes int64, seconds []float64) {
	if len(seconds) == 0 {
		return
	}
	v := make([]float64, len(seconds))
	for i, s := range seconds {
		v[i] = float64(bytes) / 1e6 / s
	}
	r.Throughput = append(r.Throughput, &Series{Group: group, Tool: tool, Values: v, Median: median(v), Min: slices.Min(v), Max: slices.Max(v)})
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// num formats a figure: whole numbers as they are (with thousands
// separators), millions as "3.85 M", the rest with about three significant
// digits.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 3-len(strconv.Itoa(int(a/1e6))), 64) + " M"
	case a >= 1000 || v == math.Trunc(v):
		s := strconv.FormatInt(int64(math.Round(a)), 10)
		var b strings.Builder
		if v < 0 {
			b.WriteByte('-')
		}
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// ratioText formats a ratio: two decimals from 0.1x to 100x, two
// significant digits below.
func ratioText(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 0.1 && a < 100:
		return strconv.FormatFloat(v, 'f', 2, 64) + "x"
	case a < 0.1 && a > 0:
		return strconv.FormatFloat(v, 'g', 2, 64) + "x"
	}
	return num(v) + "x"
}

func (t *Target) text(unit string) string {
	op := map[string]string{"<=": "≤", ">=": "≥"}[t.Op]
	v := num(t.Value)
	if unit == "x" {
		v += "x"
	} else if unit != "" {
		v += " " + unit
	}
	met := "met"
	if !t.Met {
		met = "**not met**"
	}
	return fmt.Sprintf("%s %s: %s", op, v, met)
}

// writeTable prints the report as one markdown table, headed by the facts
// of the run and followed by the checks.
func writeTable(w io.Writer, r *Report) {
	mode := "full run"
	if r.Quick {
		mode = "`--quick` run"
	}
	commit := r.Machine.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if r.Machine.Dirty != nil && *r.Machine.Dirty {
		commit += " with uncommitted changes"
	}
	if commit == "" {
		commit = "unknown"
	}
	fmt.Fprintf(w, "sbxbench %s, started %s, %.0f s wall; %d runs per figure. Machine: %d cores (%s), %s, Linux %s, work dir on %s; source tree at commit %s.\n\n",
		mode, r.Started, r.WallSeconds, r.Runs, r.Machine.NProc, r.Machine.CPU, r.Machine.GoVersion, r.Machine.Kernel, r.Machine.WorkFS, commit)
	fmt.Fprintf(w, "Median of the runs (min–max). A ratio is this row's figure ÷ the named row's, computed run by run: median (min–max).\n\n")
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	fmt.Fprintln(w, "| figure | median | min–max | ratios, per run | target | note |")
	fmt.Fprintln(w, "|---|---:|---:|---|---|---|")
	section := ""
	for _, x := range r.Rows {
		if x.Section != section {
			section = x.Section
			fmt.Fprintf(w, "| **%s** | | | | | |\n", esc(section))
		}
		if x.Missing != "" {
			fmt.Fprintf(w, "| %s | — | | | | %s |\n", esc(x.Name), esc(x.Missing))
			continue
		}
		unit := " " + x.Unit
		if x.Unit == "x" || x.Unit == "" {
			unit = strings.TrimSpace(unit)
		}
		var ratios, targets []string
		if x.Target != nil {
			targets = append(targets, x.Target.text(x.Unit))
		}
		for _, q := range x.Ratios {
			s := fmt.Sprintf("%s: %s", q.Label, ratioText(q.Median))
			if len(q.Values) > 1 {
				s += fmt.Sprintf(" (%s–%s)", ratioText(q.Min), ratioText(q.Max))
			}
			ratios = append(ratios, s)
			if q.Target != nil {
				targets = append(targets, q.Label+" "+q.Target.text("x"))
			}
		}
		rng := ""
		if len(x.Values) > 1 {
			rng = num(x.Min) + "–" + num(x.Max)
		}
		fmt.Fprintf(w, "| %s | %s%s | %s | %s | %s | %s |\n", esc(x.Name), num(x.Median), esc(unit), rng,
			esc(strings.Join(ratios, "; ")), esc(strings.Join(targets, "; ")), esc(x.Note))
	}
	if len(r.Checks) > 0 {
		fmt.Fprintln(w)
		for _, c := range r.Checks {
			fmt.Fprintf(w, "- %s: %s\n", c.Name, c.Result)
		}
	}
}

func writeJSON(path string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
