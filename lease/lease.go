// Package lease is the fenced writer lease as its holder sees it: the
// handle a writer holds (Lease), renewed and released through its store's
// Backend, the writer state a store keeps per thread (State), and the
// options and messages of acquiring one.
//
// A thread has at most one live writer, identified by a random owner token
// and a fence that grows by one with every acquisition and is never reset.
// A lease records its holder, the process that took it (proc.Identity), so
// that a lease left behind by a killed writer need not block its thread
// until it expires: acquiring with AcquireOptions.TakeOverDead takes over a
// live lease whose holder is provably gone, and breaking a lease removes
// any. Either way the fence grows, so the old holder, should it still run,
// is refused on its next write.
//
// The transactions that acquire, check, renew, release and break leases
// are internal/meta's (meta.AcquireLease and the rest); the engine runs
// them and implements Backend with them. memstore keeps its leases
// in memory.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/proc"
)

// Writer identifies a lease holder; see chain.Writer.
type Writer = chain.Writer

// State is the stored writer state of one thread.
type State struct {
	// LastFence is the last fence issued for the thread (0: never leased).
	LastFence uint64
	// Held reports whether a lease record exists (it may have expired).
	Held       bool
	OwnerToken string
	Fence      uint64
	ExpiresAt  int64 // epoch ms; the lease is live while ExpiresAt > now
	// Holder is the process that took the lease; zero when not recorded
	// (a lease stored before holders were). A lease of an unrecorded
	// holder is never taken over as dead.
	Holder proc.Identity
}

// Live reports whether the state holds a lease that has not expired at now.
func (s State) Live(now int64) bool { return s.Held && s.ExpiresAt > now }

// AcquireOptions says which live lease an acquire may take over. The zero
// value takes over none: a live lease is WRITER_CONFLICT.
type AcquireOptions struct {
	// TakeOverDead takes over a live lease whose holder is a process on
	// this host that is provably gone (proc.Check answers proc.Gone): a
	// writer killed before it could release. A holder that runs, one on
	// another host, and one not recorded are never taken over; their
	// lease must expire, or be broken (meta.BreakLease, which the
	// engine's Unlock runs).
	TakeOverDead bool
	// Holder is the process the lease records as its holder: nil records
	// the acquiring process (proc.Self()); a zero Identity records none,
	// so the lease is never taken over as dead. A server acquiring for a
	// client sets it to the client process it can name (a unix socket's
	// peer), or to the zero Identity when it cannot.
	Holder *proc.Identity
	// Duration, when positive, is how long this lease lives instead of
	// the store's lease duration: a short task (retention) takes a short
	// lease, so that a holder killed meanwhile blocks the thread for no
	// longer. Fencing keeps a holder that outlives its lease from writing.
	Duration time.Duration
}

// ConflictError is the WRITER_CONFLICT error for a thread whose live lease
// is s: it names the fence, the holder and the expiry.
func ConflictError(threadID string, s State) error {
	return chain.Errorf(chain.ErrWriterConflict, "thread %q has a live writer (fence %d) held by %s until %s",
		threadID, s.Fence, HolderText(s.Holder), TimeText(s.ExpiresAt))
}

// HolderText renders a lease holder for messages: "pid 4242 on host-a",
// "a process in another pid namespace on host-a (pid 1 there)" for one
// this process cannot name by its pid (proc.Identity.String), or "an
// unknown holder" when none was recorded.
func HolderText(id proc.Identity) string {
	if id.IsZero() {
		return "an unknown holder"
	}
	return id.String()
}

// TimeText renders epoch milliseconds for messages: RFC 3339 in UTC, with
// milliseconds.
func TimeText(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
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
	// TookOver is the live lease this one replaced because its holder
	// was gone (AcquireOptions.TakeOverDead), without its owner token; nil
	// when there was none.
	TookOver *State

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
