package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func query(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFreshDatabasesAndRestart checks that each URL is a database of its
// own and that committed rows survive a fast restart and a crash.
func TestFreshDatabasesAndRestart(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.URL(t), pgtest.URL(t)
	if a == b {
		t.Fatalf("two calls gave the same database %s", a)
	}
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t(x int); INSERT INTO t VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	conn, err = pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT * FROM t"); err == nil {
		t.Fatal("second database sees the first's table")
	}
	conn.Close(ctx)

	pgtest.Restart(t)
	if n := query(t, a); n != 2 {
		t.Fatalf("after restart: %d rows, want 2", n)
	}
	pgtest.Kill(t)
	pgtest.Start(t)
	if n := query(t, a); n != 2 {
		t.Fatalf("after kill and start: %d rows, want 2", n)
	}
}
