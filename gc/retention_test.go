package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
)

var errRelease = errors.New("release failed")

// fakeRetainer is an in-memory Retainer and ThreadLister; it is also the
// lease backend of the leases it hands out, so it sees their releases.
type fakeRetainer struct {
	log        []string
	threads    []string
	busy       map[string]bool  // AcquireWriter: WRITER_CONFLICT
	wrapBusy   map[string]bool  // AcquireWriter: a plain wrap of ErrWriterConflict
	acquireErr map[string]error // AcquireWriter: other errors
	deleted    map[string][]string
	deleteErr  map[string]error
	releaseErr error
	onDelete   func()         // runs inside DeleteCheckpoints
	releaseCtx []error        // ctx.Err() seen by each release
	writers    []lease.Writer // writers passed to DeleteCheckpoints
	issued     []lease.Writer // writers handed out
}

func (r *fakeRetainer) AcquireWriter(ctx context.Context, threadID string) (*lease.Lease, error) {
	r.log = append(r.log, "acquire "+threadID)
	switch {
	case r.busy[threadID]:
		return nil, chain.Errorf(chain.ErrWriterConflict, "thread %q has a live writer", threadID)
	case r.wrapBusy[threadID]:
		return nil, fmt.Errorf("acquiring %q: %w", threadID, chain.ErrWriterConflict)
	case r.acquireErr[threadID] != nil:
		return nil, r.acquireErr[threadID]
	}
	w := lease.Writer{ThreadID: threadID, OwnerToken: "token-" + threadID, Fence: uint64(len(r.issued) + 1)}
	r.issued = append(r.issued, w)
	return lease.New(w, time.Now().Add(time.Minute), 20*time.Second, r), nil
}

func (r *fakeRetainer) DeleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer) ([]string, error) {
	r.log = append(r.log, fmt.Sprintf("delete %s keep %d", threadID, keep))
	r.writers = append(r.writers, w)
	if r.onDelete != nil {
		r.onDelete()
	}
	if err := r.deleteErr[threadID]; err != nil {
		return nil, err
	}
	return r.deleted[threadID], nil
}

func (r *fakeRetainer) Threads(ctx context.Context) ([]string, error) {
	r.log = append(r.log, "threads")
	return r.threads, nil
}

func (r *fakeRetainer) RenewWriter(ctx context.Context, w lease.Writer) (time.Time, error) {
	return time.Now().Add(time.Minute), nil
}

func (r *fakeRetainer) ReleaseWriter(ctx context.Context, w lease.Writer) error {
	r.log = append(r.log, "release "+w.ThreadID)
	r.releaseCtx = append(r.releaseCtx, ctx.Err())
	return r.releaseErr
}

func TestKeepNewest(t *testing.T) {
	ctx := context.Background()

	t.Run("success", func(t *testing.T) {
		r := &fakeRetainer{deleted: map[string][]string{"t1": {"c1", "c2"}}}
		got, err := KeepNewest(ctx, r, "t1", 3)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"c1", "c2"}, got); diff != "" {
			t.Errorf("deleted (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"acquire t1", "delete t1 keep 3", "release t1"}, r.log); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		// The delete runs under the lease just acquired.
		if diff := cmp.Diff(r.issued, r.writers); diff != "" {
			t.Errorf("writer passed to DeleteCheckpoints (-issued +passed):\n%s", diff)
		}
	})

	t.Run("keep 0 is passed to the store", func(t *testing.T) {
		// The store treats keep 0 as 1 (the head is always kept, SPEC Q1).
		r := &fakeRetainer{}
		if _, err := KeepNewest(ctx, r, "t1", 0); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"acquire t1", "delete t1 keep 0", "release t1"}, r.log); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})

	t.Run("negative keep", func(t *testing.T) {
		r := &fakeRetainer{}
		_, err := KeepNewest(ctx, r, "t1", -1)
		if got := chain.Code(err); got != "SANDBOX_SNAPSHOT_INVALID_ENTRY" {
			t.Fatalf("Code(%v) = %q, want SANDBOX_SNAPSHOT_INVALID_ENTRY", err, got)
		}
		if len(r.log) != 0 {
			t.Errorf("calls for an invalid keep: %q", r.log)
		}
	})

	t.Run("delete error releases", func(t *testing.T) {
		r := &fakeRetainer{deleteErr: map[string]error{"t1": errBoom}}
		if _, err := KeepNewest(ctx, r, "t1", 2); !errors.Is(err, errBoom) {
			t.Fatalf("err = %v, want boom", err)
		}
		if diff := cmp.Diff([]string{"acquire t1", "delete t1 keep 2", "release t1"}, r.log); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})

	t.Run("delete error wins over release error", func(t *testing.T) {
		r := &fakeRetainer{deleteErr: map[string]error{"t1": errBoom}, releaseErr: errRelease}
		_, err := KeepNewest(ctx, r, "t1", 2)
		if !errors.Is(err, errBoom) || errors.Is(err, errRelease) {
			t.Fatalf("err = %v, want boom alone", err)
		}
	})

	t.Run("release error", func(t *testing.T) {
		r := &fakeRetainer{deleted: map[string][]string{"t1": {"c1"}}, releaseErr: errRelease}
		got, err := KeepNewest(ctx, r, "t1", 2)
		if !errors.Is(err, errRelease) {
			t.Fatalf("err = %v, want the release error", err)
		}
		// The checkpoints are gone all the same: say which.
		if diff := cmp.Diff([]string{"c1"}, got); diff != "" {
			t.Errorf("deleted (-want +got):\n%s", diff)
		}
	})

	t.Run("busy", func(t *testing.T) {
		r := &fakeRetainer{busy: map[string]bool{"t1": true}}
		_, err := KeepNewest(ctx, r, "t1", 2)
		if chain.Code(err) != chain.CodeWriterConflict {
			t.Fatalf("err = %v, want WRITER_CONFLICT", err)
		}
		if diff := cmp.Diff([]string{"acquire t1"}, r.log); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})

	t.Run("cancelled during delete still releases", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := &fakeRetainer{onDelete: cancel}
		if _, err := KeepNewest(ctx, r, "t1", 2); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]error{nil}, r.releaseCtx, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
			t.Errorf("release saw a cancelled context (-want +got):\n%s", diff)
		}
	})
}

