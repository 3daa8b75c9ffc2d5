package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/bench/workload"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lease"
)

// s3Config is one storage configuration of the S3 section.
type s3Config struct {
	id, label string
	// opts returns the options of run i's store: each store starts with
	// an empty database and bucket of its own.
	opts func(i int) (*engine.Options, error)
	s3   bool // the blobs are in the bucket: the handle counts requests
}

// s3Bench measures the first capture, the capture after a 1 % edit and
// the restore of the benchmark tree (bench/workload, the capture
// section's scale and policy) in three storage configurations in the same
// run: bbolt + the blob directory, PostgreSQL metadata + the blob
// directory, and PostgreSQL metadata + blobs in an S3 bucket (versitygw on
// loopback, internal/testkit/s3server). The restore of the S3 store is
// also timed through a second engine handle on an empty directory (the
// same database and bucket): a cold cache, every blob fetched from the
// bucket. The S3 rows count the requests of the handle's own bucket
// client (engine.DB.BlobRequests). Every store, database and bucket is
// made before anything is timed; the configurations take turns within
// each run, so every ratio compares figures taken seconds apart.
func s3Bench(ctx context.Context, rep *Report, cfg *config, spec workload.Spec) error {
	work, runs := filepath.Join(cfg.work, "s3"), cfg.runs
	tree := filepath.Join(work, "tree")
	st, err := workload.Generate(tree, spec)
	if err != nil {
		return err
	}
	time.Sleep(2100 * time.Millisecond) // every file older than the stat cache's racy window

	title := fmt.Sprintf("S3 blobs: the tree (%s files, %.1f MB) stored three ways: bbolt + blob directory, PostgreSQL + blob directory, PostgreSQL + S3 (versitygw on loopback)",
		num(float64(st.Files)), float64(st.Bytes)/1e6)
	be := cfg.backends()
	newDB, whyPG, srv, whyS3 := be.newDB, be.whyPG, be.s3, be.whyS3
	if srv != nil {
		useS3(srv, srv.Endpoint) // not a proxy of the network section
	}

	configs := []s3Config{{id: "local", label: "bbolt + blob directory", opts: func(int) (*engine.Options, error) { return nil, nil }}}
	if newDB != nil {
		configs = append(configs, s3Config{id: "pg", label: "PostgreSQL + blob directory", opts: func(int) (*engine.Options, error) {
			u, err := newDB()
			return &engine.Options{Metadata: u}, err
		}})
	}
	if srv != nil {
		configs = append(configs, s3Config{id: "s3", label: "PostgreSQL + S3", s3: true, opts: func(int) (*engine.Options, error) {
			u, err := newDB()
			return &engine.Options{Metadata: u, Blobs: newBucket()}, err
		}})
	}

	// Prepare: every store's options (a database and a bucket name each).
	opts := make(map[string][]*engine.Options)
	store := func(c s3Config, i int) string { return filepath.Join(work, fmt.Sprintf("%s-store%d", c.id, i)) }
	for _, c := range configs {
		for i := range runs {
			o, err := c.opts(i)
			if err != nil {
				return fmt.Errorf("%s: %w", c.label, err)
			}
			opts[c.id] = append(opts[c.id], o)
		}
	}

	// First capture into a fresh store, Open timed apart: a fresh
	// database gets its tables at Open, once per store.
	first, open := map[string][]float64{}, map[string][]float64{}
	var firstReq []float64
	var firstCounts []engine.BlobRequestCounts
	for i := range runs {
		for _, c := range configs {
			progress("S3 section: first capture, %s, run %d of %d", c.label, i+1, runs)
			settle()
			t := time.Now()
			db, err := engine.Open(store(c, i), opts[c.id][i])
			if err != nil {
				return fmt.Errorf("%s: %w", c.label, err)
			}
			open[c.id] = append(open[c.id], time.Since(t).Seconds()*1000)
			before, _ := db.BlobRequests()
			t = time.Now()
			err = labeled(ctx, "first", c.id, func(ctx context.Context) error { return captureOnce(ctx, db, tree) })
			d := time.Since(t)
			after, _ := db.BlobRequests()
			if cerr := db.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", c.label, err)
			}
			first[c.id] = append(first[c.id], d.Seconds())
			if c.s3 {
				n := after.Sub(before)
				firstCounts = append(firstCounts, n)
				firstReq = append(firstReq, float64(n.Total()))
			}
		}
	}

	// 1 % edit: the stores of run 0, each handle and its writer's lease
	// kept open after one untimed capture of the unchanged tree (Open, the
	// stat cache), as the capture section does; a new edit each run,
	// captured by every configuration in turn.
	dbs, writers := map[string]*engine.DB{}, map[string]*lease.Lease{}
	defer func() {
		for _, db := range dbs {
			db.Close()
		}
	}()
	for _, c := range configs {
		db, err := engine.Open(store(c, 0), opts[c.id][0])
		if err != nil {
			return fmt.Errorf("%s: %w", c.label, err)
		}
		dbs[c.id] = db
		if err := captureOnce(ctx, db, tree); err != nil {
			return fmt.Errorf("%s: %w", c.label, err)
		}
		l, err := db.AcquireWriter(ctx, "bench")
		if err != nil {
			return fmt.Errorf("%s: %w", c.label, err)
		}
		writers[c.id] = l
	}
	edit := map[string][]float64{}
	var editReq, editFiles []float64
	var editCounts []engine.BlobRequestCounts
	for i := range runs {
		progress("S3 section: 1 %% edit, run %d of %d", i+1, runs)
		paths, _, err := workload.Edit(tree, spec, 0.01, 1000+i)
		if err != nil {
			return err
		}
		editFiles = append(editFiles, float64(len(paths)))
		time.Sleep(2100 * time.Millisecond)
		for _, c := range configs {
			db := dbs[c.id]
			before, _ := db.BlobRequests()
			t := time.Now()
			err := labeled(ctx, "edit", c.id, func(ctx context.Context) error {
				_, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: writers[c.id].Writer, Dir: tree, Policy: allFiles})
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: %w", c.label, err)
			}
			edit[c.id] = append(edit[c.id], time.Since(t).Seconds()*1000)
			if c.s3 {
				after, _ := db.BlobRequests()
				n := after.Sub(before)
				editCounts = append(editCounts, n)
				editReq = append(editReq, float64(n.Total()))
			}
		}
	}

	// Restore of the edited tree into an empty directory, through the
	// handle that captured it, and for S3 through a second handle on an
	// empty directory (opened before the timing: one per run, so that each
	// starts with nothing cached).
	heads := map[string]string{}
	for _, c := range configs {
		h, err := dbs[c.id].Head(ctx, "bench")
		if err != nil {
			return err
		}
		heads[c.id] = h
	}
	var cold []*engine.DB
	defer func() {
		for _, db := range cold {
			db.Close()
		}
	}()
	if srv != nil {
		for i := range runs {
			db, err := engine.Open(filepath.Join(work, fmt.Sprintf("s3-cold%d", i)), opts["s3"][0])
			if err != nil {
				return fmt.Errorf("the second handle: %w", err)
			}
			cold = append(cold, db)
		}
	}
	restore := map[string][]float64{}
	var coldReq []float64
	var coldCounts []engine.BlobRequestCounts
	target := func(id string, i int) string { return filepath.Join(work, fmt.Sprintf("%s-restore%d", id, i)) }
	for i := range runs {
		progress("S3 section: restore, run %d of %d", i+1, runs)
		for _, c := range configs {
			settle()
			t := time.Now()
			err := labeled(ctx, "restore", c.id, func(ctx context.Context) error {
				_, err := dbs[c.id].Restore(ctx, heads[c.id], target(c.id, i), &sbxdb.RestoreOptions{Policy: allFiles})
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: %w", c.label, err)
			}
			restore[c.id] = append(restore[c.id], time.Since(t).Seconds())
		}
		if srv != nil {
			db := cold[i]
			before, _ := db.BlobRequests()
			settle()
			t := time.Now()
			err := labeled(ctx, "restore", "s3cold", func(ctx context.Context) error {
				_, err := db.Restore(ctx, heads["s3"], target("s3cold", i), &sbxdb.RestoreOptions{Policy: allFiles})
				return err
			})
			if err != nil {
				return fmt.Errorf("the second handle: %w", err)
			}
			restore["s3cold"] = append(restore["s3cold"], time.Since(t).Seconds())
			after, _ := db.BlobRequests()
			n := after.Sub(before)
			coldCounts = append(coldCounts, n)
			coldReq = append(coldReq, float64(n.Total()))
		}
	}
	// Every configuration restored the edited tree: the timings are of
	// the same work.
	for _, id := range append(ids(configs), "s3cold") {
		if _, ok := restore[id]; !ok {
			continue
		}
		if err := sameTree(tree, target(id, 0)); err != nil {
			return fmt.Errorf("restore of %s: %w", id, err)
		}
	}

	rep.setSection(title)
	rate := func(s []float64) string { return fmt.Sprintf("%s MB/s", num(float64(st.Bytes)/1e6/median(s))) }
	rows := func(what, unit, prefix string, values map[string][]float64, note func([]float64) string, target bool) {
		for _, c := range configs {
			r := rep.add(prefix+"."+c.id, fmt.Sprintf("%s, %s", what, c.label), unit, values[c.id], note(values[c.id]))
			if c.id != "local" {
				x := rep.ratio(r, prefix+".local", "÷ local")
				if c.s3 && target {
					x.want("<=", 2)
				}
			}
		}
		if newDB == nil {
			rep.missing(prefix+".pg", what+", PostgreSQL + blob directory", unit, whyPG)
		}
		if srv == nil {
			rep.missing(prefix+".s3", what+", PostgreSQL + S3", unit, whyS3)
		}
	}
	rows("Open of a new store", "ms", "s3.open", open, func([]float64) string { return "a fresh database: creates its tables" }, false)
	rows("first capture (fresh store, Open timed apart)", "s", "s3.first", first, func(v []float64) string { return "fsync on; " + rate(v) }, true)
	if srv != nil {
		rep.add("s3.first.s3.requests", "  S3 requests of a first capture", "requests", firstReq, countsNote(firstCounts, firstReq))
		rep.add("s3.first.s3.per_file", "  S3 requests per captured file", "requests", div(firstReq, float64(st.Files)), "").want("<=", 0.05)
	}
	rows("capture after a 1 % edit (a new edit each run)", "ms", "s3.edit", edit, func([]float64) string { return "" }, true)
	if srv != nil {
		rep.add("s3.edit.s3.requests", "  S3 requests of a 1 % edit capture", "requests", editReq, countsNote(editCounts, editReq))
		per := make([]float64, len(editReq))
		for i := range editReq {
			per[i] = editReq[i] / max(editFiles[i], 1)
		}
		rep.add("s3.edit.s3.per_edited_file", "  S3 requests per edited file", "requests", per, fmt.Sprintf("%s edited files each run", num(median(editFiles))))
		rep.add("s3.edit.s3.per_file", "  S3 requests per captured file (the whole tree)", "requests", div(editReq, float64(st.Files)), "").want("<=", 0.05)
	}
	rows("restore of the edited tree into an empty directory", "s", "s3.restore", restore, func(v []float64) string { return rate(v) }, true)
	if srv != nil {
		r := rep.add("s3.restore.s3cold", "restore, PostgreSQL + S3, cold cache (a second handle on an empty directory)", "s", restore["s3cold"], rate(restore["s3cold"]))
		rep.ratio(r, "s3.restore.local", "÷ local").want("<=", 2)
		rep.add("s3.restore.s3cold.requests", "  S3 requests of a cold restore", "requests", coldReq, countsNote(coldCounts, coldReq))
		rep.add("s3.restore.s3cold.per_file", "  S3 requests per restored file", "requests", div(coldReq, float64(st.Files)), "")
	} else {
		rep.missing("s3.restore.s3cold", "restore, PostgreSQL + S3, cold cache", "s", whyS3)
	}
	return nil
}

