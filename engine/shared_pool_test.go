package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// A sweep holds the sweep lock on a pooled connection for its whole run and
// then needs another for its transactions: with pool_max_conns=1 it waits
// forever, and its context cannot end the wait (the engine runs shared
// transactions with context.Background()).
func TestSharedSweepOneConnection(t *testing.T) {
	db, err := engine.Open(t.TempDir(), &engine.Options{Metadata: pgtest.URL(t) + "&pool_max_conns=1", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true})
		done <- err
	}()
	select {
	case err := <-done:
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sweep is still waiting 9s after its context ended (deadlocked on the pool)")
	}
}
