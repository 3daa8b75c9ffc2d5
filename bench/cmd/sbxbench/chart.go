package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"slices"
)

// chartTools are the bars of each group, in order, with their colours.
var chartTools = []struct{ name, color string }{
	{"sbxdb", "#1f6feb"},
	{"git", "#d97706"},
	{"tar | zstd -1 -T0", "#6b7280"},
	{"restic", "#7c3aed"},
	{"kopia", "#059669"},
}

// chart renders the report's throughput series as a small SVG bar chart:
// one group of horizontal bars per operation (first capture, restore), one
// bar per tool at its median MB/s, with a whisker from the minimum to the
// maximum of the runs. A tool without figures is marked "not measured".
func chart(r *Report) []byte {
	const (
		width   = 680
		left    = 150 // labels
		right   = 90  // value labels
		barH    = 18
		gap     = 6
		groupH  = 24
		top     = 74
		axisPad = 26
	)
	groups := []string{}
	for _, s := range r.Throughput {
		if !slices.Contains(groups, s.Group) {
			groups = append(groups, s.Group)
		}
	}
	find := func(group, tool string) *Series {
		for _, s := range r.Throughput {
			if s.Group == group && s.Tool == tool {
				return s
			}
		}
		return nil
	}
	top1 := 0.0
	for _, s := range r.Throughput {
		top1 = max(top1, s.Max)
	}
	scaleMax, step := niceAxis(top1)
	plotW := float64(width - left - right)
	x := func(v float64) float64 { return float64(left) + plotW*v/scaleMax }
	height := top + len(groups)*(groupH+len(chartTools)*(barH+gap)) + axisPad + 10

	var b bytes.Buffer
	esc := html.EscapeString
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	mode := "full run"
	if r.Quick {
		mode = "--quick run"
	}
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("Throughput on the same %.1f MB tree, MB/s (higher is better)", float64(r.Tree.Bytes)/1e6)))
	fmt.Fprintf(&b, `<text x="10" y="38" fill="#555" font-size="11">%s</text>`+"\n",
		esc(fmt.Sprintf("sbxbench %s, %s, %d cores; bar: median of %d runs, whisker: min–max", mode, r.Started, r.Machine.NProc, r.Runs)))
	fmt.Fprintf(&b, `<text x="10" y="54" fill="#555" font-size="11">%s</text>`+"\n",
		esc("sbxdb and restic fsync their stores, git, tar | zstd and kopia do not; no tool fsyncs a restore."))

	// Grid and axis.
	plotBottom := height - axisPad - 4
	for v := 0.0; v <= scaleMax+step/2; v += step {
		xv := x(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e5e7eb"/>`+"\n", xv, top-6, xv, plotBottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", xv, plotBottom+16, esc(num(v)))
	}

	y := top
	for _, g := range groups {
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+14, esc(g))
		y += groupH
		for _, t := range chartTools {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+barH-5, esc(t.name))
			s := find(g, t.name)
			if s == nil {
				fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#888" font-style="italic">not measured (not installed)</text>`+"\n", left+4, y+barH-5)
				y += barH + gap
				continue
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, x(s.Median)-float64(left), barH, t.color)
			mid := y + barH/2
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#111" stroke-width="1.2"/>`+"\n", x(s.Min), mid, x(s.Max), mid)
			for _, v := range []float64{s.Min, s.Max} {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#111" stroke-width="1.2"/>`+"\n", x(v), mid-5, x(v), mid+5)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", math.Max(x(s.Max), x(s.Median))+6, y+barH-5, esc(num(s.Median)+" MB/s"))
			y += barH + gap
		}
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// niceAxis returns an axis maximum of at least v and a tick step: 1, 2 or
// 5 times a power of ten, about five ticks.
func niceAxis(v float64) (float64, float64) {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1, 0.2
	}
	raw := v / 5
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := p
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	return math.Ceil(v/step) * step, step
}
