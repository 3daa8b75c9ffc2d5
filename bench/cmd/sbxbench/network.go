package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/bench/suite"
	"github.com/sbxdb/sbxdb/bench/workload"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/kv/pgkv"
	"github.com/sbxdb/sbxdb/internal/testkit/netdelay"
	"github.com/sbxdb/sbxdb/lease"
)

// netPath is the way to the shared servers at one simulated distance:
// a proxy in front of PostgreSQL and one in front of the S3 server
// (internal/testkit/netdelay, on loopback), each delaying every chunk by
// delay in each direction. Its id is "d0" for no delay and "d1" for
// --net-delay: the rows' IDs stay stable whatever delay was asked.
type netPath struct {
	id     string
	delay  time.Duration
	pg, s3 *netdelay.Proxy
	be     *backends
}

func (p *netPath) label() string {
	if p.delay == 0 {
		return "PostgreSQL + S3, through the proxies, no delay"
	}
	return fmt.Sprintf("PostgreSQL + S3, %v each way", p.delay)
}

// metadata makes a new database and returns its URL through the proxy.
func (p *netPath) metadata() (string, error) {
	u, err := p.be.newDB()
	if err != nil {
		return "", err
	}
	return withHost(u, p.pg.Addr())
}

// open opens a handle on dir with o, its bucket reached through the
// proxy (engine.Open reads the endpoint from the environment).
func (p *netPath) open(dir string, o *engine.Options) (*engine.DB, error) {
	useS3(p.be.s3, "http://"+p.s3.Addr())
	return engine.Open(dir, o)
}

// trips is the round trips the path's proxies counted so far, and the
// statements pgx sent (every pgkv handle of the process: one operation
// runs at a time).
type trips struct {
	pg, s3 netdelay.Stats
	sql    pgkv.Counts
}

func (p *netPath) trips() trips { return trips{p.pg.Stats(), p.s3.Stats(), pgkv.ProcessCounts()} }

