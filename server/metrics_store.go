package server

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/server/ui"
)

// storeSizeEvery is how old the store-size gauges may be: reading them
// walks every checkpoint's header and the blob index (engine.DB.Stats), too
// much for every scrape of a large store.
const storeSizeEvery = time.Minute

// sizeCollector serves the store's sizes as gauges, read with
// engine.DB.Stats at most once per every: a scrape that finds them older
// reads them again (one scrape at a time), the others serve the last
// reading. A reading that fails leaves the series out until one succeeds.
type sizeCollector struct {
	db    *engine.DB
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	at   time.Time
	last *sbxdb.StoreStats
	err  error

	threads, checkpoints, metaBytes, blobs, logical, stored, dead, packs *prometheus.Desc
}

func newSizeCollector(db *engine.DB, every time.Duration) *sizeCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &sizeCollector{
		db: db, every: every, now: time.Now,
		threads:     d("sbxdb_store_threads", "Threads in the store."),
		checkpoints: d("sbxdb_store_checkpoints", "Checkpoints in the store."),
		metaBytes:   d("sbxdb_store_metadata_bytes", "Bytes the checkpoints' records and shared chunks take."),
		blobs:       d("sbxdb_store_blobs", "Blobs stored."),
		logical:     d("sbxdb_store_blob_logical_bytes", "Uncompressed bytes of the stored blobs, each counted once."),
		stored:      d("sbxdb_store_blob_stored_bytes", "Bytes the packs and large blob files take."),
		dead:        d("sbxdb_store_blob_dead_bytes", "Bytes of packs that no index entry names any more (a repack gives them back)."),
		packs:       d("sbxdb_store_packs", "Pack files."),
	}
}

func (c *sizeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.threads, c.checkpoints, c.metaBytes, c.blobs, c.logical, c.stored, c.dead, c.packs} {
		ch <- d
	}
}

func (c *sizeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if c.last == nil || c.now().Sub(c.at) >= c.every {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := c.db.Stats(ctx)
		cancel()
		c.at = c.now()
		if err == nil {
			c.last = st
		}
		c.err = err
	}
	st := c.last
	c.mu.Unlock()
	if st == nil {
		return
	}
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	g(c.threads, float64(st.Threads))
	g(c.checkpoints, float64(st.Checkpoints))
	g(c.metaBytes, float64(st.PhysicalMetadataBytes))
	g(c.blobs, float64(st.Blobs))
	g(c.logical, float64(st.BlobLogicalBytes))
	g(c.stored, float64(st.BlobPhysicalBytes))
	g(c.dead, float64(st.BlobDeadBytes))
	g(c.packs, float64(st.Packs))
}

// buildInfo is the constant sbxdb_build_info series: 1, labelled with the
// build's version, its Go version and the store format it writes.
func buildInfo(version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sbxdb_build_info", Help: "1, labelled with the build: its version, Go version and the store format it writes.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version(), "format": strconv.Itoa(engine.FormatVersion)},
	})
	g.Set(1)
	return g
}

// gcLast records the end of a garbage collection or sweep of kind: when,
// and whether it succeeded.
type gcLast struct {
	at, ok *prometheus.GaugeVec
}

func newGCLast() gcLast {
	return gcLast{
		at: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sbxdb_gc_last_run_timestamp_seconds", Help: "When the last garbage collection (gc) or sweep (sweep) ended, dry runs excluded.",
		}, []string{"kind"}),
		ok: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sbxdb_gc_last_run_success", Help: "1 if the last garbage collection (gc) or sweep (sweep) succeeded, else 0.",
		}, []string{"kind"}),
	}
}

func (g gcLast) done(kind string, err error) {
	g.at.WithLabelValues(kind).Set(float64(time.Now().UnixNano()) / 1e9)
	ok := 1.0
	if err != nil {
		ok = 0
	}
	g.ok.WithLabelValues(kind).Set(ok)
}

// gcRan records a gc (dry or not) for the UI's list of the last runs.
func (m *metrics) gcRan(dry bool, freed int64, retention sbxdb.RetentionResult, err error) {
	n := 0
	for _, ids := range retention.Deleted {
		n += len(ids)
	}
	m.gcLog.Add(ui.GCRun{At: time.Now(), Kind: "gc", DryRun: dry, Err: errText(err), Freed: freed, Checkpoints: n})
}

// sweepRan records a sweep (dry or not) for the UI's list of the last runs.
func (m *metrics) sweepRan(dry bool, res sbxdb.SweepResult, err error) {
	m.gcLog.Add(ui.GCRun{At: time.Now(), Kind: "sweep", DryRun: dry, Err: errText(err), Freed: res.Bytes})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
