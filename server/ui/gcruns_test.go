package ui

import (
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/cas"
)

func TestGCRunsKeepsTheLastTen(t *testing.T) {
	var g GCRuns
	if got := g.Last(); len(got) != 0 {
		t.Fatalf("empty: %v", got)
	}
	for i := range 13 {
		g.Add(GCRun{At: time.UnixMilli(int64(i)), Kind: "gc", Freed: int64(i)})
	}
	got := g.Last()
	if len(got) != MaxGCRuns {
		t.Fatalf("kept %d runs, want %d", len(got), MaxGCRuns)
	}
	for i, r := range got {
		if want := int64(12 - i); r.Freed != want {
			t.Fatalf("run %d freed %d, want %d (newest first)", i, r.Freed, want)
		}
	}
}

func TestBytesByDay(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 1, 1, 23, 59, 0, 0, time.UTC).AddDate(0, 0, d) }
	var infos []cas.Info
	for d := range 35 { // 35 days, 2 blobs a day of d+1 and 1 stored bytes
		infos = append(infos, cas.Info{Key: "a", Stored: int64(d + 1), Uploaded: day(d)}, cas.Info{Key: "b", Stored: 1, Uploaded: day(d)})
	}
	c := bytesByDay(infos)
	if len(c.Bars) != maxChartDays+1 || c.Bars[0].Day != "earlier" || c.Bars[0].Blobs != 10 || c.Bars[0].Bytes != 1+2+3+4+5+5 {
		t.Fatalf("the first bar %+v of %d", c.Bars[0], len(c.Bars))
	}
	last := c.Bars[len(c.Bars)-1]
	if last.Day != "2026-02-04" || last.Bytes != 36 || last.H != chartBarH || c.Blobs != 70 {
		t.Fatalf("the last bar %+v, %d blobs", last, c.Blobs)
	}
	if e := bytesByDay(nil); len(e.Bars) != 0 || e.Total != 0 {
		t.Fatalf("no blobs: %+v", e)
	}
}
