package lifecycle_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lifecycle"
)

// TestDeleteIdleThreads: threads whose newest checkpoint is older than the
// age are deleted, except one a writer holds; newer threads and a thread
// with a transcript but no checkpoint stay.
func TestDeleteIdleThreads(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(10 * 24 * 3600 * 1000)
	db, err := engine.Open(t.TempDir(), &engine.Options{Now: func() time.Time { return now }, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	appendAt := func(thread string, age time.Duration) {
		t.Helper()
		l, err := db.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		head, _ := db.Head(ctx, thread)
		cp := &chain.Checkpoint{ID: thread + "-cp", ThreadID: thread, ParentID: head, CreatedAt: now.Add(-age).UnixMilli(), Reason: chain.ReasonAutomatic}
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
	}
	appendAt("old", 48*time.Hour)
	appendAt("older", 72*time.Hour)
	appendAt("fresh", time.Hour)
	appendAt("held", 96*time.Hour)
	if _, err := db.AcquireWriter(ctx, "held"); err != nil { // a run is going on
		t.Fatal(err)
	}
	if err := db.SaveThread(ctx, "chat-only", nil); err != nil {
		t.Fatal(err)
	}

	res, err := lifecycle.DeleteIdleThreads(ctx, db, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, d := range res.Deleted {
		deleted = append(deleted, d.Checkpoints...)
	}
	slices.Sort(deleted)
	if want := []string{"old-cp", "older-cp"}; !slices.Equal(deleted, want) || !slices.Equal(res.Busy, []string{"held"}) {
		t.Errorf("deleted %v, busy %v; want %v and [held]", deleted, res.Busy, want)
	}
	threads, _ := db.Threads(ctx)
	if want := []string{"chat-only", "fresh", "held"}; !slices.Equal(threads, want) {
		t.Errorf("threads left %v, want %v", threads, want)
	}
	if _, err := lifecycle.DeleteIdleThreads(ctx, db, 0, now); err == nil {
		t.Error("a zero age was accepted")
	}
}
