package engine_test

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// planFixture is a thread th of three checkpoints, each with its own
// version of a.txt and the same b.txt, two days old: with keep 1, a plan
// deletes the first two and the two versions of a.txt only they use.
type planFixture struct {
	*gcFixture
	ws   string
	cps  []*chain.Checkpoint
	opts sbxdb.GCOptions
}

func newPlanFixture(t *testing.T) *planFixture {
	t.Helper()
	f := &planFixture{gcFixture: newGCFixture(t), opts: sbxdb.GCOptions{Retain: true, Keep: 1, OlderThan: 24 * time.Hour}}
	f.ws = filepath.Join(f.dir, "ws")
	write(t, f.ws, "b.txt", []byte("the same in every version"), 0o644)
	for _, v := range []string{"one", "two", "three"} {
		write(t, f.ws, "a.txt", []byte("version "+v), 0o644)
		age(t, f.ws)
		f.cps = append(f.cps, f.capture(t, "th", f.ws))
	}
	f.advance(48 * time.Hour)
	return f
}

// onlyA returns the key of a.txt in cp.
func onlyA(t *testing.T, cp *chain.Checkpoint) string {
	t.Helper()
	for _, e := range cp.Files {
		if e.Path == "a.txt" {
			return e.BlobKey
		}
	}
	t.Fatalf("checkpoint %s has no a.txt", cp.ID)
	return ""
}

func (f *planFixture) plan(t *testing.T) *engine.GCPlan {
	t.Helper()
	p, err := f.db.PlanGC(context.Background(), f.opts)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := []string{f.cps[0].ID, f.cps[1].ID}
	if got := slices.Sorted(slices.Values(p.Retention.Deleted["th"])); len(p.Retention.Deleted) != 1 || !slices.Equal(got, slices.Sorted(slices.Values(wantIDs))) {
		t.Fatalf("plan retention: %v; want th: %v", p.Retention.Deleted, wantIDs)
	}
	wantKeys := slices.Sorted(slices.Values([]string{onlyA(t, f.cps[0]), onlyA(t, f.cps[1])}))
	if !slices.Equal(p.Sweep.Deleted, wantKeys) || p.Sweep.Bytes <= 0 {
		t.Fatalf("plan sweep: %+v; want %v", p.Sweep, wantKeys)
	}
	if list, _ := f.db.List(context.Background(), "th"); len(list) != 3 {
		t.Fatalf("planning changed the thread: %d checkpoints", len(list))
	}
	return p
}

// TestGCPlanExecuted: a plan executed with nothing changed deletes exactly
// what it says and rewrites the packs it says; the store is sound after.
func TestGCPlanExecuted(t *testing.T) {
	f := newPlanFixture(t)
	p := f.plan(t)
	if p.Freed < p.Sweep.Bytes || p.Repack.Packs == 0 || p.After != p.Before {
		t.Errorf("plan: freed %d, repack %+v, before %+v, after %+v", p.Freed, p.Repack, p.Before, p.After)
	}
	res, err := f.db.ExecuteGC(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Retention, p.Retention) || !reflect.DeepEqual(res.Sweep, p.Sweep) {
		t.Errorf("executed %+v, %+v; the plan said %+v, %+v", res.Retention, res.Sweep, p.Retention, p.Sweep)
	}
	if res.Repack.Packs != p.Repack.Packs || res.Repack.Before != p.Repack.Before || res.Repack.Recompressed != p.Repack.Recompressed {
		t.Errorf("repacked %+v; the plan said %+v", res.Repack, p.Repack)
	}
	// The executed plan left no dead byte, as it predicted by freeing
	// every dead byte of the packs it rewrote.
	if res.After.DeadBytes != 0 {
		t.Errorf("after: %+v", res.After)
	}
	f.checkClean(t)
}

// TestGCPlanStale: a plan executed after the store changed is safe. A blob
// a new checkpoint references is kept; a thread whose lease was taken is
// skipped with everything its checkpoints reference; a checkpoint a new
// capture pushed out of the newest Keep is not deleted, since the plan did
// not name it.
func TestGCPlanStale(t *testing.T) {
	ctx := context.Background()
	t.Run("referenced since", func(t *testing.T) {
		f := newPlanFixture(t)
		p := f.plan(t)
		// Another thread captures version one of a.txt again.
		ws2 := filepath.Join(f.dir, "ws2")
		write(t, ws2, "a.txt", []byte("version one"), 0o644)
		other := f.capture(t, "other", ws2)
		kept := onlyA(t, f.cps[0])
		if onlyA(t, other) != kept {
			t.Fatal("the same bytes have another key")
		}
		res, err := f.db.ExecuteGC(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{onlyA(t, f.cps[1])}; !slices.Equal(res.Sweep.Deleted, want) {
			t.Errorf("swept %v; want %v (the plan's keys but %s)", res.Sweep.Deleted, want, kept)
		}
		if !reflect.DeepEqual(res.Retention, p.Retention) {
			t.Errorf("retention %+v; the plan said %+v", res.Retention, p.Retention)
		}
		f.checkClean(t)
	})
	t.Run("lease taken", func(t *testing.T) {
		f := newPlanFixture(t)
		p := f.plan(t)
		w, err := f.db.AcquireWriter(ctx, "th")
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.db.ExecuteGC(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Retention.Deleted) != 0 || !slices.Equal(res.Retention.Busy, []string{"th"}) {
			t.Errorf("retention %+v; want th skipped as busy", res.Retention)
		}
		if len(res.Sweep.Deleted) != 0 {
			t.Errorf("swept %v, which the skipped checkpoints reference", res.Sweep.Deleted)
		}
		if list, _ := f.db.List(ctx, "th"); len(list) != 3 {
			t.Errorf("%d checkpoints left; want 3", len(list))
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		f.checkClean(t)
	})
	t.Run("captured since", func(t *testing.T) {
		f := newPlanFixture(t)
		p := f.plan(t)
		write(t, f.ws, "a.txt", []byte("version four"), 0o644)
		newest := f.capture(t, "th", f.ws)
		res, err := f.db.ExecuteGC(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res.Retention, p.Retention) || !reflect.DeepEqual(res.Sweep, p.Sweep) {
			t.Errorf("executed %+v, %+v; the plan said %+v, %+v", res.Retention, res.Sweep, p.Retention, p.Sweep)
		}
		list, err := f.db.List(ctx, "th")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, cp := range list {
			ids = append(ids, cp.ID)
		}
		if want := []string{f.cps[2].ID, newest.ID}; !slices.Equal(slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(want))) {
			t.Errorf("left %v; want %v (the plan named neither)", ids, want)
		}
		f.checkClean(t)
	})
}

// TestGCPlanOfAnotherStore: a plan is executed only by the store it was
// made on.
func TestGCPlanOfAnotherStore(t *testing.T) {
	f := newPlanFixture(t)
	p := f.plan(t)
	other := newGCFixture(t)
	if _, err := other.db.ExecuteGC(context.Background(), p); err == nil {
		t.Fatal("another store executed the plan")
	}
	if _, err := f.db.ExecuteGC(context.Background(), nil); err == nil {
		t.Fatal("ExecuteGC(nil) succeeded")
	}
}
