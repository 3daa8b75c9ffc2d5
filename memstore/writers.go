package memstore

import (
	"context"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
)

// writerState is the writer state of one thread (SPEC §1.4): the fence
// counter and at most one lease.
type writerState struct {
	// lastFence is the last fence issued for the thread. It only grows; it
	// survives release and takeover. The first fence ever issued is 1.
	lastFence uint64
	// held reports whether a lease is stored. A held lease may have
	// expired; it is live only while expiresAt > now.
	held      bool
	owner     string
	fence     uint64
	expiresAt int64 // epoch ms
}

// live reports whether a lease is stored and unexpired at now.
func (w *writerState) live(now int64) bool { return w != nil && w.held && w.expiresAt > now }

// AcquireWriter takes the thread's writer lease (SPEC §2.7). It never waits:
// a live lease, even one held by the caller, is WRITER_CONFLICT. An expired
// lease is taken over with the next fence.
func (s *Store) AcquireWriter(ctx context.Context, threadID string) (*lease.Lease, error) {
	if err := enter(ctx, "threadId", threadID); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowMs()
	ws := s.writers[threadID]
	if ws.live(now) {
		return nil, chain.Errorf(chain.ErrWriterConflict,
			"thread %q has a live writer (fence %d) until %s", threadID, ws.fence, rfc3339(ws.expiresAt))
	}
	if ws == nil {
		ws = &writerState{}
		s.writers[threadID] = ws
	}
	ws.lastFence++
	ws.held, ws.owner, ws.fence, ws.expiresAt = true, lease.NewToken(), ws.lastFence, now+s.leaseMs()
	w := lease.Writer{ThreadID: threadID, OwnerToken: ws.owner, Fence: ws.fence}
	return lease.New(w, time.UnixMilli(ws.expiresAt), s.opts.RenewAfter, leaseBackend{s}), nil
}

// checkWriter returns WRITER_LOST unless w may write threadID at now: w is
// for that thread, and the thread's stored lease has w's owner token and
// fence and has not expired. The caller holds mu.
func (s *Store) checkWriter(threadID string, w lease.Writer, now int64) error {
	if w.ThreadID != threadID {
		return chain.Errorf(chain.ErrWriterLost, "writer of thread %q cannot write thread %q", w.ThreadID, threadID)
	}
	ws := s.writers[threadID]
	switch {
	case ws == nil || !ws.held:
		return chain.Errorf(chain.ErrWriterLost, "thread %q has no writer lease", threadID)
	case ws.owner != w.OwnerToken || ws.fence != w.Fence:
		return chain.Errorf(chain.ErrWriterLost, "writer fence %d of thread %q was replaced by fence %d", w.Fence, threadID, ws.fence)
	case ws.expiresAt <= now:
		return chain.Errorf(chain.ErrWriterLost, "writer fence %d of thread %q expired at %s", w.Fence, threadID, rfc3339(ws.expiresAt))
	}
	return nil
}

// rfc3339 renders epoch milliseconds for messages, in UTC.
func rfc3339(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// leaseBackend renews and releases the leases this store hands out.
type leaseBackend struct{ s *Store }

// RenewWriter extends a live lease to now + the lease duration (not the old
// expiry + duration) and returns the new expiry (SPEC §2.8). An expired,
// released or replaced lease cannot be renewed: WRITER_LOST.
func (b leaseBackend) RenewWriter(ctx context.Context, w lease.Writer) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowMs()
	if err := s.checkWriter(w.ThreadID, w, now); err != nil {
		return time.Time{}, err
	}
	ws := s.writers[w.ThreadID]
	ws.expiresAt = now + s.leaseMs()
	return time.UnixMilli(ws.expiresAt), nil
}

// ReleaseWriter removes the thread's lease if it is still w's, expired or
// not; otherwise it does nothing (SPEC §2.9). The fence counter stays. It
// reports only a cancelled context.
func (b leaseBackend) ReleaseWriter(ctx context.Context, w lease.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws := s.writers[w.ThreadID]; ws != nil && ws.held && ws.owner == w.OwnerToken && ws.fence == w.Fence {
		ws.held, ws.owner, ws.fence, ws.expiresAt = false, "", 0, 0
	}
	return nil
}
