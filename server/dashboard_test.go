package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
)

// TestDashboardQueriesServedMetrics: every query of the Grafana dashboard
// in contrib/grafana names only metrics a server serves, once it has
// served requests, appended, collected garbage and scrubbed a store with
// a damaged blob; and the store-size gauges say what the store holds.
func TestDashboardQueriesServedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "contrib", "grafana", "sbxdb.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && (k == "expr" || k == "query") {
					exprs = append(exprs, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(dash)
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries; its shape changed", len(exprs))
	}

	db := openDB(t)
	ctx := context.Background()
	data := []byte(strings.Repeat("dashboard bytes ", 100))
	if _, err := db.PutObject(ctx, cas.Files.Key(sha256.Sum256(data)), bytes.NewReader(data), sbxdb.PutObjectOptions{Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(db.Dir(), engine.BlobDir, "packs", "*.pack"))
	for _, p := range packs { // damaged: the scrub reports findings
		pb, _ := os.ReadFile(p)
		pb[len(pb)-1] ^= 0xff
		os.WriteFile(p, pb, 0o644)
	}
	reg := prometheus.NewRegistry()
	s := New(db, Options{Registry: reg, Version: "test"})
	sctx, stop := context.WithCancel(ctx)
	scrubbed := make(chan struct{})
	go func() { defer close(scrubbed); s.Scrub(sctx, 10*time.Millisecond, 0) }()
	t.Cleanup(func() { stop(); <-scrubbed })
	c, url := tcp(t, s, "")
	w := writer(t, db, "th")
	appendN(t, db, w, 2)
	if _, err := c.GC(ctx, sbxdb.GCOptions{OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sweep(ctx, sbxdb.SweepOptions{OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	do(t, http.DefaultClient, "GET", url+"/v1/health", "")

	served := map[string]float64{}
	for deadline := time.Now().Add(time.Minute); ; {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		clear(served)
		for _, f := range fams {
			v := 0.0
			if m := f.GetMetric(); len(m) > 0 && m[0].GetGauge() != nil {
				v = m[0].GetGauge().GetValue()
			}
			served[f.GetName()] = v
		}
		if _, ok := served["sbxdb_scrub_findings"]; ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	name := regexp.MustCompile(`\bsbxdb_[a-z0-9_]+`)
	for _, e := range exprs {
		for _, n := range name.FindAllString(e, -1) {
			if _, ok := served[n]; ok {
				continue
			}
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			if _, ok := served[base]; !ok {
				t.Errorf("the dashboard queries %s (%q), which the server does not serve", n, e)
			}
		}
	}
	if served["sbxdb_store_checkpoints"] != 2 || served["sbxdb_store_threads"] != 1 || served["sbxdb_build_info"] != 1 {
		t.Errorf("store gauges: checkpoints %v, threads %v, build_info %v; want 2, 1, 1",
			served["sbxdb_store_checkpoints"], served["sbxdb_store_threads"], served["sbxdb_build_info"])
	}
}
