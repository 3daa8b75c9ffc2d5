package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/bench/workload"
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

// TestS3Section runs the s3 section once on a small tree: every row has a
// figure (the restores match the tree, the S3 store made requests), or,
// without PostgreSQL or versitygw here and $CI empty, the test skips.
func TestS3Section(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and versitygw")
	}
	spec := workload.Quick()
	spec.TextFiles, spec.NodeModules.Files, spec.NodeModules.BinLinks = 100, 20, 1
	// s3Bench points the AWS_* variables at its server: put them back after.
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, os.Getenv(k))
	}
	cfg := &config{runs: 1, work: t.TempDir()}
	rep := newReport()
	if err := s3Bench(context.Background(), rep, cfg, spec); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s3.first.local", "s3.first.pg", "s3.first.s3", "s3.edit.s3", "s3.restore.s3", "s3.restore.s3cold"} {
		r := rep.byID[id]
		switch {
		case r == nil:
			t.Fatalf("no row %s", id)
		case r.Missing != "" && os.Getenv("CI") == "":
			t.Skipf("%s: %s", id, r.Missing)
		case len(r.Values) != 1:
			t.Fatalf("row %s: %d values (%s)", id, len(r.Values), r.Missing)
		}
	}
	if r := rep.byID["s3.first.s3.requests"]; r == nil || r.Median < 1 {
		t.Errorf("the first capture into the bucket made no request: %+v", r)
	}
	if r := rep.byID["s3.restore.s3cold.requests"]; r == nil || r.Median < 1 {
		t.Errorf("the cold restore made no request: %+v", r)
	}
}
