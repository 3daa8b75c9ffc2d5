// Package lease implements the fenced writer leases of sbxdb: at most one
// live writer per thread, identified by a random owner token and a fence that
// grows by one with every acquisition and is never reset.
//
// A lease records its holder, the process that took it (proc.Identity), so
// that a lease left behind by a killed writer need not block its thread until
// it expires: Acquire with TakeOverDead takes over a live lease whose holder
// is provably gone, and Break removes any lease. Either way the fence grows,
// so the old holder, should it still run, is refused on its next write.
//
// The bbolt operations (Acquire, Check, Renew, Release, Break) run inside a
// caller's transaction and take the current time and the acquiring process
// as arguments, so expiry follows an injected clock and tests can forge
// holders. Lease is the handle a caller holds; it renews and releases through
// a Backend, which the engine implements with its own transactions.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/proc"
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
	// Holder is the process that took the lease; zero when not recorded
	// (a lease stored before holders were). A lease of an unrecorded
	// holder is never taken over as dead.
	Holder proc.Identity
}

// Live reports whether the state holds a lease that has not expired at now.
func (s State) Live(now int64) bool { return s.Held && s.ExpiresAt > now }

// The stored form of State:
//
//	last fence                          uvarint
//	form                                byte
//	  0  no lease
//	  1  owner token, fence, expiresAt  a lease of an unrecorded holder
//	  2  owner token, fence, expiresAt, a lease and its holder
//	     host, boot, pid namespace,
//	     pid, start
//
// Strings are length-prefixed, fence, pid and start uvarints, expiresAt a
// varint. Stores written before holders were recorded hold forms 0 and 1
// only, which decode unchanged (form 1 as "holder unknown"), so recording
// the holder needed no new store format version. A build that predates
// form 2 reads such a record as damaged; a released lease is form 0 again.
const (
	formNone        = 0
	formLease       = 1
	formLeaseHolder = 2
)

// maxPID bounds a stored pid: the kernel's pids fit in 22 bits, and one
// that does not fit an int32 is damage, not a process.
const maxPID = 1<<31 - 1

func (s State) encode() []byte {
	e := &chain.Encoder{}
	e.Uvarint(s.LastFence)
	switch {
	case !s.Held:
		e.Byte(formNone)
		return e.Bytes()
	case s.Holder.IsZero():
		e.Byte(formLease)
	default:
		e.Byte(formLeaseHolder)
	}
	e.String(s.OwnerToken)
	e.Uvarint(s.Fence)
	e.Varint(s.ExpiresAt)
	if !s.Holder.IsZero() {
		e.String(s.Holder.Host)
		e.String(s.Holder.Boot)
		e.String(s.Holder.NS)
		e.Uvarint(uint64(s.Holder.PID))
		e.Uvarint(s.Holder.Start)
	}
	return e.Bytes()
}

func decode(p []byte) (State, error) {
	d := chain.NewDecoder(p)
	s := State{LastFence: d.Uvarint()}
	form := d.Byte()
	switch form {
	case formNone:
		return s, d.Err()
	case formLease, formLeaseHolder:
	default:
		return s, fmt.Errorf("bad lease form %d", form)
	}
	s.Held = true
	s.OwnerToken = d.String()
	s.Fence = d.Uvarint()
	s.ExpiresAt = d.Varint()
	if form == formLeaseHolder {
		s.Holder.Host = d.String()
		s.Holder.Boot = d.String()
		s.Holder.NS = d.String()
		pid := d.Uvarint()
		s.Holder.Start = d.Uvarint()
		if d.Err() == nil && (pid == 0 || pid > maxPID) {
			return s, fmt.Errorf("holder pid %d out of range", pid)
		}
		s.Holder.PID = int(pid)
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

// AcquireOptions says which live lease Acquire may take over. The zero
// value takes over none: a live lease is WRITER_CONFLICT.
type AcquireOptions struct {
	// TakeOverDead takes over a live lease whose holder is a process on
	// this host that is provably gone (proc.Check answers proc.Gone): a
	// writer killed before it could release. A holder that runs, one on
	// another host, and one not recorded are never taken over; their
	// lease must expire, or be broken (Break).
	TakeOverDead bool
}

// Grant is a lease Acquire issued.
type Grant struct {
	Writer    Writer
	ExpiresAt int64 // epoch ms
	// TookOver is the live lease Grant replaced because its holder was
	// gone, without its owner token; nil when the thread had no live lease.
	TookOver *State
}

// Acquire takes the thread's lease at now for duration ms, recording holder
// as the process that holds it. It never waits: a live lease, even the
// caller's own, is WRITER_CONFLICT, unless opts allow taking it over. An
// expired lease, or a live one taken over, is replaced with the next fence,
// so its holder's writes and renewals are WRITER_LOST from then on.
//
// Whether a holder is gone is decided here, inside the caller's write
// transaction, so two acquirers cannot both take over the same lease.
func Acquire(tx *bolt.Tx, threadID string, holder proc.Identity, now, duration int64, opts AcquireOptions) (Grant, error) {
	s, err := Load(tx, threadID)
	if err != nil {
		return Grant{}, err
	}
	var tookOver *State
	if s.Live(now) {
		if !opts.TakeOverDead || proc.Check(s.Holder) != proc.Gone {
			return Grant{}, ConflictError(threadID, s)
		}
		old := s
		old.OwnerToken = ""
		tookOver = &old
	}
	s.LastFence++
	s.Held, s.OwnerToken, s.Fence, s.ExpiresAt, s.Holder = true, NewToken(), s.LastFence, now+duration, holder
	if err := store(tx, threadID, s); err != nil {
		return Grant{}, err
	}
	w := Writer{ThreadID: threadID, OwnerToken: s.OwnerToken, Fence: s.Fence}
	return Grant{Writer: w, ExpiresAt: s.ExpiresAt, TookOver: tookOver}, nil
}

// ConflictError is the WRITER_CONFLICT error for a thread whose live lease
// is s: it names the fence, the holder and the expiry.
func ConflictError(threadID string, s State) error {
	return chain.Errorf(chain.ErrWriterConflict, "thread %q has a live writer (fence %d) held by %s until %s",
		threadID, s.Fence, HolderText(s.Holder), TimeText(s.ExpiresAt))
}

// HolderText renders a lease holder for messages: "pid 4242 on host-a", or
// "an unknown holder" when none was recorded.
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

// Break removes the thread's lease, live or expired, whoever holds it, and
// advances the fence counter past it, as a takeover by no one: the holder's
// next write or renewal is WRITER_LOST, and the next Acquire issues a fence
// above every earlier one. It returns the lease it removed, without its
// owner token; when the thread held none (Held false) it changes nothing.
func Break(tx *bolt.Tx, threadID string) (State, error) {
	s, err := Load(tx, threadID)
	if err != nil || !s.Held {
		return s, err
	}
	removed := s
	removed.OwnerToken = ""
	s.LastFence++
	s.Held, s.OwnerToken, s.Fence, s.ExpiresAt, s.Holder = false, "", 0, 0, proc.Identity{}
	return removed, store(tx, threadID, s)
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
		return s, chain.Errorf(chain.ErrWriterLost, "writer fence %d of thread %q expired at %s", w.Fence, threadID, TimeText(s.ExpiresAt))
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
	s.Held, s.OwnerToken, s.Fence, s.ExpiresAt, s.Holder = false, "", 0, 0, proc.Identity{}
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