func TestKeepNewestAll(t *testing.T) {
	ctx := context.Background()

	t.Run("busy threads are skipped", func(t *testing.T) {
		r := &fakeRetainer{
			threads:  []string{"a", "b", "c", "d", "e"},
			busy:     map[string]bool{"b": true},
			wrapBusy: map[string]bool{"d": true},
			deleted:  map[string][]string{"a": {"a1", "a2"}, "c": {}, "e": {"e1"}},
		}
		res, err := KeepNewestAll(ctx, r, 2)
		if err != nil {
			t.Fatal(err)
		}
		want := sbxdb.RetentionResult{
			Deleted: map[string][]string{"a": {"a1", "a2"}, "e": {"e1"}},
			Busy:    []string{"b", "d"},
		}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
		// Every lease taken was given back.
		var released int
		for _, c := range r.log {
			if strings.HasPrefix(c, "release ") {
				released++
			}
		}
		if released != len(r.issued) {
			t.Errorf("%d leases issued, %d released", len(r.issued), released)
		}
	})

	t.Run("other errors stop", func(t *testing.T) {
		r := &fakeRetainer{
			threads:    []string{"a", "b", "c"},
			acquireErr: map[string]error{"b": errBoom},
			deleted:    map[string][]string{"a": {"a1"}, "c": {"c1"}},
		}
		res, err := KeepNewestAll(ctx, r, 1)
		if !errors.Is(err, errBoom) {
			t.Fatalf("err = %v, want boom", err)
		}
		want := sbxdb.RetentionResult{Deleted: map[string][]string{"a": {"a1"}}}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("result so far (-want +got):\n%s", diff)
		}
		if slices.Contains(r.log, "acquire c") {
			t.Errorf("thread c visited after an error: %q", r.log)
		}
	})

	t.Run("named threads", func(t *testing.T) {
		r := &fakeRetainer{
			threads: []string{"a", "b", "c"},
			deleted: map[string][]string{"a": {"a1"}, "b": {"b1"}, "c": {"c1"}},
		}
		res, err := KeepNewestAll(ctx, r, 1, "c", "a")
		if err != nil {
			t.Fatal(err)
		}
		want := sbxdb.RetentionResult{Deleted: map[string][]string{"a": {"a1"}, "c": {"c1"}}}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
		wantLog := []string{"acquire c", "delete c keep 1", "release c", "acquire a", "delete a keep 1", "release a"}
		if diff := cmp.Diff(wantLog, r.log); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})

	t.Run("negative keep", func(t *testing.T) {
		r := &fakeRetainer{threads: []string{"a"}}
		_, err := KeepNewestAll(ctx, r, -1)
		if chain.Code(err) != chain.CodeInvalidEntry {
			t.Fatalf("err = %v, want INVALID_ENTRY", err)
		}
		if len(r.log) != 0 {
			t.Errorf("calls for an invalid keep: %q", r.log)
		}
	})

	t.Run("release error keeps the deleted ids", func(t *testing.T) {
		r := &fakeRetainer{threads: []string{"a", "b"}, deleted: map[string][]string{"a": {"a1"}}, releaseErr: errRelease}
		res, err := KeepNewestAll(ctx, r, 1)
		if !errors.Is(err, errRelease) {
			t.Fatalf("err = %v, want the release error", err)
		}
		want := sbxdb.RetentionResult{Deleted: map[string][]string{"a": {"a1"}}}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("result so far (-want +got):\n%s", diff)
		}
	})
}

// SPEC §5.1's order: an invalid thread id is INVALID_ID even when keep is
// invalid too, and no lease is taken for either.
func TestKeepNewestCheckOrder(t *testing.T) {
	r := &fakeRetainer{}
	for _, tc := range []struct {
		thread string
		keep   int
		code   string
	}{
		{"", -1, chain.CodeInvalidID},
		{"nul\x00", 3, chain.CodeInvalidID},
		{"t", -1, chain.CodeInvalidEntry},
	} {
		if _, err := KeepNewest(context.Background(), r, tc.thread, tc.keep); chain.Code(err) != tc.code {
			t.Errorf("KeepNewest(%q, %d) = %v, want %s", tc.thread, tc.keep, err, tc.code)
		}
	}
	if len(r.log) != 0 {
		t.Fatalf("invalid input reached the store: %v", r.log)
	}
}
