// Package lease implements the fenced writer leases of sbxdb: at most one
// live writer per thread, identified by a random owner token and a fence that
// grows by one with every acquisition and is never reset.
//
// The bbolt operations (Acquire, Check, Renew, Release) run inside a caller's
// transaction and take the current time as an argument, so expiry follows an
// injected clock. Lease is the handle a caller holds; it renews and releases
// through a Backend, which the engine implements with its own transactions.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	bolt "go.etcd.io/bbolt"
)

// Writer identifies a lease holder; see chain.Writer.
type Writer = chain.Writer

// BucketWriters maps threadId → the thread's sealed writer state (State).
// One record per thread holds both the live lease and the fence counter, so
// the counter survives release and takeover.
var BucketWriters = []byte("writers")

// State is the stored writer state of one thread.
type State struct {
	// LastFence is the last fence issued for the thread (0: never leased).
	LastFence uint64
	// Held reports whether a lease record exists (it may have expired).
	Held       bool
	OwnerToken string
	Fence      uint64
	ExpiresAt  int64 // epoch ms; the lease is live while ExpiresAt > now
}

// Live reports whether the state holds a lease that has not expired at now.
func (s State) Live(now int64) bool { return s.Held && s.ExpiresAt > now }

func (s State) encode() []byte {
	e := &chain.Encoder{}
	e.Uvarint(s.LastFence)
	if !s.Held {
		e.Byte(0)
		return e.Bytes()
	}
	e.Byte(1)
	e.String(s.OwnerToken)
	e.Uvarint(s.Fence)
	e.Varint(s.ExpiresAt)
	return e.Bytes()
}

func decode(p []byte) (State, error) {
	d := chain.NewDecoder(p)
	s := State{LastFence: d.Uvarint()}
	switch d.Byte() {
	case 0:
	case 1:
		s.Held = true
		s.OwnerToken = d.String()
		s.Fence = d.Uvarint()
		s.ExpiresAt = d.Varint()
	default:
		return s, fmt.Errorf("bad held flag")
	}
	return s, d.Err()
}

// Load returns the writer state of a thread (zero State when none).
func Load(tx *bolt.Tx, threadID string) (State, error) {
	v := tx.Bucket(BucketWriters).Get([]byte(threadID))
	if v == nil {
		return State{}, nil
	}
	p, err := chain.Unseal(BucketWriters, []byte(threadID), v)
	if err != nil {
		return State{}, err
	}
	s, err := decode(p)
	if err != nil {
		return State{}, fmt.Errorf("%w: %s/%q: %v", chain.ErrCorrupt, BucketWriters, threadID, err)
	}
	return s, nil
}

func store(tx *bolt.Tx, threadID string, s State) error {
	k := []byte(threadID)
	return tx.Bucket(BucketWriters).Put(k, chain.Seal(BucketWriters, k, s.encode()))
}

// ForEach calls fn with each thread's writer state, in thread id order.
func ForEach(tx *bolt.Tx, fn func(threadID string, s State) error) error {
	return tx.Bucket(BucketWriters).ForEach(func(k, _ []byte) error {
		s, err := Load(tx, string(k))
		if err != nil {
			return err
		}
		return fn(string(k), s)
	})
}

// Acquire takes the thread's lease at now for duration ms. It never waits: a
// live lease, even the caller's own, is WRITER_CONFLICT. An expired one is
// taken over with the next fence.
func Acquire(tx *bolt.Tx, threadID string, now, duration int64) (Writer, int64, error) {
	s, err := Load(tx, threadID)
	if err != nil {
		return Writer{}, 0, err
	}
	if s.Live(now) {
		return Writer{}, 0, chain.Errorf(chain.ErrWriterConflict,
			"thread %q has a live writer (fence %d) until %d", threadID, s.Fence, s.ExpiresAt)
	}
	s.LastFence++
	s.Held, s.OwnerToken, s.Fence, s.ExpiresAt = true, NewToken(), s.LastFence, now+duration
	if err := store(tx, threadID, s); err != nil {
		return Writer{}, 0, err
	}
	return Writer{ThreadID: threadID, OwnerToken: s.OwnerToken, Fence: s.Fence}, s.ExpiresAt, nil
}