// captureOnce captures the tree on thread "bench" with the capture
// section's policy.
func captureOnce(ctx context.Context, db *engine.DB, tree string) (err error) {
	w, err := db.AcquireWriter(ctx, "bench")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.Release(ctx)) }()
	_, err = db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: tree, Policy: allFiles})
	return err
}

// labeled runs fn with the profiler labels phase and config, so that a
// --cpuprofile of the section can be split by them (go tool pprof
// -tagfocus phase=edit,config=pg).
func labeled(ctx context.Context, phase, config string, fn func(context.Context) error) (err error) {
	pprof.Do(ctx, pprof.Labels("phase", phase, "config", config), func(ctx context.Context) { err = fn(ctx) })
	return err
}

// countsNote spells out, by S3 operation, the counts of the run whose
// total is the median.
func countsNote(counts []engine.BlobRequestCounts, totals []float64) string {
	if len(counts) == 0 {
		return ""
	}
	m, best := median(totals), 0
	for i, t := range totals {
		if abs(t-m) < abs(totals[best]-m) {
			best = i
		}
	}
	c := counts[best]
	return fmt.Sprintf("PUT %d, parts %d, multipart %d, GET %d, HEAD %d, LIST %d, DELETE %d, other %d",
		c.Puts, c.Parts, c.Multipart, c.Gets, c.Heads, c.Lists, c.Deletes, c.Other)
}

func abs(x float64) float64 { return max(x, -x) }

func div(v []float64, d float64) []float64 {
	out := make([]float64, len(v))
	for i := range v {
		out[i] = v[i] / d
	}
	return out
}

func ids(cs []s3Config) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.id)
	}
	return out
}
