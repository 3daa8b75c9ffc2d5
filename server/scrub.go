package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// DefaultScrubBytesPerSecond is the rate at which a scrub reads blobs back
// unless told otherwise (Server.Scrub).
const DefaultScrubBytesPerSecond = 32 << 20

// Results of a scrub, as health and the sbxdb_scrubs_total series name
// them.
const (
	ScrubClean    = "clean"    // no finding of severity error (warnings allowed)
	ScrubFindings = "findings" // one or more findings of severity error
	ScrubFailed   = "failed"   // the check could not run
)

// FindingPages is the finding kind a scrub reports when the page walk
// finds the database file damaged: Check then returns ErrCorrupt rather
// than a report.
const FindingPages = "pages"

// maxLoggedFindings bounds the findings a scrub logs one by one; the
// summary line counts them all.
const maxLoggedFindings = 100

// scrubber runs the store's check in the background (Server.Scrub) and
// keeps the outcome of the last one for health and metrics.
type scrubber struct {
	every time.Duration
	rate  int64

	mu     sync.Mutex
	last   *scrubOutcome     // nil until one has ended
	totals map[string]uint64 // scrubs ended, by result
}

// scrubOutcome is one scrub's end.
type scrubOutcome struct {
	end      time.Time
	duration time.Duration
	result   string
	errors   int               // findings of severity error
	warnings int               // findings of severity warning
	kinds    map[[2]string]int // findings by severity and kind
	err      error             // why it failed (ScrubFailed)
}

// Scrub checks the store every interval until ctx ends, as `sbxdb check
// --verify-blobs` does: the page walk, the metadata, the blob index and
// every blob read back against its key, reading blobs at most
// bytesPerSecond (0: DefaultScrubBytesPerSecond; the page walk and the
// metadata checks are not paced, see sbxdb.CheckStoreOptions). The first
// scrub starts one interval after the call, each next one an interval
// after the previous ended, so that scrubs never overlap. Findings are
// logged (Options.Logger) and reported by /metrics and /v1/health; a scrub
// repairs nothing. Scrub returns when ctx ends, the scrub in progress
// cancelled; call it at most once, before the store is closed.
func (s *Server) Scrub(ctx context.Context, every time.Duration, bytesPerSecond int64) {
	if every <= 0 {
		return
	}
	if bytesPerSecond <= 0 {
		bytesPerSecond = DefaultScrubBytesPerSecond
	}
	sc := &scrubber{every: every, rate: bytesPerSecond, totals: map[string]uint64{}}
	s.scrubMu.Lock()
	if s.scrub != nil {
		s.scrubMu.Unlock()
		return
	}
	s.scrub = sc
	s.scrubMu.Unlock()
	s.metrics.reg.MustRegister(newScrubCollector(sc))
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		o := s.scrubOnce(ctx, sc)
		if o == nil {
			return // cancelled
		}
		sc.mu.Lock()
		sc.last = o
		sc.totals[o.result]++
		sc.mu.Unlock()
		t.Reset(every)
	}
}

// scrubOnce runs one check, logs what it found and returns its outcome;
// nil if ctx ended meanwhile.
func (s *Server) scrubOnce(ctx context.Context, sc *scrubber) *scrubOutcome {
	start := time.Now()
	r, err := s.db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true, BytesPerSecond: sc.rate})
	if ctx.Err() != nil {
		return nil
	}
	o := &scrubOutcome{end: time.Now(), kinds: map[[2]string]int{}}
	o.duration = o.end.Sub(start)
	log := s.opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var findings []sbxdb.Finding
	switch {
	case errors.Is(err, chain.ErrCorrupt):
		// The page walk refused the file: damage, not a failure to run.
		findings = []sbxdb.Finding{{Severity: sbxdb.SeverityError, Kind: FindingPages, Subject: engine.DBFile, Detail: err.Error()}}
	case err != nil:
		o.result, o.err = ScrubFailed, err
		log.Error("scrub failed", "duration", o.duration, "err", err)
		return o
	default:
		findings = r.Findings
	}
	for i, f := range findings {
		o.kinds[[2]string{f.Severity, f.Kind}]++
		level := slog.LevelWarn
		if f.Severity == sbxdb.SeverityError {
			o.errors++
			level = slog.LevelError
		} else {
			o.warnings++
		}
		if i < maxLoggedFindings {
			log.Log(ctx, level, "scrub finding", "severity", f.Severity, "kind", f.Kind, "subject", f.Subject, "detail", f.Detail)
		}
	}
	o.result = ScrubClean
	if o.errors > 0 {
		o.result = ScrubFindings
	}
	log.Info("scrub", "result", o.result, "duration", o.duration, "errors", o.errors, "warnings", o.warnings)
	return o
}

