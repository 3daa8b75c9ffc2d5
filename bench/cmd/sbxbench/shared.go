package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxdb/sbxdb/bench/suite"
	"github.com/sbxdb/sbxdb/internal/testkit/pgserver"
)

// sharedBench measures durable appends with the metadata in PostgreSQL
// (engine.Options.Metadata) against bbolt, at 1, 8 and 64 writers each on
// its own thread, and through two engine handles on two directories
// sharing the database (two servers, the writers split between them), all
// in one rotation so that each ratio compares figures taken seconds apart.
// The two servers share a bucket too (versitygw on loopback), as the
// README's "Scaling out" runs them: servers sharing a database must keep
// their blobs in one place. The database is --pg's server, else a
// throw-away cluster of this process (internal/testkit/pgserver); with
// neither, or without an S3 server for two, the rows say why they are
// missing.
func sharedBench(rep *Report, cfg *config) error {
	suite.KeepDir = filepath.Join(cfg.work, "shared")
	if err := os.MkdirAll(suite.KeepDir, 0o755); err != nil {
		return err
	}
	be := cfg.backends()
	var one, two suite.Shared
	if be.newDB != nil {
		one.Metadata = func(tb testing.TB) string {
			u, err := be.newDB()
			if err != nil {
				tb.Fatal(err)
			}
			return u
		}
	}
	two = one
	why2 := be.whyS3
	if be.s3 != nil {
		useS3(be.s3, be.s3.Endpoint)
		two.Blobs = func(testing.TB) string { return newBucket() }
	}
	newURL, why := one.Metadata, be.whyPG

	counts := []int{1, 8, 64}
	var benches []bench
	for _, n := range counts {
		benches = append(benches, bench{fmt.Sprintf("bolt%d", n), func(b *testing.B) { suite.AppendConcurrent(b, n) }})
		if newURL == nil {
			continue
		}
		benches = append(benches, bench{fmt.Sprintf("pg%d", n), func(b *testing.B) { suite.AppendShared(b, one, n, 1) }})
		if n > 1 && two.Blobs != nil {
			benches = append(benches, bench{fmt.Sprintf("pg2x%d", n), func(b *testing.B) { suite.AppendShared(b, two, n, 2) }})
		}
	}
	results, err := rotated(cfg, "shared metadata", benches)
	if err != nil {
		return err
	}
	appends := func(id string) []float64 {
		var v []float64
		for _, r := range results[id] {
			v = append(v, r.Extra["appends/s"])
		}
		return v
	}

	rep.setSection(fmt.Sprintf("Shared metadata: durable appends with the metadata in PostgreSQL (fsync on) against bbolt (fsync on), %s per benchmark and run", cfg.benchtime))
	for _, n := range counts {
		bolt := rep.add(fmt.Sprintf("shared.append.bolt%d", n), fmt.Sprintf("bbolt, %d writer%s", n, plural(n)), "appends/s", appends(fmt.Sprintf("bolt%d", n)), "")
		name := fmt.Sprintf("PostgreSQL, one engine handle, %d writer%s", n, plural(n))
		if newURL == nil {
			rep.missing(fmt.Sprintf("shared.append.pg%d", n), name, "appends/s", why)
			if n > 1 {
				rep.missing(fmt.Sprintf("shared.append.pg2x%d", n), fmt.Sprintf("PostgreSQL, two servers, %d writers", n), "appends/s", why)
			}
			continue
		}
		pg := rep.add(fmt.Sprintf("shared.append.pg%d", n), name, "appends/s", appends(fmt.Sprintf("pg%d", n)), "")
		rep.ratio(pg, bolt.ID, "÷ bbolt")
		if n > 1 && two.Blobs == nil {
			rep.missing(fmt.Sprintf("shared.append.pg2x%d", n), fmt.Sprintf("PostgreSQL, two servers, %d writers", n), "appends/s", why2)
		} else if n > 1 {
			r2 := rep.add(fmt.Sprintf("shared.append.pg2x%d", n), fmt.Sprintf("PostgreSQL, two servers, %d writers split between them", n), "appends/s", appends(fmt.Sprintf("pg2x%d", n)),
				"two engine handles, two directories, one database, one bucket (as \"Scaling out\" runs servers)")
			rep.ratio(r2, pg.ID, "÷ one server")
			rep.ratio(r2, bolt.ID, "÷ bbolt")
		}
	}
	return nil
}

// metadataSource returns how to get the URL of a fresh database for one
// benchmark run: on --pg's server, or on a throw-away cluster started
// here. With neither, newDB is nil and why says what failed. cleanup drops
// the databases made on --pg's server, or stops and removes the cluster.
func metadataSource(cfg *config) (newDB func() (string, error), why string, cleanup func()) {
	ctx, cancel := context.WithTimeout(context.Background(), pgserver.StartTimeout)
	defer cancel()
	var (
		mu    sync.Mutex
		seq   int
		made  []string
		admin string // the URL that creates and drops the databases
	)
	name := func() string {
		mu.Lock()
		defer mu.Unlock()
		seq++
		return fmt.Sprintf("sbxbench_%d_%d", os.Getpid(), seq)
	}
	if cfg.pg != "" {
		u, err := url.Parse(cfg.pg)
		if err != nil {
			return nil, fmt.Sprintf("not available: --pg: %v", err), func() {}
		}
		admin = cfg.pg
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return nil, fmt.Sprintf("not available: --pg %s: %v", u.Redacted(), err), func() {}
		}
		conn.Close(ctx)
		create := func() (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			conn, err := pgx.Connect(ctx, admin)
			if err != nil {
				return "", err
			}
			defer conn.Close(ctx)
			db := name()
			if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
				return "", err
			}
			mu.Lock()
			made = append(made, db)
			mu.Unlock()
			v := *u
			v.Path = "/" + db
			return v.String(), nil
		}
		return create, "", func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			conn, err := pgx.Connect(ctx, admin)
			if err != nil {
				progress("dropping the benchmark databases on --pg's server: %v", err)
				return
			}
			defer conn.Close(ctx)
			for _, db := range made {
				if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
					progress("dropping %s: %v", db, err)
				}
			}
		}
	}
	c, err := pgserver.New()
	if err != nil {
		return nil, fmt.Sprintf("not available: no --pg and no throw-away cluster: %v", err), func() {}
	}
	if err := c.Start(); err != nil {
		c.Remove()
		return nil, fmt.Sprintf("not available: no --pg and the throw-away cluster did not start: %v", err), func() {}
	}
	progress("started a throw-away PostgreSQL cluster at %s", c.URL(""))
	create := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return c.CreateDatabase(ctx, name())
	}
	return create, "", c.Remove
}
