package cas

import (
	"context"
	"slices"
	"testing"
)

// TestPlanRepack: a plan made before a sweep counts the bytes the sweep
// leaves dead in their packs; once the sweep has run, Repack rewrites what
// the plan said, and the plan's Freed is the dead bytes it gives back.
func TestPlanRepack(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	a := f.fill(t, 100, 1) // one pack, half of it to die
	f.fill(t, 100, 1000)   // another, untouched
	dying := slices.Sorted(func(yield func(string) bool) {
		for k := range a {
			if !yield(k) {
				return
			}
		}
	})[:50]
	opts := RepackOptions{Threshold: DefaultRepackThreshold}
	if p, err := f.s.PlanRepack(ctx, opts, nil); err != nil || p.Stats.Packs != 0 || p.Freed != 0 {
		t.Fatalf("PlanRepack without a sweep = %+v, %v; want nothing to rewrite", p, err)
	}
	p, err := f.s.PlanRepack(ctx, opts, append(dying, "sandbox-files/not-a-key"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Stats.Packs != 1 || p.Stats.Recompressed != 0 || p.Freed <= 0 {
		t.Fatalf("PlanRepack = %+v; want one pack rewritten", p)
	}
	if got, err := f.s.DeleteUnused(ctx, dying, nil); err != nil || len(got) != len(dying) {
		t.Fatalf("DeleteUnused: %d, %v", len(got), err)
	}
	u, err := f.s.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Freed != u.DeadBytes {
		t.Errorf("plan frees %d bytes; the sweep left %d dead", p.Freed, u.DeadBytes)
	}
	st, err := f.s.Repack(ctx, p.Options)
	if err != nil {
		t.Fatal(err)
	}
	if st.Packs != p.Stats.Packs || st.Before != p.Stats.Before {
		t.Errorf("Repack = %+v; the plan said %+v", st, p.Stats)
	}
}
