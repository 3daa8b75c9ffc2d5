package memstore

import (
	"context"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/storetest"
)

// subject is the kit's Factory for the in-memory store. Reopen and
// OpenSecond stay nil: an in-memory store keeps nothing and has no files, so
// the kit skips the persistence cases.
func subject(t *testing.T, opts sbxdb.Options) *storetest.Subject {
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &storetest.Subject{
		Store:       s,
		InsertRaw:   s.insertRaw,
		SetRefCount: s.setRefCount,
		OnPoint:     s.onPoint,
	}
}

// insertRaw stores a copy of cp exactly as given: no validation, lease, head
// or reference change. A stored checkpoint with the same id is replaced.
func (s *Store) insertRaw(cp *chain.Checkpoint) error {
	cp = cp.Clone()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.checkpoints[cp.ID]; old != nil {
		delete(s.byThread[old.ThreadID], old.ID)
		if len(s.byThread[old.ThreadID]) == 0 {
			delete(s.byThread, old.ThreadID)
		}
	}
	s.checkpoints[cp.ID] = cp
	if s.byThread[cp.ThreadID] == nil {
		s.byThread[cp.ThreadID] = map[string]struct{}{}
	}
	s.byThread[cp.ThreadID][cp.ID] = struct{}{}
	return nil
}

// setRefCount forces the stored count of a blob key; n <= 0 removes it.
func (s *Store) setRefCount(key string, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		delete(s.refs, key)
	} else {
		s.refs[key] = n
	}
	return nil
}

func TestConformance(t *testing.T)         { storetest.RunConformance(t, subject) }
func TestForkConformance(t *testing.T)     { storetest.RunForkConformance(t, subject) }
func TestInstanceConformance(t *testing.T) { storetest.RunInstanceConformance(t, subject) }

// TestDeleteHeadParentReusedInOtherThread pins the reading of SPEC §10 Q4 the
// reference store takes: after retention deleted a checkpoint's parent and
// that id was reused in another thread, DeleteHead must not move the head
// into the other thread. It clears the head instead, so a thread's head
// always names a checkpoint of that thread and a writer of one thread can
// never reach another thread's checkpoints through its head.
func TestDeleteHeadParentReusedInOtherThread(t *testing.T) {
	ctx := context.Background()
	s, err := New(sbxdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	cp := func(id, thread, parent string) *chain.Checkpoint {
		return &chain.Checkpoint{ID: id, ThreadID: thread, ParentID: parent, Reason: chain.ReasonAutomatic,
			Files: []chain.Entry{{Path: id, Kind: chain.KindFile, BlobKey: chain.FilePrefix + strings.Repeat("0", 64), Size: 1}}}
	}
	a, err := s.AcquireWriter(ctx, "A")
	must(err)
	b, err := s.AcquireWriter(ctx, "B")
	must(err)
	_, err = s.Append(ctx, chain.AppendInput{Checkpoint: cp("1", "A", ""), Writer: a.Writer})
	must(err)
	_, err = s.Append(ctx, chain.AppendInput{Checkpoint: cp("2", "A", "1"), ExpectedHeadID: "1", Writer: a.Writer})
	must(err)
	deleted, err := s.DeleteCheckpoints(ctx, "A", 1, a.Writer)
	must(err)
	if len(deleted) != 1 || deleted[0] != "1" {
		t.Fatalf("DeleteCheckpoints deleted %q, want [1]", deleted)
	}
	_, err = s.Append(ctx, chain.AppendInput{Checkpoint: cp("1", "B", ""), Writer: b.Writer}) // "1" reused in B
	must(err)
	must(s.DeleteHead(ctx, "A", "2", a.Writer))
	if h, _ := s.Head(ctx, "A"); h != "" {
		t.Errorf("Head(A) = %q after deleting its last checkpoint, want none (not B's checkpoint)", h)
	}
	if err := s.DeleteHead(ctx, "A", "1", a.Writer); chain.Code(err) != chain.CodeNotHead {
		t.Errorf("DeleteHead(A, 1) with A's writer = %v, want NOT_HEAD", err)
	}
	if h, _ := s.Head(ctx, "B"); h != "1" {
		t.Errorf("Head(B) = %q, want 1", h)
	}
}
