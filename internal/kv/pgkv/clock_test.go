package pgkv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// TestNow checks that Now reads the database server's clock, which on the
// test cluster is this machine's, and that a cancelled ctx ends it.
func TestNow(t *testing.T) {
	db := open(t, pgtest.URL(t), Options{})
	before := time.Now()
	got, err := db.Now(context.Background())
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	// The cluster runs on this machine: its clock is ours, to the
	// microsecond Now rounds to.
	if got.Before(before.Add(-time.Millisecond)) || got.After(after.Add(time.Millisecond)) {
		t.Fatalf("Now = %v, not within [%v, %v]", got, before, after)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.Now(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Now with a cancelled ctx: %v, want context.Canceled", err)
	}
}
