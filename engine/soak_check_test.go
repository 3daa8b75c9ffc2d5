package engine_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
)

// ---- the end ----

func (s *soak) verify() {
	t := s.t
	ctx := context.Background()
	s.mu.Lock()
	names := slices.Sorted(maps.Keys(s.threads))
	s.mu.Unlock()

	// 1. Each thread's state is what its tenures, chained by fence, say.
	type snap struct {
		head string
		list []*chain.Checkpoint
	}
	before := map[string]snap{}
	present := map[string]bool{}
	gcRan := s.gcStarts.Load() > 0
	for _, name := range names {
		th := s.thread(name)
		head, err := s.db.Head(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		list, err := s.db.List(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = snap{head, list}
		for _, cp := range list {
			present[cp.ID] = true
			s.checkSeen("final List("+name+")", cp, soakAcked)
		}
		actual := soakChainOf(list, head)
		slices.SortFunc(th.tenures, func(a, b *soakTenure) int { return cmp.Compare(a.fence, b.fence) })
		prev, prevFence := newSoakChain(), uint64(0)
		follows := func(st soakChain) bool {
			if st.equal(prev) {
				return true
			}
			retained, _ := prev.retain(soakGCKeep)
			return gcRan && st.equal(retained)
		}
		for i, tn := range th.tenures {
			if i > 0 && th.tenures[i-1].fence == tn.fence {
				t.Errorf("thread %s: fence %d was handed out twice", name, tn.fence)
			}
			if !tn.valid {
				if tn.writes > 0 {
					t.Errorf("fencing: thread %s fence %d wrote %d times, but its lease was dead from the start", name, tn.fence, tn.writes)
				}
				continue
			}
			if !follows(tn.start) {
				t.Errorf("lost update: thread %s fence %d (worker %d) began with\n\t%v\nbut fence %d ended with\n\t%v", name, tn.fence, tn.worker, tn.start, prevFence, prev)
			}
			prev, prevFence = tn.end, tn.fence
		}
		if !follows(actual) {
			t.Errorf("lost update: thread %s ends with\n\t%v\nbut its last writer (fence %d) left\n\t%v", name, actual, prevFence, prev)
		}
	}
	// 2. What is stored is exactly what was acknowledged and not deleted.
	s.mu.Lock()
	for id, r := range s.cps {
		switch {
		case r.status == soakAcked && !present[id]:
			t.Errorf("lost update: %s (thread %s) was acknowledged, never deleted, and is gone", id, r.thread)
		case r.status != soakAcked && present[id]:
			t.Errorf("checkpoint %s (thread %s) is stored, but its status is %d (0 pending, 2 failed, 4 deleted)", id, r.thread, r.status)
		}
	}
	s.mu.Unlock()
	if stored, err := s.db.Threads(ctx); err != nil {
		t.Fatal(err)
	} else {
		for _, name := range stored {
			if _, ok := before[name]; !ok {
				t.Errorf("the store has thread %q, which nobody wrote", name)
			}
		}
	}
	if t.Failed() {
		return
	}

	// 3. Reopen: the same state, a clean check, references that match a
	// recount, and every head restores byte-exact, before and after a
	// final sweep.
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open(filepath.Join(s.dir, "store"), &s.opts)
	if err != nil {
		t.Fatal(err)
	}
	s.db = db
	recount := map[string]int64{}
	for _, name := range names {
		head, err := db.Head(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		list, err := db.List(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if head != before[name].head || !reflect.DeepEqual(list, before[name].list) {
			t.Errorf("thread %s changed across reopen: head %q → %q, %d → %d checkpoints", name, before[name].head, head, len(before[name].list), len(list))
		}
		for _, cp := range list {
			for _, k := range cp.BlobKeys() {
				recount[k]++
			}
		}
	}
	refs, err := db.BlobReferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range refs {
		got[r.Key] = r.References
	}
	if !maps.Equal(got, recount) {
		t.Errorf("blob references disagree with a recount of every checkpoint:\n%s", gocmp.Diff(recount, got))
	}
	for round := range 2 {
		if round == 1 {
			s.clock.Add(time.Second.Milliseconds())
			res, err := db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true})
			if err != nil {
				t.Fatalf("final sweep: %v", err)
			}
			t.Logf("final sweep deleted %d unreferenced blobs", len(res.Deleted))
		}
		rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
		if err != nil {
			t.Fatal(err)
		}
		// Retention leaves dangling parents (SPEC §10 Q4); nothing here
		// can leave a checkpoint off its thread's head chain.
		warnings := map[string]int{}
		for _, f := range rep.Findings {
			if f.Severity == sbxdb.SeverityError || f.Kind != sbxdb.FindingDanglingParent {
				t.Errorf("check: %s", f)
			} else {
				warnings[f.Kind]++
			}
		}
		heads := 0
		for _, name := range names {
			head := before[name].head
			if head == "" {
				continue
			}
			heads++
			r, _ := s.rec(head)
			out := filepath.Join(s.dir, "final", fmt.Sprint(round), name)
			if _, err := db.Restore(ctx, head, out, nil); err != nil {
				t.Errorf("Restore of thread %s head %s: %v", name, head, err)
				continue
			}
			if diff := fstree.Diff(r.tree, snapshot(t, out)); diff != nil {
				t.Errorf("thread %s head %s restored wrong:\n%s", name, head, strings.Join(diff, "\n"))
			}
		}
		if round == 0 {
			t.Logf("final check: %d threads, %d checkpoints, %d blob keys, %d blobs, warnings %v; %d heads restored",
				rep.Threads, rep.Checkpoints, rep.BlobKeys, rep.Blobs, warnings, heads)
		}
	}
}
