package ui

import (
	"fmt"
	"slices"
	"time"

	"github.com/sbxdb/sbxdb/cas"
)

// maxChartDays is how many upload days the storage chart draws a bar for:
// the newest days that have blobs; older ones share one bar, "earlier".
const maxChartDays = 30

// Chart geometry, in SVG user units.
const (
	chartBarW   = 40 // a bar's slot
	chartBarH   = 140
	chartLeft   = 8
	chartTop    = 8
	chartBottom = 40 // room for the day under the bars
)

// dayChart is the bar chart of the blob bytes stored now by the UTC day
// they were uploaded (last uploaded: cas.Info.Uploaded), per day, not
// cumulative.
type dayChart struct {
	Bars          []dayBar
	Width, Height int
	Total         int64 // all the bars' bytes
	Blobs         int   // the blobs counted
}

// dayBar is one day's bar.
type dayBar struct {
	Day    string // 2006-01-02, or "earlier"
	Short  string // the axis label
	Bytes  int64  // cas.Info.Stored summed
	Blobs  int
	X, Y   int // the rect's top left
	W, H   int
	TextX  int // the labels' centre
	LabelY int
}

// bytesByDay draws the chart of infos (one read of the blob index).
func bytesByDay(infos []cas.Info) dayChart {
	byDay := map[string]*dayBar{}
	var days []string
	for _, in := range infos {
		day := in.Uploaded.UTC().Format(time.DateOnly)
		b := byDay[day]
		if b == nil {
			b = &dayBar{Day: day}
			byDay[day] = b
			days = append(days, day)
		}
		b.Bytes += in.Stored
		b.Blobs++
	}
	slices.Sort(days)
	var c dayChart
	if len(days) > maxChartDays {
		earlier := dayBar{Day: "earlier", Short: "earlier"}
		for _, d := range days[:len(days)-maxChartDays] {
			earlier.Bytes += byDay[d].Bytes
			earlier.Blobs += byDay[d].Blobs
		}
		c.Bars = append(c.Bars, earlier)
		days = days[len(days)-maxChartDays:]
	}
	for _, d := range days {
		b := *byDay[d]
		b.Short = d[5:] // MM-DD
		c.Bars = append(c.Bars, b)
	}
	var most int64
	for _, b := range c.Bars {
		c.Total += b.Bytes
		c.Blobs += b.Blobs
		most = max(most, b.Bytes)
	}
	for i := range c.Bars {
		b := &c.Bars[i]
		if b.Bytes > 0 { // a day's bar is at least 1 unit tall
			b.H = max(1, int(float64(b.Bytes)*chartBarH/float64(most)))
		}
		b.X, b.W = chartLeft+i*chartBarW+3, chartBarW-6
		b.Y = chartTop + chartBarH - b.H
		b.TextX = b.X + b.W/2
		b.LabelY = chartTop + chartBarH + 14
	}
	c.Width = max(200, 2*chartLeft+len(c.Bars)*chartBarW)
	c.Height = chartTop + chartBarH + chartBottom
	return c
}

// String describes the bar for its title and label.
func (b dayBar) String() string {
	day := "uploaded " + b.Day
	if b.Day == "earlier" {
		day = "uploaded earlier"
	}
	return fmt.Sprintf("%s: %s stored, %d blobs", day, humanBytes(b.Bytes), b.Blobs)
}
