package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// ThreadSummary says what List says of every thread's size and newest
// createdAt; an invalid thread id is refused as List refuses it.
func TestThreadSummary(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	grow := func(thread string, createdAt ...int64) {
		t.Helper()
		l, err := db.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		head, _ := db.Head(ctx, thread)
		for _, at := range createdAt {
			id := fmt.Sprintf("%s-%d", thread, at)
			for n := 0; ; n++ { // repeated times: ids differ
				if cp, _ := db.Get(ctx, id); cp == nil {
					break
				}
				id = fmt.Sprintf("%s-%d-%d", thread, at, n)
			}
			cp := &chain.Checkpoint{ID: id, ThreadID: thread, ParentID: head, CreatedAt: at, Reason: chain.ReasonAutomatic,
				Files: []chain.Entry{{Path: "d", Kind: chain.KindDir}}}
			if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
				t.Fatal(err)
			}
			head = id
		}
	}
	grow("a", 5, 3, 9, 1)    // createdAt out of append order
	grow("ab", 4, 4, 4)      // equal createdAt; "a" is its prefix
	grow("neg", -7, -2, -20) // negative createdAt
	grow("one", chain.MaxSafeInteger)
	fl, err := db.AcquireWriter(ctx, "fork")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Fork(ctx, chain.ForkInput{SourceThreadID: "a", SourceCheckpointID: "a-9", DestinationThreadID: "fork",
		DestinationCheckpointID: "f1", CreatedAt: 2, Writer: fl.Writer}); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveThread(ctx, "talk", []json.RawMessage{json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AcquireWriter(ctx, "leased"); err != nil {
		t.Fatal(err)
	}
	threads, err := db.Threads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, thread := range append(threads, "leased", "unknown") {
		list, err := db.List(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		var want sbxdb.ThreadSummary
		if want.Checkpoints = len(list); len(list) > 0 {
			want.LatestCreatedAt = &list[len(list)-1].CreatedAt
		}
		got, err := db.ThreadSummary(ctx, thread)
		if err != nil || got.Checkpoints != want.Checkpoints || (got.LatestCreatedAt == nil) != (want.LatestCreatedAt == nil) ||
			got.LatestCreatedAt != nil && *got.LatestCreatedAt != *want.LatestCreatedAt {
			t.Errorf("ThreadSummary(%q) = %s, %v; List says %s", thread, summaryText(got), err, summaryText(want))
		}
	}
	if got, _ := db.ThreadSummary(ctx, "ab"); got.Checkpoints != 3 || *got.LatestCreatedAt != 4 {
		t.Errorf("ab: %s", summaryText(got))
	}
	if got, _ := db.ThreadSummary(ctx, "a"); got.Checkpoints != 4 || *got.LatestCreatedAt != 9 {
		t.Errorf("a: %s", summaryText(got))
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		ctx    context.Context
		thread string
	}{
		{ctx, ""}, {ctx, "bad\x00id"}, {ctx, "\xff"}, {ctx, strings.Repeat("x", chain.MaxIDBytes+1)},
		{canceled, "a"}, {canceled, ""},
	} {
		_, want := db.List(c.ctx, c.thread)
		got, err := db.ThreadSummary(c.ctx, c.thread)
		if want == nil || err == nil || err.Error() != want.Error() || got != (sbxdb.ThreadSummary{}) {
			t.Errorf("ThreadSummary(%q) = %s, %v; List: %v", c.thread, summaryText(got), err, want)
		}
	}
}

// A damaged thread-index key is ErrCorrupt; a damaged checkpoint record is
// not read: the summary still counts it, where List fails.
func TestThreadSummaryDamage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	head := ""
	for i, id := range []string{"c1", "c2"} {
		cp := &chain.Checkpoint{ID: id, ThreadID: "t", ParentID: head, CreatedAt: int64(i + 1), Reason: chain.ReasonAutomatic}
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
		head = id
	}
	db.Close()

	// c1's record: its seal no longer matches.
	boltUpdate(t, dir, func(tx *bolt.Tx) error {
		b := tx.Bucket(meta.BucketCheckpoints)
		v := append([]byte(nil), b.Get([]byte("c1"))...)
		v[len(v)-1] ^= 0xff
		return b.Put([]byte("c1"), v)
	})
	db, err = engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.List(ctx, "t"); !errors.Is(err, chain.ErrCorrupt) {
		t.Fatalf("List with a damaged record: %v", err)
	}
	if got, err := db.ThreadSummary(ctx, "t"); err != nil || got.Checkpoints != 2 || got.LatestCreatedAt == nil || *got.LatestCreatedAt != 2 {
		t.Errorf("ThreadSummary with a damaged record = %s, %v", summaryText(got), err)
	}
	db.Close()

	// A sealed index key too short to hold a createdAt and an id.
	boltUpdate(t, dir, func(tx *bolt.Tx) error {
		k := []byte("t\x00\x80\x00\x00\x00\x00\x00\x00\x07")
		return tx.Bucket(meta.BucketThreadIndex).Put(k, meta.Seal(meta.BucketThreadIndex, k, nil))
	})
	db, err = engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, err := db.ThreadSummary(ctx, "t"); !errors.Is(err, chain.ErrCorrupt) || got != (sbxdb.ThreadSummary{}) {
		t.Errorf("ThreadSummary with a short index key = %s, %v", summaryText(got), err)
	}
}

func summaryText(s sbxdb.ThreadSummary) string {
	if s.LatestCreatedAt == nil {
		return fmt.Sprintf("{%d, nil}", s.Checkpoints)
	}
	return fmt.Sprintf("{%d, %d}", s.Checkpoints, *s.LatestCreatedAt)
}
