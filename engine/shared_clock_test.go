package engine_test

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// Two servers on one database, one whose own clock is 10 minutes fast and
// one 10 minutes slow (Options.ServerClock), decide leases, sweeps and
// retention as with synced clocks: the store's clock is the database's
// (engine/clock.go). A third handle whose store clock (Options.Now) is 10
// minutes fast, which the caller's clock rules, gets them wrong: the
// control that shows the skews would matter.
func TestSharedSkewedServerClocks(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	var blobsID []byte
	open := func(opts engine.Options) *engine.DB {
		dir := t.TempDir()
		if blobsID != nil { // one blob directory's id: servers sharing its blobs
			os.WriteFile(filepath.Join(dir, "blobs-id"), blobsID, 0o644)
		}
		opts.Metadata, opts.NoSync = url, true
		db, err := engine.Open(dir, &opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if blobsID == nil {
			blobsID, _ = os.ReadFile(filepath.Join(dir, "blobs-id"))
		}
		return db
	}
	fast := func() time.Time { return time.Now().Add(10 * time.Minute) }
	slow := func() time.Time { return time.Now().Add(-10 * time.Minute) }
	a := open(engine.Options{ServerClock: fast})
	b := open(engine.Options{ServerClock: slow})
	c := open(engine.Options{Now: fast}) // the caller's clock rules

	// A lease the slow server takes lives its full duration from the
	// database's now, for the fast one too.
	before := time.Now()
	l, err := b.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	want := before.Add(sbxdb.DefaultLeaseDuration)
	if got := l.ExpiresAt(); got.Before(want.Add(-time.Second)) || got.After(want.Add(5*time.Second)) {
		t.Fatalf("the slow server's lease expires at %v, want about %v", got, want)
	}
	if _, err := a.AcquireWriter(ctx, "t"); !errors.Is(err, chain.ErrWriterConflict) {
		t.Fatalf("the fast server acquiring the slow one's live lease: %v, want ErrWriterConflict", err)
	}
	// And the other way round.
	la, err := a.AcquireWriter(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireWriter(ctx, "u"); !errors.Is(err, chain.ErrWriterConflict) {
		t.Fatalf("the slow server acquiring the fast one's live lease: %v, want ErrWriterConflict", err)
	}
	if _, err := b.Append(ctx, chain.AppendInput{Writer: l.Writer,
		Checkpoint: &chain.Checkpoint{ID: "t1", ThreadID: "t", CreatedAt: 1, Reason: chain.ReasonAutomatic}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, chain.AppendInput{Writer: la.Writer,
		Checkpoint: &chain.Checkpoint{ID: "u1", ThreadID: "u", CreatedAt: 1, Reason: chain.ReasonAutomatic}}); err != nil {
		t.Fatal(err)
	}

	// Retention on the fast server leaves the thread the slow one holds.
	res, err := a.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 1, Threads: []string{"t"}, OlderThan: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Retention.Busy, "t") {
		t.Fatalf("retention on the fast server: busy %v, want t (the slow server holds its lease)", res.Retention.Busy)
	}

	// A blob the slow server uploads now is within the fast one's
	// 5-minute window.
	data := []byte("uploaded by the slow server")
	key := cas.Files.Key(sha256.Sum256(data))
	if err := b.Blobs().Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	sw, err := a.Sweep(ctx, sbxdb.SweepOptions{OlderThan: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(sw.Deleted, key) {
		t.Fatalf("the fast server's sweep deleted a blob the slow one uploaded within its window")
	}
	if _, err := b.Blobs().Head(ctx, key); err != nil {
		t.Fatalf("the blob after the fast server's sweep: %v", err)
	}

	// The control: a store clock 10 minutes fast takes the slow server's
	// live lease, and sweeps its fresh blob.
	if _, err := c.AcquireWriter(ctx, "t"); err != nil {
		t.Fatalf("control: a store clock 10 minutes fast acquiring a lease of 2 minutes: %v, want it taken", err)
	}
	sw, err = c.Sweep(ctx, sbxdb.SweepOptions{OlderThan: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sw.Deleted, key) {
		t.Fatalf("control: a store clock 10 minutes fast swept %v, want the fresh blob", sw.Deleted)
	}
}
