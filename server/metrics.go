package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/server/ui"
)

// appendRoute is the endpoint whose successes count as appends, beside
// the captures admin.go counts.
const appendRoute = "POST /v1/checkpoints/append"

// metrics are the series GET /metrics serves (docs/API.md, Service). The
// request series are labelled by route pattern, never by path, so their
// number stays bounded whatever clients send. What the engine counts
// itself (write transactions) and what the store holds (live leases) is
// read at scrape time by storeCollector, not kept here.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec   // by route and status code
	duration *prometheus.HistogramVec // by route
	bytesIn  *prometheus.CounterVec   // request body bytes read, by route
	bytesOut *prometheus.CounterVec   // response body bytes written, by route
	inFlight prometheus.Gauge
	appends  prometheus.Counter
	gcRuns   *prometheus.CounterVec // by kind: gc or sweep
	gcFreed  *prometheus.CounterVec // blob bytes freed, by kind
	gcLast   gcLast                 // the last run's end and outcome, by kind
	gcLog    *ui.GCRuns             // the last runs, dry ones included, for the UI's storage page

	authFailures  prometheus.Counter     // tokens checked and refused
	authThrottled prometheus.Counter     // requests refused unchecked, their peer backing off
	connsClosed   *prometheus.CounterVec // connections the connLimiter closed, by reason
}

func newMetrics(s *Server, reg *prometheus.Registry) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbxdb_http_requests_total", Help: "Requests served, by route pattern and HTTP status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sbxdb_http_request_duration_seconds", Help: "Time from a request's arrival to the end of its response, by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms to 262 s
		}, []string{"route"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbxdb_http_request_bytes_total", Help: "Request body bytes read, by route pattern.",
		}, []string{"route"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbxdb_http_response_bytes_total", Help: "Response body bytes written, by route pattern.",
		}, []string{"route"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sbxdb_http_requests_in_flight", Help: "Requests being served, waiting for a slot included.",
		}),
		appends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sbxdb_appends_total", Help: "Checkpoints appended through the append and capture endpoints.",
		}),
		gcRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbxdb_gc_runs_total", Help: "Garbage collections (gc) and sweeps (sweep) completed, dry runs excluded.",
		}, []string{"kind"}),
		gcFreed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbxdb_gc_freed_bytes_total", Help: "Blob bytes on disk freed by sweeps and repacks, by kind of run.",
		}, []string{"kind"}),
	}
	m.authFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sbxdb_auth_failures_total", Help: "Requests whose bearer token was checked and refused (missing or wrong).",
	})
	m.authThrottled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sbxdb_auth_throttled_total", Help: "Requests refused without a check, their peer backing off after failed authentications.",
	})
	reg.MustRegister(m.requests, m.duration, m.bytesIn, m.bytesOut, m.inFlight, m.appends, m.gcRuns, m.gcFreed, newStoreCollector(s.db))
	m.connsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sbxdb_connections_closed_total", Help: "Connections the server closed to bound them: auth_timeout (no authenticated request in time), evicted (the oldest unauthenticated one, for a new one at the cap), refused (a new one at the cap).",
	}, []string{"reason"})
	connsOpen := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sbxdb_connections_open", Help: "Connections open on the server's listeners.",
	}, func() float64 {
		if s.conns == nil {
			return 0
		}
		return float64(s.conns.openConns())
	})
	reg.MustRegister(m.authFailures, m.authThrottled, m.connsClosed, connsOpen)
	m.gcLast = newGCLast()
	m.gcLog = new(ui.GCRuns)
	reg.MustRegister(m.gcLast.at, m.gcLast.ok, newSizeCollector(s.db, storeSizeEvery), buildInfo(s.opts.Version))
	return m
}

// request records one request.
func (m *metrics) request(route string, status int, d time.Duration, in, out int64) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
	m.bytesIn.WithLabelValues(route).Add(float64(in))
	m.bytesOut.WithLabelValues(route).Add(float64(out))
	if route == appendRoute && status == http.StatusOK {
		m.appends.Inc()
	}
}

// handler serves the registry in the Prometheus text format. A collector
// that fails (the store closing under a scrape) leaves out its own series
// only.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// storeCollector reads at scrape time what the engine counts and what the
// store holds, so that no write path carries instrumentation.
type storeCollector struct {
	db                    *engine.DB
	txs, held, liveLeases *prometheus.Desc
	batches               *prometheus.Desc
	poisoned, recoveries  *prometheus.Desc
}

func newStoreCollector(db *engine.DB) *storeCollector {
	return &storeCollector{
		db: db,
		txs: prometheus.NewDesc("sbxdb_write_transactions_total",
			"Write transactions run since the store was opened; the group commit puts every write queued while one commits into the next.", nil, nil),
		held: prometheus.NewDesc("sbxdb_write_lock_held_seconds_total",
			"Time write transactions held the store's single write lock, commit and fsync included.", nil, nil),
		batches: prometheus.NewDesc("sbxdb_write_batch_size",
			"Writes per transaction the group commit shared, by committed transaction.", nil, nil),
		liveLeases: prometheus.NewDesc("sbxdb_writer_leases_live",
			"Writer leases live now (held and not expired).", nil, nil),
		poisoned: prometheus.NewDesc("sbxdb_store_poisoned",
			"1 while the store is poisoned (a sync failed: writes are refused until it is reopened), else 0.", nil, nil),
		recoveries: prometheus.NewDesc("sbxdb_store_recoveries_total",
			"Times the store was reopened in place after it was poisoned, since it was opened.", nil, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.txs
	ch <- c.held
	ch <- c.batches
	ch <- c.liveLeases
	ch <- c.poisoned
	ch <- c.recoveries
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	poisoned := 0.0
	if c.db.Poisoned() != nil {
		poisoned = 1
	}
	ch <- prometheus.MustNewConstMetric(c.poisoned, prometheus.GaugeValue, poisoned)
	ch <- prometheus.MustNewConstMetric(c.recoveries, prometheus.CounterValue, float64(c.db.Recoveries()))
	ws := c.db.WriteStats()
	ch <- prometheus.MustNewConstMetric(c.txs, prometheus.CounterValue, float64(ws.Transactions))
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.CounterValue, ws.Held.Seconds())
	buckets, count := map[float64]uint64{}, uint64(0)
	for i, n := range ws.Batches {
		count += uint64(n)
		buckets[float64(engine.BatchBounds[i])] = count
	}
	ch <- prometheus.MustNewConstHistogram(c.batches, count, float64(ws.BatchedWrites), buckets)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	states, err := c.db.Writers(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.liveLeases, err)
		return
	}
	now, live := time.Now().UnixMilli(), 0
	for _, st := range states {
		if st.Live(now) {
			live++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.liveLeases, prometheus.GaugeValue, float64(live))
}
