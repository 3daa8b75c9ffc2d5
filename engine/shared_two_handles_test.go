package engine_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// 64 writers append to one thread through two handles on one database:
// every acknowledged append is in the one chain, which has no fork.
func TestSharedTwoHandlesAppend(t *testing.T) {
	ctx := t.Context()
	url := pgtest.URL(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	a, err := engine.Open(dirA, &engine.Options{Metadata: url, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	id, _ := os.ReadFile(filepath.Join(dirA, "blobs-id"))
	os.WriteFile(filepath.Join(dirB, "blobs-id"), id, 0o644)
	b, err := engine.Open(dirB, &engine.Options{Metadata: url, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := a.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var acked sync.Map
	var n atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := []*engine.DB{a, b}[w%2]
			for i := range 5 {
				cpID := fmt.Sprintf("c%02d-%d", w, i)
				for {
					head, err := db.Head(ctx, "t")
					if err != nil {
						t.Error(err)
						return
					}
					_, err = db.Append(ctx, chain.AppendInput{Writer: l.Writer, ExpectedHeadID: head,
						Checkpoint: &chain.Checkpoint{ID: cpID, ThreadID: "t", ParentID: head, CreatedAt: 1, Reason: chain.ReasonAutomatic}})
					if err == nil {
						acked.Store(cpID, true)
						n.Add(1)
						break
					}
					if !errors.Is(err, chain.ErrStaleHead) && !errors.Is(err, chain.ErrParentMismatch) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	head, _ := a.Head(ctx, "t")
	seen := 0
	for head != "" {
		cp, err := b.Get(ctx, head)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := acked.Load(head); !ok {
			t.Errorf("%s in the chain was not acknowledged", head)
		}
		seen++
		head = cp.ParentID
	}
	if seen != int(n.Load()) || seen != 320 {
		t.Fatalf("chain of %d, %d acknowledged, want 320", seen, n.Load())
	}
}