// networkBench measures sbxdb with its metadata in PostgreSQL and its
// blobs in S3 across a simulated network: every byte between the engine
// and each server passes a proxy on loopback that delays it by D each
// way, at D = 0 and D = --net-delay, in one run with the local store
// (bbolt + blob directory) as the baseline of every ratio:
//   - durable appends/s of 64 writers, each on its own thread, through 1,
//     2 and 4 engine handles (servers) sharing one database and bucket,
//     and this process's CPU time per append;
//   - first capture of the quick tree (bench/workload.Quick, whatever the
//     scale), capture after a 1 % edit, and a restore on a cold cache (a
//     new handle on an empty directory), each against the local store;
//   - PostgreSQL round trips per capture, as the proxy counts them (a
//     client chunk that follows a server chunk on its connection), and S3
//     round trips (HTTP requests).
//
// The proxies run at D = 0 too, so that the delay is the only difference
// between the two; the local store passes no proxy.
func networkBench(ctx context.Context, rep *Report, cfg *config) error {
	be := cfg.backends()
	title := fmt.Sprintf("Network: PostgreSQL + S3 behind a proxy delaying each direction by 0 and by %v (loopback), against the local store", cfg.netDelay)
	why := be.whyS3
	var paths []*netPath
	if be.s3 != nil {
		pgURL, err := be.newDB()
		if err != nil {
			return err
		}
		pgAddr, err := hostPort(pgURL)
		if err != nil {
			return err
		}
		s3Addr, err := hostPort(be.s3.Endpoint)
		if err != nil {
			return err
		}
		for i, d := range []time.Duration{0, cfg.netDelay} {
			p := &netPath{id: fmt.Sprintf("d%d", i), delay: d, be: be}
			if p.pg, err = netdelay.Listen(pgAddr, d); err != nil {
				return err
			}
			defer p.pg.Close()
			if p.s3, err = netdelay.Listen(s3Addr, d); err != nil {
				return err
			}
			defer p.s3.Close()
			paths = append(paths, p)
		}
		defer useS3(be.s3, be.s3.Endpoint)
	}

	// Appends: 64 writers through 1, 2 and 4 servers at each delay.
	const writers = 64
	servers := []int{1, 2, 4}
	suite.KeepDir = filepath.Join(cfg.work, "network-appends")
	if err := os.MkdirAll(suite.KeepDir, 0o755); err != nil {
		return err
	}
	var benches []bench
	for _, p := range paths {
		sh := suite.Shared{
			Metadata: func(tb testing.TB) string {
				u, err := p.metadata()
				if err != nil {
					tb.Fatal(err)
				}
				useS3(p.be.s3, "http://"+p.s3.Addr())
				return u
			},
			Blobs: func(testing.TB) string { return newBucket() },
		}
		for _, n := range servers {
			benches = append(benches, bench{fmt.Sprintf("%s.s%d", p.id, n), func(b *testing.B) { suite.AppendShared(b, sh, writers, n) }})
		}
	}
	results, err := rotated(cfg, "network section: appends", benches)
	if err != nil {
		return err
	}
	metric := func(id, name string) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, r.Extra[name])
		}
		return v
	}

	// Capture and restore: the quick tree, fresh databases and buckets
	// made before anything is timed.
	spec := workload.Quick()
	if cfg.smoke {
		spec = smokeSpec()
	}

	work := filepath.Join(cfg.work, "network")
	tree := filepath.Join(work, "tree")
	st, err := workload.Generate(tree, spec)
	if err != nil {
		return err
	}
	time.Sleep(2100 * time.Millisecond) // every file older than the stat cache's racy window
	runs := cfg.runs
	opts := map[string][]*engine.Options{}
	for _, p := range paths {
		for range runs {
			u, err := p.metadata()
			if err != nil {
				return err
			}
			opts[p.id] = append(opts[p.id], &engine.Options{Metadata: u, Blobs: newBucket()})
		}
	}
	store := func(id string, i int) string { return filepath.Join(work, fmt.Sprintf("%s-store%d", id, i)) }
	open := func(p *netPath, dir string, o *engine.Options) (*engine.DB, error) {
		if p == nil {
			return engine.Open(dir, nil)
		}
		return p.open(dir, o)
	}
	ids := []string{"local"}
	byID := map[string]*netPath{"local": nil}
	for _, p := range paths {
		ids = append(ids, p.id)
		byID[p.id] = p
	}
	optsOf := func(id string, i int) *engine.Options {
		if o := opts[id]; o != nil {
			return o[i]
		}
		return nil
	}
	// measure times fn and counts the round trips it caused on id's path.
	type tripsLog map[string][]trips
	measure := func(id, phase string, log tripsLog, fn func(context.Context) error) (time.Duration, error) {
		p := byID[id]
		var before trips
		if p != nil {
			before = p.trips()
		}
		t := time.Now()
		err := labeled(ctx, phase, "net-"+id, fn)
		d := time.Since(t)
		if p != nil && log != nil {
			after := p.trips()
			log[id] = append(log[id], trips{after.pg.Sub(before.pg), after.s3.Sub(before.s3),
				pgkv.Counts{Statements: after.sql.Statements - before.sql.Statements, RoundTrips: after.sql.RoundTrips - before.sql.RoundTrips}})
		}
		return d, err
	}

	first, firstTrips := map[string][]float64{}, tripsLog{}
	for i := range runs {
		for _, id := range ids {
			progress("network section: first capture, %s, run %d of %d", id, i+1, runs)
			settle()
			db, err := open(byID[id], store(id, i), optsOf(id, i))
			if err != nil {
				return fmt.Errorf("network %s: %w", id, err)
			}
			d, err := measure(id, "first", firstTrips, func(ctx context.Context) error { return captureOnce(ctx, db, tree) })
			if cerr := db.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("network %s: %w", id, err)
			}
			first[id] = append(first[id], d.Seconds())
		}
	}

	dbs, leases := map[string]*engine.DB{}, map[string]*lease.Lease{}
	defer func() {
		for _, db := range dbs {
			db.Close()
		}
	}()
	for _, id := range ids {
		db, err := open(byID[id], store(id, 0), optsOf(id, 0))
		if err != nil {
			return fmt.Errorf("network %s: %w", id, err)
		}
		dbs[id] = db
		if err := captureOnce(ctx, db, tree); err != nil {
			return fmt.Errorf("network %s: %w", id, err)
		}
		if leases[id], err = db.AcquireWriter(ctx, "bench"); err != nil {
			return fmt.Errorf("network %s: %w", id, err)
		}
	}
	edit, editTrips := map[string][]float64{}, tripsLog{}
	for i := range runs {
		progress("network section: 1 %% edit, run %d of %d", i+1, runs)
		if _, _, err := workload.Edit(tree, spec, 0.01, 2000+i); err != nil {
			return err
		}
		time.Sleep(2100 * time.Millisecond)
		for _, id := range ids {
			db := dbs[id]
			d, err := measure(id, "edit", editTrips, func(ctx context.Context) error {
				_, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: leases[id].Writer, Dir: tree, Policy: allFiles})
				return err
			})
			if err != nil {
				return fmt.Errorf("network %s: %w", id, err)
			}
			edit[id] = append(edit[id], d.Seconds()*1000)
		}
	}

	// Restore: the local store through its handle; each path through a
	// new handle on an empty directory (a cold cache: every blob fetched),
	// opened before the timing.
	heads := map[string]string{}
	for _, id := range ids {
		if heads[id], err = dbs[id].Head(ctx, "bench"); err != nil {
			return err
		}
	}
	cold := map[string][]*engine.DB{}
	defer func() {
		for _, c := range cold {
			for _, db := range c {
				db.Close()
			}
		}
	}()
	for _, p := range paths {
		for i := range runs {
			db, err := p.open(filepath.Join(work, fmt.Sprintf("%s-cold%d", p.id, i)), opts[p.id][0])
			if err != nil {
				return fmt.Errorf("network %s, a second handle: %w", p.id, err)
			}
			cold[p.id] = append(cold[p.id], db)
		}
	}
	restore, restoreTrips := map[string][]float64{}, tripsLog{}
	target := func(id string, i int) string { return filepath.Join(work, fmt.Sprintf("%s-restore%d", id, i)) }
	for i := range runs {
		progress("network section: restore, run %d of %d", i+1, runs)
		for _, id := range ids {
			db := dbs[id]
			if id != "local" {
				db = cold[id][i]
			}
			settle()
			d, err := measure(id, "restore", restoreTrips, func(ctx context.Context) error {
				_, err := db.Restore(ctx, heads[id], target(id, i), &sbxdb.RestoreOptions{Policy: allFiles})
				return err
			})
			if err != nil {
				return fmt.Errorf("network %s: %w", id, err)
			}
			restore[id] = append(restore[id], d.Seconds())
		}
	}
	for _, id := range ids { // every configuration restored the same tree
		if err := sameTree(tree, target(id, 0)); err != nil {
			return fmt.Errorf("network: restore of %s: %w", id, err)
		}
	}

	// The rows.
	rep.setSection(title)
	if len(paths) == 0 {
		for _, s := range []string{"append", "first", "edit", "restore"} {
			rep.missing("network."+s, "network section: "+s, "", why)
		}
		return nil
	}
	maxTrips := 10 + float64(st.Files)/1000
	for _, p := range paths {
		last := p == paths[len(paths)-1] && p.delay > 0 // the targets are for the delay
		var one *Row
		for _, n := range servers {
			id := fmt.Sprintf("network.append.%s.s%d", p.id, n)
			r := rep.add(id, fmt.Sprintf("%s: durable appends, %d writers through %d server%s", p.label(), writers, n, plural(n)), "appends/s",
				metric(fmt.Sprintf("%s.s%d", p.id, n), "appends/s"), "one database, one bucket; each writer its own thread")
			rep.add(id+".cpu", "  CPU time per append (this process)", "µs", metric(fmt.Sprintf("%s.s%d", p.id, n), "cpu-µs/append"), "not PostgreSQL's nor versitygw's")
			if p.delay > 0 {
				rep.ratio(r, fmt.Sprintf("network.append.d0.s%d", n), "÷ no delay")
			}
			switch n {
			case 1:
				one = r
				if last {
					r.want(">=", 2000)
				}
			case 2, 4:
				x := rep.ratio(r, one.ID, "÷ 1 server")
				if last {
					x.want(">=", map[int]float64{2: 1.6, 4: 2.5}[n])
				}
			}
		}
	}
	rate := func(s []float64) string { return fmt.Sprintf("%s MB/s", num(float64(st.Bytes)/1e6/median(s))) }
	rows := func(what, unit, prefix string, values map[string][]float64, tl tripsLog) {
		rep.add(prefix+".local", what+", bbolt + blob directory", unit, values["local"], "")
		for _, p := range paths {
			r := rep.add(prefix+"."+p.id, fmt.Sprintf("%s, %s", what, p.label()), unit, values[p.id], "")
			x := rep.ratio(r, prefix+".local", "÷ local")
			if p.delay > 0 {
				x.want("<=", 2)
			}
			var pg, s3, stmts []float64
			for _, t := range tl[p.id] {
				pg, s3 = append(pg, float64(t.pg.RoundTrips)), append(s3, float64(t.s3.RoundTrips))
				stmts = append(stmts, float64(t.sql.Statements))
			}
			tr := rep.add(prefix+"."+p.id+".pg_trips", "  PostgreSQL round trips (at the proxy)", "round trips", pg,
				fmt.Sprintf("%s per file", num(median(pg)/float64(st.Files))))
			rep.add(prefix+"."+p.id+".pg_statements", "  PostgreSQL statements (pgx tracer)", "statements", stmts,
				fmt.Sprintf("%s per file", num(median(stmts)/float64(st.Files))))
			if prefix != "network.restore" && p.delay > 0 {
				tr.want("<=", maxTrips)
			}
			rep.add(prefix+"."+p.id+".s3_trips", "  S3 round trips", "round trips", s3, "")
		}
	}
	rep.check("network section tree", fmt.Sprintf("%s files, %.1f MB; round-trip target 10 + files/1,000 = %s per capture", num(float64(st.Files)), float64(st.Bytes)/1e6, num(maxTrips)))
	rows("first capture (fresh store)", "s", "network.first", first, firstTrips)
	for _, id := range ids {
		if r := rep.byID["network.first."+id]; r != nil {
			r.Note = "fsync on; " + rate(first[id])
		}
	}
	rows("capture after a 1 % edit", "ms", "network.edit", edit, editTrips)
	rows("restore into an empty directory (cold cache: a new handle)", "s", "network.restore", restore, restoreTrips)
	if r := rep.byID["network.restore.local"]; r != nil {
		r.Name = "restore into an empty directory, bbolt + blob directory (the capturing handle)"
	}
	return nil
}
