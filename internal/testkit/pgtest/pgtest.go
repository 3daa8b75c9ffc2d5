// Package pgtest runs a throw-away PostgreSQL cluster for the tests of one
// package: started on first use, on 127.0.0.1 and a free port, in a fresh
// temporary directory, and stopped and removed when the test binary ends.
//
// A package's TestMain calls Main; each test asks URL for a connection
// string to a database of its own. Stop, Start, Kill and Restart control the
// server for tests of what clients do when it goes away; the server is the
// package's, so tests that use them must not run in parallel with others.
//
// The cluster is internal/testkit/pgserver's: PostgreSQL's binaries in
// $SBXDB_PG_BIN, else /usr/lib/postgresql/15/bin, run as the user postgres
// when the tests run as root, with fsync on, so that what a test sees
// after a kill is what a crash leaves.
//
// When the binaries (or, as root, the postgres user) are missing, URL skips
// the test saying why, unless the environment variable CI is set, when it
// fails it instead.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/sbxdb/sbxdb/internal/testkit/pgserver"
)

// DefaultBin is where the PostgreSQL binaries are looked for when
// SBXDB_PG_BIN is empty.
const DefaultBin = pgserver.DefaultBin

var (
	mu      sync.Mutex
	inMain  bool
	cl      *pgserver.Cluster
	skipWhy string // why the cluster cannot run here; set once
	dbSeq   int
)

// Main runs the tests of m and then stops and removes the cluster, if one
// was started. Call it from TestMain.
func Main(m *testing.M) {
	mu.Lock()
	inMain = true
	mu.Unlock()
	code := m.Run()
	mu.Lock()
	if cl != nil {
		cl.Remove()
		cl = nil
	}
	mu.Unlock()
	os.Exit(code)
}

// URL returns a connection string to a new, empty database on the cluster,
// starting the cluster when it is not running.
func URL(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	c := get(t)
	if err := c.Start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dbSeq++
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq)
	ctx, cancel := context.WithTimeout(context.Background(), pgserver.StartTimeout)
	defer cancel()
	url, err := c.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return url
}

// Stop shuts the server down (fast shutdown: sessions are ended, work is
// checkpointed); Start starts it again on the same port and directory.
func Stop(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	get(t).Stop()
}

// Kill stops the server the way a crash does (immediate shutdown: no
// checkpoint; the next Start recovers from the write-ahead log).
func Kill(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	get(t).Kill()
}

// Start starts a stopped server and waits until it accepts connections.
func Start(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if err := get(t).Start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Restart stops the server (fast shutdown) and starts it again.
func Restart(t testing.TB) {
	t.Helper()
	Stop(t)
	Start(t)
}

// get returns the cluster, initialising it on first use; it skips or fails
// t when the cluster cannot run here. mu is held.
func get(t testing.TB) *pgserver.Cluster {
	t.Helper()
	if !inMain {
		t.Fatal("pgtest: the package's TestMain must call pgtest.Main")
	}
	if skipWhy != "" {
		unavailable(t, skipWhy)
	}
	if cl != nil {
		return cl
	}
	c, err := pgserver.New()
	if errors.Is(err, pgserver.ErrUnavailable) {
		skipWhy = err.Error()
		unavailable(t, skipWhy)
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cl = c
	return c
}

// unavailable skips t, or fails it when CI is set.
func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("pgtest: %s (and CI is set)", why)
	}
	t.Skipf("pgtest: %s", why)
}
