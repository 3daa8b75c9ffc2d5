package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// The committer folds pending references once the pending checkpoints
// number 64 per thread they belong to, or weigh Options.RefFoldAfter (1
// each plus 1 per 256 entries), whichever comes first.
func TestFoldPolicy(t *testing.T) {
	ctx := context.Background()
	type thread struct {
		lease chain.Writer
		head  string
		n     int
	}
	threads := map[string]*thread{}
	appendTo := func(t *testing.T, db *engine.DB, name string, entries int) {
		t.Helper()
		th := threads[name]
		if th == nil {
			l, err := db.AcquireWriter(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			th = &thread{lease: l.Writer}
			threads[name] = th
		}
		th.n++
		cp := &chain.Checkpoint{ID: fmt.Sprintf("%s-%d", name, th.n), ThreadID: name, ParentID: th.head, CreatedAt: int64(th.n), Reason: chain.ReasonAutomatic}
		for i := range entries {
			cp.Files = append(cp.Files, chain.Entry{Path: fmt.Sprintf("f%05d", i), Kind: chain.KindFile, BlobKey: testkit.FileKey(i + th.n), Size: 1})
		}
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: th.head, Writer: th.lease}); err != nil {
			t.Fatal(err)
		}
		th.head = cp.ID
	}
	pending := func(t *testing.T, db *engine.DB, want int) {
		t.Helper()
		if _, n, err := db.Pending(); n != want || err != nil {
			t.Fatalf("%d checkpoints pending (%v), want %d", n, err, want)
		}
	}

	t.Run("a lone writer folds every 64", func(t *testing.T) {
		clear(threads)
		db := open(t, t.TempDir())
		for range 63 {
			appendTo(t, db, "a", 10)
		}
		pending(t, db, 63)
		appendTo(t, db, "a", 10)
		pending(t, db, 0)
	})
	t.Run("two writers fold every 128", func(t *testing.T) {
		clear(threads)
		db := open(t, t.TempDir())
		for i := range 127 {
			appendTo(t, db, fmt.Sprint("w", i%2), 10)
		}
		pending(t, db, 127)
		appendTo(t, db, "w1", 10)
		pending(t, db, 0)
	})
	t.Run("large manifests fold by weight", func(t *testing.T) {
		clear(threads)
		db, err := engine.Open(t.TempDir(), &engine.Options{RefFoldAfter: 100})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for range 19 { // 1,100 entries weigh 5: 95 < 100
			appendTo(t, db, "big", 1100)
		}
		pending(t, db, 19)
		appendTo(t, db, "big", 1100)
		pending(t, db, 0)
	})
}
