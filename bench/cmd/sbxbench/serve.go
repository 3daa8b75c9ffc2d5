package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb/bench/suite"
)

// serveBench measures the cost of the API: durable appends at 1, 8 and 64
// concurrent clients over a unix socket against the same appends in
// process, and blob PUT and GET of 1 MiB and 64 MiB over the socket
// against in process. Each run runs every benchmark once, back to back, in
// an order rotated by one each run, each on a fresh store, so each ratio
// compares figures taken seconds apart.
func serveBench(rep *Report, cfg *config) error {
	suite.KeepDir = filepath.Join(cfg.work, "serve")
	if err := os.MkdirAll(suite.KeepDir, 0o755); err != nil {
		return err
	}
	type bench struct {
		id string
		f  func(b *testing.B)
	}
	var benches []bench
	for _, n := range []int{1, 8, 64} {
		benches = append(benches,
			bench{fmt.Sprintf("local%d", n), func(b *testing.B) { suite.AppendConcurrent(b, n) }},
			bench{fmt.Sprintf("served%d", n), func(b *testing.B) { suite.AppendServed(b, n) }})
	}
	for _, mib := range []int{1, 64} {
		for _, served := range []bool{false, true} {
			where := "local"
			if served {
				where = "served"
			}
			benches = append(benches,
				bench{fmt.Sprintf("put%d.%s", mib, where), func(b *testing.B) { suite.BlobPut(b, mib<<20, served) }},
				bench{fmt.Sprintf("get%d.%s", mib, where), func(b *testing.B) { suite.BlobGet(b, mib<<20, served) }})
		}
	}
	results := map[string][]testing.BenchmarkResult{}
	for run := range cfg.runs {
		progress("serve, run %d of %d", run+1, cfg.runs)
		for i := range benches {
			b := benches[(i+run)%len(benches)]
			r, err := benchmark(b.id, cfg.benchtime, b.f)
			if err != nil {
				return err
			}
			results[b.id] = append(results[b.id], r)
		}
	}
	appends := func(id string) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, r.Extra["appends/s"])
		}
		return v
	}
	mbps := func(id string) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, float64(r.Bytes)*float64(r.N)/r.T.Seconds()/1e6)
		}
		return v
	}

	rep.setSection(fmt.Sprintf("sbxdb serve: the API over a unix socket against the engine in process, fsync on, %s per benchmark and run", cfg.benchtime))
	for _, n := range []int{1, 8, 64} {
		local := rep.add(fmt.Sprintf("serve.append.local%d", n), fmt.Sprintf("Append in process, %d writers", n), "appends/s", appends(fmt.Sprintf("local%d", n)), "")
		served := rep.add(fmt.Sprintf("serve.append.served%d", n), fmt.Sprintf("Append through the socket, %d clients", n), "appends/s", appends(fmt.Sprintf("served%d", n)), "one HTTP request per append")
		x := rep.ratio(served, local.ID, "÷ in process")
		if n == 64 {
			x.want(">=", 0.7)
		}
	}
	for _, mib := range []int{1, 64} {
		for _, op := range []string{"put", "get"} {
			what := map[string]string{"put": "PUT (new blob, durable)", "get": "GET (whole blob, verified)"}[op]
			local := rep.add(fmt.Sprintf("serve.%s%d.local", op, mib), fmt.Sprintf("%d MiB %s in process", mib, what), "MB/s", mbps(fmt.Sprintf("%s%d.local", op, mib)), "")
			served := rep.add(fmt.Sprintf("serve.%s%d.served", op, mib), fmt.Sprintf("%d MiB %s through the socket", mib, what), "MB/s", mbps(fmt.Sprintf("%s%d.served", op, mib)), "")
			rep.ratio(served, local.ID, "÷ in process").want(">=", 0.7)
		}
	}
	return nil
}
