package engine_test

import (
	"fmt"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// After a restart of PostgreSQL, a write fails at most once and the next
// one works, without reopening.
func TestSharedRestart(t *testing.T) {
	ctx := t.Context()
	db, err := engine.Open(t.TempDir(), &engine.Options{Metadata: pgtest.URL(t), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	head := ""
	appendOne := func(i int) error {
		id := fmt.Sprintf("c%d", i)
		_, err := db.Append(ctx, chain.AppendInput{Writer: l.Writer, ExpectedHeadID: head,
			Checkpoint: &chain.Checkpoint{ID: id, ThreadID: "t", ParentID: head, CreatedAt: 1, Reason: chain.ReasonAutomatic}})
		if err == nil {
			head = id
		}
		return err
	}
	if err := appendOne(0); err != nil {
		t.Fatal(err)
	}
	pgtest.Restart(t)
	fails := 0
	for i := 1; i <= 3; i++ {
		if err := appendOne(i); err != nil {
			fails++
			t.Logf("append %d after the restart: %v", i, err)
		}
	}
	if _, err := db.Head(ctx, "t"); err != nil {
		t.Errorf("a read after the restart: %v", err)
	}
	if fails > 1 {
		t.Fatalf("%d writes failed after the restart, want at most 1", fails)
	}
}
