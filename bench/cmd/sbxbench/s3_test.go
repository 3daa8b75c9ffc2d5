package main

import (
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
)

// The request note spells out the run whose total is the median, so that
// its parts add up to the row's figure.
func TestCountsNoteIsTheMedianRun(t *testing.T) {
	counts := []engine.BlobRequestCounts{{Puts: 9, Heads: 1}, {Puts: 3, Gets: 1}, {Puts: 1}}
	totals := []float64{10, 4, 1}
	got := countsNote(counts, totals)
	if !strings.HasPrefix(got, "PUT 3, parts 0, multipart 0, GET 1,") {
		t.Errorf("countsNote = %q, want the counts of the run totalling 4", got)
	}
	if countsNote(nil, nil) != "" {
		t.Error("countsNote of no runs is not empty")
	}
	if d := div([]float64{4, 1}, 2); d[0] != 2 || d[1] != 0.5 {
		t.Errorf("div = %v", d)
	}
}
