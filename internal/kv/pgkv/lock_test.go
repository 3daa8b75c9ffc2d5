package pgkv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// Lock has one holder at a time across processes (two pools stand for two
// servers): a second Lock waits until the first is released, and a holder
// whose session dies releases it. Different names and schemas are
// different locks.
func TestLock(t *testing.T) {
	url := pgtest.URL(t)
	a, b := open(t, url, Options{}), open(t, url, Options{})
	other := open(t, url, Options{Schema: "other"})
	ctx := t.Context()

	release, err := a.Lock(ctx, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = b.Lock(short, "sweep")
	cancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second Lock while held: %v, want the context's deadline", err)
	}
	for _, free := range []func() (func(), error){
		func() (func(), error) { return b.Lock(ctx, "another name") },
		func() (func(), error) { return other.Lock(ctx, "sweep") },
	} {
		r, err := free()
		if err != nil {
			t.Fatalf("a different lock: %v", err)
		}
		r()
	}
	got := make(chan func(), 1)
	go func() {
		r, err := b.Lock(ctx, "sweep")
		if err != nil {
			t.Error(err)
			r = func() {}
		}
		got <- r
	}()
	waitForLockWaiter(t, url)
	release()
	release() // harmless
	rb := <-got

	// The holder's session dies: the lock is free.
	var pid uint32
	if err := b.pool.QueryRow(ctx, "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	terminate(t, url, pid)
	short, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ra, err := a.Lock(short, "sweep")
	if err != nil {
		t.Fatalf("Lock after the holder's session died: %v", err)
	}
	ra()
	rb() // its connection is gone: destroyed, not pooled
}

// Open gives connections session timeouts unless the connection string
// sets its own: a transaction left idle (its server paused while holding
// row locks) ends after a minute.
func TestSessionDefaults(t *testing.T) {
	url := pgtest.URL(t)
	show := func(db *DB) string {
		var v string
		if err := db.pool.QueryRow(t.Context(), "SHOW idle_in_transaction_session_timeout").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := show(open(t, url, Options{})); got != "1min" {
		t.Errorf("idle_in_transaction_session_timeout = %q by default, want 1min", got)
	}
	if got := show(open(t, url+"&idle_in_transaction_session_timeout=5000", Options{})); got != "5s" {
		t.Errorf("idle_in_transaction_session_timeout = %q when the URL sets 5000, want 5s", got)
	}
}
