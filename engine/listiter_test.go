package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// ListIter yields what List returns, one at a time; the loop may write to
// the store, and a checkpoint deleted before it is reached is skipped.
func TestListIter(t *testing.T) {
	ctx := context.Background()
	db, err := engine.Open(t.TempDir(), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	parent := ""
	for i := range 4 {
		cp := &chain.Checkpoint{ID: fmt.Sprint("i", i), ThreadID: "it", ParentID: parent, CreatedAt: int64(i), Reason: chain.ReasonAutomatic,
			Files:        []chain.Entry{{Path: fmt.Sprint("f", i), Kind: chain.KindDir}},
			Conversation: []json.RawMessage{json.RawMessage(fmt.Sprint(i))}}
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: parent, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
		parent = cp.ID
	}
	want, err := db.List(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	var got []*chain.Checkpoint
	for cp, err := range db.ListIter(ctx, "it") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, cp)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListIter differs from List:\n%s", diff)
	}
	n := 0
	for range db.ListIter(ctx, "it") {
		if n++; n == 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("a loop broken after 2 ran %d times", n)
	}
	// At the first checkpoint, the loop deletes the head: a write inside
	// the loop, and the head is not yielded.
	var ids []string
	for cp, err := range db.ListIter(ctx, "it") {
		if err != nil {
			t.Fatal(err)
		}
		if cp.ID == "i0" {
			if err := db.DeleteHead(ctx, "it", "i3", l.Writer); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, cp.ID)
	}
	if !cmp.Equal(ids, []string{"i0", "i1", "i2"}) {
		t.Errorf("with the head deleted during the loop, ListIter yielded %v", ids)
	}
	for _, err := range db.ListIter(ctx, "bad\x00id") {
		if !errors.Is(err, chain.ErrInvalidID) {
			t.Errorf("ListIter of an invalid thread id: %v", err)
		}
	}
}
