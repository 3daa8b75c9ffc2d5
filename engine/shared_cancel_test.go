package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// On shared metadata a call's ctx ends its database work: a read or a
// lone write waiting for a lock in the database returns ctx's error when
// ctx ends, and a write queued behind it in the group commit is withdrawn,
// never to run.
func TestSharedCancelWaits(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	db, err := engine.Open(t.TempDir(), &engine.Options{Metadata: url, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Another session locks the table every transaction reads.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	lock, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "LOCK TABLE sbxdb.kv IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// waiting waits until n sessions wait for the lock.
	waiting := func(n int) {
		t.Helper()
		for {
			var got int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got >= n {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	call := func(ctx context.Context, fn func(context.Context) error) chan error {
		done := make(chan error, 1)
		go func() { done <- fn(ctx) }()
		return done
	}

	readCtx, cancelRead := context.WithCancel(ctx)
	read := call(readCtx, func(ctx context.Context) error { _, err := db.Head(ctx, "t"); return err })
	waiting(1)
	cancelRead()
	if err := <-read; !errors.Is(err, context.Canceled) {
		t.Fatalf("a read waiting in the database, cancelled: %v, want context.Canceled", err)
	}

	writeCtx, cancelWrite := context.WithCancel(ctx)
	write := call(writeCtx, func(ctx context.Context) error { _, err := db.AcquireWriter(ctx, "t"); return err })
	waiting(1)
	// Queued behind it: the committer runs one transaction at a time.
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	queued := call(queuedCtx, func(ctx context.Context) error { _, err := db.AcquireWriter(ctx, "u"); return err })
	cancelQueued()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("a queued write, cancelled: %v, want context.Canceled", err)
	}
	cancelWrite()
	if err := <-write; !errors.Is(err, context.Canceled) && !errors.Is(err, engine.ErrCommitUnknown) {
		t.Fatalf("a write waiting in the database, cancelled: %v, want context.Canceled", err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Neither cancelled write took its lease.
	for _, thread := range []string{"t", "u"} {
		l, err := db.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatalf("acquiring %s after its cancelled acquire: %v", thread, err)
		}
		l.Release(ctx)
	}
}
