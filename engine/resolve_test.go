package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// chainOf appends ids to the thread as one chain from its current head,
// under a lease of its own.
func chainOf(t *testing.T, db *engine.DB, thread string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	l, err := db.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	head, err := db.Head(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := appendTo(ctx, db, l.Writer, id, head); err != nil {
			t.Fatalf("append %s to %s: %v", id, thread, err)
		}
		head = id
	}
}

// resolveFixture is a store whose ids and threads make every rule of
// ResolveCheckpoint choose.
func resolveFixture(t *testing.T) *engine.DB {
	t.Helper()
	ctx := context.Background()
	db := open(t, t.TempDir())
	chainOf(t, db, "main", "abcd1111", "abcd2222", "abce3333")
	chainOf(t, db, "x@y", "q1", "q2") // a thread holding "@"
	// Ids that are also a THREAD@ form, a prefix of others, and short.
	chainOf(t, db, "other", "main@", "abcd", "zz", "main@~1")
	chainOf(t, db, "dups", "dup-1", "dup-2", "dup-3", "dup-4", "dup-5", "dup-6", "dup-7")
	// Retention deletes ret's root: its chain ends at a deleted parent.
	chainOf(t, db, "ret", "r1", "r2", "r3")
	l, err := db.AcquireWriter(ctx, "ret")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.DeleteCheckpoints(ctx, "ret", 2, l.Writer); err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	// A thread whose every checkpoint was deleted has no head.
	chainOf(t, db, "gone", "g1")
	l, err = db.AcquireWriter(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteHead(ctx, "gone", "g1", l.Writer); err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	return db
}

func TestResolveCheckpoint(t *testing.T) {
	db := resolveFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		ref, want string
		err       error  // the sentinel, when it fails
		msg       string // in the message, when it fails
	}{
		// An exact id wins over everything else.
		{ref: "abcd1111", want: "abcd1111"},
		{ref: "abcd", want: "abcd"},       // over the prefix of abcd1111 and abcd2222
		{ref: "main@", want: "main@"},     // over the head of main
		{ref: "main@~1", want: "main@~1"}, // over main's first ancestor
		{ref: "zz", want: "zz"},           // shorter than a prefix may be
		{ref: "x@y@", want: "q2"},         // split at the last "@"
		{ref: "x@y@~1", want: "q1"},
		{ref: "main@~0", want: "abce3333"},
		{ref: "main@~2", want: "abcd1111"},
		{ref: "main@~02", want: "abcd1111"},
		{ref: "ret@~1", want: "r2"},
		// Unique prefixes.
		{ref: "abcd1", want: "abcd1111"},
		{ref: "abcd2", want: "abcd2222"},
		{ref: "abce", want: "abce3333"},
		{ref: "dup-7", want: "dup-7"},
		// Not found, each saying why.
		{ref: "abc", err: chain.ErrCheckpointNotFound, msg: "at least 4 bytes"},
		{ref: "zzzz9", err: chain.ErrCheckpointNotFound, msg: `no checkpoint id is or starts with "zzzz9"`},
		{ref: "main@~3", err: chain.ErrCheckpointNotFound, msg: `has 3 checkpoints (main@~0 to main@~2): "abcd1111" is its root`},
		{ref: "main@~18446744073709551616", err: chain.ErrCheckpointNotFound, msg: "has 3 checkpoints"},
		{ref: "x@y@~2", err: chain.ErrCheckpointNotFound, msg: "has 2 checkpoints"},
		{ref: "ret@~2", err: chain.ErrCheckpointNotFound, msg: `the parent of "r2", "r1", was deleted`},
		{ref: "gone@", err: chain.ErrCheckpointNotFound, msg: `thread "gone" has no head checkpoint`},
		{ref: "nobody@~1", err: chain.ErrCheckpointNotFound, msg: `thread "nobody" has no head checkpoint`},
		{ref: "main@~", want: "main@~1"}, // not a thread form: a prefix
		{ref: "main@~-1", err: chain.ErrCheckpointNotFound, msg: `starts with "main@~-1"`},
		{ref: "main@1", err: chain.ErrCheckpointNotFound, msg: `starts with "main@1"`},
		// Several ids.
		{ref: "dup-", err: sbxdb.ErrAmbiguousRef, msg: `"dup-" is a prefix of 7 checkpoint ids: "dup-1", "dup-2", "dup-3", "dup-4", "dup-5" and 2 more`},
		// Refs that name nothing by their form.
		{ref: "", err: chain.ErrInvalidID, msg: "is empty"},
		{ref: "ab\xffcd", err: chain.ErrInvalidID, msg: "not well-formed Unicode"},
		{ref: "abcd\x00", err: chain.ErrInvalidID, msg: "NUL"},
		{ref: strings.Repeat("a", chain.MaxIDBytes+23), err: chain.ErrInvalidID, msg: "bytes"},
	} {
		t.Run(fmt.Sprintf("%.40q", tc.ref), func(t *testing.T) {
			got, err := db.ResolveCheckpoint(ctx, tc.ref)
			if tc.err == nil {
				if err != nil || got != tc.want {
					t.Fatalf("ResolveCheckpoint(%q) = %q, %v; want %q", tc.ref, got, err, tc.want)
				}
				return
			}
			if !errors.Is(err, tc.err) || got != "" || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("ResolveCheckpoint(%q) = %q, %v; want %v containing %q", tc.ref, got, err, tc.err, tc.msg)
			}
		})
	}
}

// The ambiguity error carries its candidates and count, and is not a
// contract error.
func TestResolveAmbiguous(t *testing.T) {
	db := resolveFixture(t)
	_, err := db.ResolveCheckpoint(context.Background(), "dup-")
	var ae *sbxdb.AmbiguousRefError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an *AmbiguousRefError", err)
	}
	if ae.Ref != "dup-" || ae.Count != 7 || !slices.Equal(ae.Candidates, []string{"dup-1", "dup-2", "dup-3", "dup-4", "dup-5"}) {
		t.Fatalf("ambiguity = %+v", ae)
	}
	if c := chain.Code(err); c != "" {
		t.Fatalf("chain.Code = %q, want none", c)
	}
	if !strings.HasSuffix(err.Error(), "and 2 more; give more of the id") {
		t.Fatalf("message %q", err)
	}
}

// A thread id as long as an id may be still takes a suffix.
func TestResolveLongThread(t *testing.T) {
	db := open(t, t.TempDir())
	thread := strings.Repeat("t", chain.MaxIDBytes)
	chainOf(t, db, thread, "root", "head")
	for ref, want := range map[string]string{thread + "@": "head", thread + "@~1": "root"} {
		if got, err := db.ResolveCheckpoint(context.Background(), ref); err != nil || got != want {
			t.Errorf("ResolveCheckpoint(%.10q…) = %q, %v; want %q", ref, got, err, want)
		}
	}
}

// A cancelled context is refused before the store is read.
func TestResolveCancelled(t *testing.T) {
	db := resolveFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.ResolveCheckpoint(ctx, "abcd1111"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
