package engine_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// TestSharedWritesDoNotWait: two servers (handles) on one database. While
// server A's append to thread a is inside its write transaction (held at
// the append.publish hook, its checks done and its record written),
// server B's append to thread b commits: the hook itself runs B's append
// and requires it to return. Then A's append commits too. Under the
// former global write lock, B's append waited for A's transaction, which
// waited in the hook for B: this test would not return.
func TestSharedWritesDoNotWait(t *testing.T) {
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
	la, err := a.AcquireWriter(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.AcquireWriter(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	cp := func(id, thread string) *chain.Checkpoint {
		return &chain.Checkpoint{ID: id, ThreadID: thread, CreatedAt: 1, Reason: chain.ReasonAutomatic}
	}
	held := 0
	var bErr error
	defer a.OnPoint("append.publish", func() error {
		held++
		if held == 1 { // a's transaction may run again (a conflict): hold the first run only
			_, bErr = b.Append(ctx, chain.AppendInput{Writer: lb.Writer, Checkpoint: cp("b1", "b")})
		}
		return nil
	})()
	if _, err := a.Append(ctx, chain.AppendInput{Writer: la.Writer, Checkpoint: cp("a1", "a")}); err != nil {
		t.Fatal(err)
	}
	if held == 0 || bErr != nil {
		t.Fatalf("hook ran %d times; B's append while A's transaction was open: %v", held, bErr)
	}
	for thread, want := range map[string]string{"a": "a1", "b": "b1"} {
		for _, db := range []*engine.DB{a, b} {
			if head, err := db.Head(ctx, thread); err != nil || head != want {
				t.Fatalf("head of %s = %q, %v, want %s", thread, head, err, want)
			}
		}
	}
}
