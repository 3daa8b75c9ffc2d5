// Package memstore is the in-memory reference implementation of the sbxdb
// store contract (sbxdb.Store). Its one job is to state the contract of
// SPEC §2–§5.1 and §10 as plainly as possible, on maps under one mutex, so
// that the conformance kit and a differential test can hold the durable
// engine against it.
//
// It is deliberately independent of the engine's storage code: it uses the
// chain package only for the model, validation and errors, never the
// engine's or internal/meta's operations, and it re-implements the lease
// rules of package lease on maps. It keeps nothing across restarts.
package memstore

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
)

// Store is an in-memory sbxdb.Store. The zero value is not usable; call New.
// All methods are safe for concurrent use.
//
// Every write checks everything first and mutates only after the last check
// passed, so a failing write changes nothing. Stored values are private
// copies: inputs are cloned before they are validated and stored, and reads
// return fresh clones.
type Store struct {
	opts sbxdb.Options // validated, defaults filled

	mu sync.Mutex // guards every field below

	// checkpoints maps id → the stored checkpoint. Values are never mutated
	// after insertion and never handed out (reads clone them).
	checkpoints map[string]*chain.Checkpoint
	// byThread maps threadID → the set of ids of its checkpoints.
	// Invariant: id ∈ byThread[t] ⇔ checkpoints[id].ThreadID == t, and no
	// set is empty (an empty set is deleted).
	byThread map[string]map[string]struct{}
	// heads maps threadID → head checkpoint id; a thread with no head has
	// no entry (never ""). Through the public API the head always names a
	// stored checkpoint of that thread.
	heads map[string]string
	// writers holds the writer state of every thread ever leased. An entry
	// is never removed, so the fence counter survives release and takeover.
	writers map[string]*writerState
	// refs maps blob key → number of stored checkpoints naming it (each
	// checkpoint counts once per distinct key). Invariant: every count > 0;
	// a key reaching 0 is deleted.
	refs map[string]int64
	// transcripts maps threadID → its saved messages. Presence matters: a
	// saved empty transcript is present and blocks a fork (SPEC §10 Q8).
	transcripts map[string][]json.RawMessage
	// instances maps key → record; any key, "" included, is allowed.
	instances map[string]sbxdb.InstanceRecord

	// hookMu guards points. It is separate from mu so a test can register
	// hooks while store calls run, and so a "fork.preflight" hook, which runs
	// before mu is taken, may call the store.
	hookMu sync.Mutex
	points map[string]*hook
}

// Compile-time check that Store satisfies the full contract.
var _ sbxdb.Store = (*Store)(nil)

// New returns an empty store. opts is validated and completed by
// sbxdb.Options.Check; invalid options give an error wrapping
// sbxdb.ErrInvalidOptions.
func New(opts sbxdb.Options) (*Store, error) {
	o, err := opts.Check()
	if err != nil {
		return nil, err
	}
	return &Store{
		opts:        o,
		checkpoints: map[string]*chain.Checkpoint{},
		byThread:    map[string]map[string]struct{}{},
		heads:       map[string]string{},
		writers:     map[string]*writerState{},
		refs:        map[string]int64{},
		transcripts: map[string][]json.RawMessage{},
		instances:   map[string]sbxdb.InstanceRecord{},
	}, nil
}

// nowMs reads the injected clock in epoch milliseconds. It is read once per
// call, so one operation sees one instant.
func (s *Store) nowMs() int64 { return s.opts.Now().UnixMilli() }

// leaseMs is the lease duration in milliseconds.
func (s *Store) leaseMs() int64 { return s.opts.LeaseDuration.Milliseconds() }

// enter runs what every method checks first: the context, then its
// identifier arguments (field, value pairs) in the contract's order.
func enter(ctx context.Context, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return chain.CheckIDs(ids...)
}