// scrubHealthJSON is the scrub part of GET /v1/health, present when the
// server scrubs.
type scrubHealthJSON struct {
	EveryMs int64 `json:"everyMs"`
	// Result of the last scrub: "pending" before the first has ended,
	// then ScrubClean, ScrubFindings or ScrubFailed.
	Result     string         `json:"result"`
	EndedAt    string         `json:"endedAt,omitempty"` // RFC 3339, UTC
	DurationMs int64          `json:"durationMs,omitempty"`
	Errors     int            `json:"errors"`   // findings of severity error
	Warnings   int            `json:"warnings"` // findings of severity warning
	Kinds      map[string]int `json:"kinds,omitempty"`
	Error      string         `json:"error,omitempty"` // why it failed
}

// health returns the scrub part of health; nil when the server does not
// scrub.
func (s *Server) scrubHealth() *scrubHealthJSON {
	s.scrubMu.Lock()
	sc := s.scrub
	s.scrubMu.Unlock()
	if sc == nil {
		return nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	h := &scrubHealthJSON{EveryMs: sc.every.Milliseconds(), Result: "pending"}
	if o := sc.last; o != nil {
		h.Result, h.EndedAt, h.DurationMs = o.result, o.end.UTC().Format(time.RFC3339Nano), o.duration.Milliseconds()
		h.Errors, h.Warnings = o.errors, o.warnings
		if len(o.kinds) > 0 {
			h.Kinds = map[string]int{}
			for k, n := range o.kinds {
				h.Kinds[k[1]] += n
			}
		}
		if o.err != nil {
			h.Error = o.err.Error()
		}
	}
	return h
}

// scrubCollector serves the scrub's series at scrape time.
type scrubCollector struct {
	sc                                 *scrubber
	total, lastEnd, lastDuration, kind *prometheus.Desc
}

func newScrubCollector(sc *scrubber) *scrubCollector {
	return &scrubCollector{
		sc: sc,
		total: prometheus.NewDesc("sbxdb_scrubs_total",
			"Background scrubs ended, by result: clean, findings (of severity error), failed (could not run).", []string{"result"}, nil),
		lastEnd: prometheus.NewDesc("sbxdb_scrub_last_end_timestamp_seconds",
			"When the last scrub ended, in seconds since the epoch.", nil, nil),
		lastDuration: prometheus.NewDesc("sbxdb_scrub_last_duration_seconds",
			"How long the last scrub took.", nil, nil),
		kind: prometheus.NewDesc("sbxdb_scrub_findings",
			"Findings of the last scrub, by severity and kind (check's kinds, and pages for a damaged database file).", []string{"severity", "kind"}, nil),
	}
}

func (c *scrubCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.total
	ch <- c.lastEnd
	ch <- c.lastDuration
	ch <- c.kind
}

func (c *scrubCollector) Collect(ch chan<- prometheus.Metric) {
	c.sc.mu.Lock()
	defer c.sc.mu.Unlock()
	for _, r := range []string{ScrubClean, ScrubFindings, ScrubFailed} {
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(c.sc.totals[r]), r)
	}
	o := c.sc.last
	if o == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.lastEnd, prometheus.GaugeValue, float64(o.end.UnixNano())/1e9)
	ch <- prometheus.MustNewConstMetric(c.lastDuration, prometheus.GaugeValue, o.duration.Seconds())
	for k, n := range o.kinds {
		ch <- prometheus.MustNewConstMetric(c.kind, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}