// Check returns WRITER_LOST unless w is the live lease of threadID at now:
// same thread, and a stored lease with w's owner token and fence that has not
// expired.
func Check(tx *bolt.Tx, threadID string, w Writer, now int64) error {
	_, err := current(tx, threadID, w, now)
	return err
}

// current is Check returning the stored state it checked.
func current(tx *bolt.Tx, threadID string, w Writer, now int64) (State, error) {
	if w.ThreadID != threadID {
		return State{}, chain.Errorf(chain.ErrWriterLost, "writer of thread %q cannot write thread %q", w.ThreadID, threadID)
	}
	s, err := Load(tx, threadID)
	switch {
	case err != nil:
		return s, err
	case !s.Held:
		return s, chain.Errorf(chain.ErrWriterLost, "thread %q has no writer lease", threadID)
	case s.OwnerToken != w.OwnerToken || s.Fence != w.Fence:
		return s, chain.Errorf(chain.ErrWriterLost, "writer fence %d of thread %q was replaced by fence %d", w.Fence, threadID, s.Fence)
	case s.ExpiresAt <= now:
		return s, chain.Errorf(chain.ErrWriterLost, "writer fence %d of thread %q expired at %d", w.Fence, threadID, s.ExpiresAt)
	}
	return s, nil
}

// Renew extends a live lease to now+duration and returns the new expiry. An
// expired lease cannot be revived (WRITER_LOST).
func Renew(tx *bolt.Tx, w Writer, now, duration int64) (int64, error) {
	s, err := current(tx, w.ThreadID, w, now)
	if err != nil {
		return 0, err
	}
	s.ExpiresAt = now + duration
	return s.ExpiresAt, store(tx, w.ThreadID, s)
}

// Release removes the thread's lease if it is still w's (expired or not);
// otherwise it does nothing. The fence counter stays.
func Release(tx *bolt.Tx, w Writer) error {
	s, err := Load(tx, w.ThreadID)
	if err != nil || !s.Held || s.OwnerToken != w.OwnerToken || s.Fence != w.Fence {
		return err
	}
	s.Held, s.OwnerToken, s.Fence, s.ExpiresAt = false, "", 0, 0
	return store(tx, w.ThreadID, s)
}

// NewToken returns a random version-4 UUID.
func NewToken() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Backend renews and releases leases for Lease; the engine implements it.
type Backend interface {
	RenewWriter(ctx context.Context, w Writer) (expiresAt time.Time, err error)
	ReleaseWriter(ctx context.Context, w Writer) error
}

// Lease is a held writer lease. It embeds the Writer to pass to writes.
// ExpiresAt is live: after a successful Renew it returns the new expiry.
type Lease struct {
	Writer
	// RenewAfter is the store's renewal cadence: renew at least this often.
	RenewAfter time.Duration

	backend   Backend
	mu        sync.Mutex
	expiresAt time.Time
}

// New returns a Lease handle. Stores call it from AcquireWriter.
func New(w Writer, expiresAt time.Time, renewAfter time.Duration, b Backend) *Lease {
	return &Lease{Writer: w, RenewAfter: renewAfter, backend: b, expiresAt: expiresAt}
}

// ExpiresAt returns the lease's expiry as last acquired or renewed.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Renew extends the lease to now + the store's lease duration and returns
// the new expiry. A lease that expired, was released or was taken over
// cannot be renewed: WRITER_LOST.
func (l *Lease) Renew(ctx context.Context) (time.Time, error) {
	t, err := l.backend.RenewWriter(ctx, l.Writer)
	if err != nil {
		return time.Time{}, err
	}
	l.mu.Lock()
	l.expiresAt = t
	l.mu.Unlock()
	return t, nil
}

// Release gives the lease up if it is still this one; otherwise it does
// nothing. It is idempotent.
func (l *Lease) Release(ctx context.Context) error {
	return l.backend.ReleaseWriter(ctx, l.Writer)
}

// KeepAlive renews the lease every RenewAfter until ctx is done (it then
// returns nil) or a renewal fails (it returns that error: the lease is lost
// and the caller must not publish).
func (l *Lease) KeepAlive(ctx context.Context) error {
	t := time.NewTicker(l.RenewAfter)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := l.Renew(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}