// Get returns a copy of the checkpoint id, or nil and no error when it is not
// stored (SPEC §2.2).
func (s *Store) Get(ctx context.Context, id string) (*chain.Checkpoint, error) {
	if err := enter(ctx, "checkpoint id", id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkpoints[id].Clone(), nil // Clone of nil is nil
}

// List returns copies of every checkpoint of the thread, on the head chain or
// not, sorted by createdAt and then id bytes; [] for an unknown thread
// (SPEC §2.3).
func (s *Store) List(ctx context.Context, threadID string) ([]*chain.Checkpoint, error) {
	if err := enter(ctx, "threadId", threadID); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*chain.Checkpoint{}
	for _, cp := range s.threadCheckpoints(threadID) {
		out = append(out, cp.Clone())
	}
	return out, nil
}

// threadCheckpoints returns the stored (not copied) checkpoints of a thread
// in List order. The caller holds mu and must not let them escape.
func (s *Store) threadCheckpoints(threadID string) []*chain.Checkpoint {
	cps := make([]*chain.Checkpoint, 0, len(s.byThread[threadID]))
	for id := range s.byThread[threadID] {
		cps = append(cps, s.checkpoints[id])
	}
	slices.SortFunc(cps, func(a, b *chain.Checkpoint) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return cps
}

// Head returns the thread's head id, or "" when it has none (SPEC §2.4).
func (s *Store) Head(ctx context.Context, threadID string) (string, error) {
	if err := enter(ctx, "threadId", threadID); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heads[threadID], nil
}

// BlobReferences returns every blob key with its count (> 0), sorted by key
// in UTF-8 byte order (SPEC §2.10). The result is never nil.
func (s *Store) BlobReferences(ctx context.Context) ([]chain.BlobRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]chain.BlobRef, 0, len(s.refs))
	for k, n := range s.refs {
		out = append(out, chain.BlobRef{Key: k, References: n})
	}
	slices.SortFunc(out, func(a, b chain.BlobRef) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}

// LoadThread returns a copy of the thread's saved transcript, or [] (never
// nil) when none was saved.
func (s *Store) LoadThread(ctx context.Context, threadID string) ([]json.RawMessage, error) {
	if err := enter(ctx, "threadId", threadID); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return chain.CloneMessages(s.transcripts[threadID]), nil
}

// SaveThread replaces the thread's transcript with a copy of msgs. Each
// message must be JSON (INVALID_ENTRY). Saving an empty list still marks the
// transcript present.
func (s *Store) SaveThread(ctx context.Context, threadID string, msgs []json.RawMessage) error {
	if err := enter(ctx, "threadId", threadID); err != nil {
		return err
	}
	msgs = chain.CloneMessages(msgs) // copy before validating: the caller may mutate
	if err := chain.ValidateMessages(msgs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.transcripts[threadID] = msgs
	return nil
}

// Instances returns the instance store (SPEC §4).
func (s *Store) Instances() sbxdb.InstanceStore { return instanceStore{s} }

// putCheckpoint stores cp (which the store owns from now on), indexes it
// under its thread and adds one reference to each distinct blob key. The
// caller holds mu and has checked that the id is free.
func (s *Store) putCheckpoint(cp *chain.Checkpoint) {
	s.checkpoints[cp.ID] = cp
	set := s.byThread[cp.ThreadID]
	if set == nil {
		set = map[string]struct{}{}
		s.byThread[cp.ThreadID] = set
	}
	set[cp.ID] = struct{}{}
	for _, k := range cp.BlobKeys() {
		s.refs[k]++
	}
}

// dropCheckpoint removes the stored checkpoint id, its index entry and one
// reference to each of its distinct blob keys, deleting keys that reach 0.
// The caller holds mu; the head is the caller's business.
func (s *Store) dropCheckpoint(id string) {
	cp := s.checkpoints[id]
	if cp == nil {
		return
	}
	delete(s.checkpoints, id)
	if set := s.byThread[cp.ThreadID]; set != nil {
		delete(set, id)
		if len(set) == 0 {
			delete(s.byThread, cp.ThreadID)
		}
	}
	for _, k := range cp.BlobKeys() {
		if s.refs[k]--; s.refs[k] <= 0 {
			delete(s.refs, k)
		}
	}
}
