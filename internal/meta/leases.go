package meta

import (
	"fmt"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

// The stored form of a thread's writer state (lease.State):
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

// encodeLease returns the stored form of s.
func encodeLease(s lease.State) []byte {
	e := &Encoder{}
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

// decodeLease decodes what encodeLease wrote.
func decodeLease(p []byte) (lease.State, error) {
	d := NewDecoder(p)
	s := lease.State{LastFence: d.Uvarint()}
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

// LoadLease returns the writer state of a thread (zero State when none).
func LoadLease(tx kv.Tx, threadID string) (lease.State, error) {
	v := tx.Bucket(BucketWriters).Get([]byte(threadID))
	if v == nil {
		return lease.State{}, nil
	}
	p, err := Unseal(BucketWriters, []byte(threadID), v)
	if err != nil {
		return lease.State{}, err
	}
	s, err := decodeLease(p)
	if err != nil {
		return lease.State{}, fmt.Errorf("%w: %s/%q: %v", chain.ErrCorrupt, BucketWriters, threadID, err)
	}
	return s, nil
}

func storeLease(tx kv.Tx, threadID string, s lease.State) error {
	k := []byte(threadID)
	return tx.Bucket(BucketWriters).Put(k, Seal(BucketWriters, k, encodeLease(s)))
}

// ForEachLease calls fn with each thread's writer state, in thread id order.
func ForEachLease(tx kv.Tx, fn func(threadID string, s lease.State) error) error {
	return tx.Bucket(BucketWriters).ForEach(func(k, _ []byte) error {
		s, err := LoadLease(tx, string(k))
		if err != nil {
			return err
		}
		return fn(string(k), s)
	})
}

// Grant is a lease AcquireLease issued.
type Grant struct {
	Writer    lease.Writer
	ExpiresAt int64 // epoch ms
	// TookOver is the live lease Grant replaced because its holder was
	// gone, without its owner token; nil when the thread had no live lease.
	TookOver *lease.State
}

// AcquireLease takes the thread's lease at now for duration ms, recording holder
// as the process that holds it. It never waits: a live lease, even the
// caller's own, is WRITER_CONFLICT, unless opts allow taking it over. An
// expired lease, or a live one taken over, is replaced with the next fence,
// so its holder's writes and renewals are WRITER_LOST from then on.
//
// Whether a holder is gone is decided here, inside the caller's write
// transaction, so two acquirers cannot both take over the same lease.
func AcquireLease(tx kv.Tx, threadID string, holder proc.Identity, now, duration int64, opts lease.AcquireOptions) (Grant, error) {
	s, err := LoadLease(tx, threadID)
	if err != nil {
		return Grant{}, err
	}
	var tookOver *lease.State
	if s.Live(now) {
		if !opts.TakeOverDead || proc.Check(s.Holder) != proc.Gone {
			return Grant{}, lease.ConflictError(threadID, s)
		}
		old := s
		old.OwnerToken = ""
		tookOver = &old
	}
	s.LastFence++
	s.Held, s.OwnerToken, s.Fence, s.ExpiresAt, s.Holder = true, lease.NewToken(), s.LastFence, now+duration, holder
	if err := storeLease(tx, threadID, s); err != nil {
		return Grant{}, err
	}
	w := lease.Writer{ThreadID: threadID, OwnerToken: s.OwnerToken, Fence: s.Fence}
	return Grant{Writer: w, ExpiresAt: s.ExpiresAt, TookOver: tookOver}, nil
}

// BreakLease removes the thread's lease, live or expired, whoever holds it, and
// advances the fence counter past it, as a takeover by no one: the holder's
// next write or renewal is WRITER_LOST, and the next AcquireLease issues a fence
// above every earlier one. It returns the lease it removed, without its
// owner token; when the thread held none (Held false) it changes nothing.
func BreakLease(tx kv.Tx, threadID string) (lease.State, error) {
	s, err := LoadLease(tx, threadID)
	if err != nil || !s.Held {
		return s, err
	}
	removed := s
	removed.OwnerToken = ""
	s.LastFence++
	s.Held, s.OwnerToken, s.Fence, s.ExpiresAt, s.Holder = false, "", 0, 0, proc.Identity{}
	return removed, storeLease(tx, threadID, s)
}

// CheckLease returns WRITER_LOST unless w is the live lease of threadID at now:
// same thread, and a stored lease with w's owner token and fence that has not
// expired.
func CheckLease(tx kv.Tx, threadID string, w lease.Writer, now int64) error {
	_, err := currentLease(tx, threadID, w, now)
	return err
}

// currentLease is CheckLease returning the stored state it checked.
func currentLease(tx kv.Tx, threadID string, w lease.Writer, now int64) (lease.State, error) {
	if w.ThreadID != threadID {
		return lease.State{}, chain.Errorf(chain.ErrWriterLost, "writer of thread %q cannot write thread %q", w.ThreadID, threadID)
	}
	s, err := LoadLease(tx, threadID)
	switch {
	case err != nil:
		return s, err
	case !s.Held:
		return s, chain.Errorf(chain.ErrWriterLost, "thread %q has no writer lease", threadID)
	case s.OwnerToken != w.OwnerToken || s.Fence != w.Fence:
		return s, chain.Errorf(chain.ErrWriterLost, "writer fence %d of thread %q was replaced by fence %d", w.Fence, threadID, s.Fence)
	case s.ExpiresAt <= now:
		return s, chain.Errorf(chain.ErrWriterLost, "writer fence %d of thread %q expired at %s", w.Fence, threadID, lease.TimeText(s.ExpiresAt))
	}
	return s, nil
}

// RenewLease extends a live lease to now+duration and returns the new expiry. An
// expired lease cannot be revived (WRITER_LOST).
func RenewLease(tx kv.Tx, w lease.Writer, now, duration int64) (int64, error) {
	s, err := currentLease(tx, w.ThreadID, w, now)
	if err != nil {
		return 0, err
	}
	s.ExpiresAt = now + duration
	return s.ExpiresAt, storeLease(tx, w.ThreadID, s)
}

// ReleaseLease removes the thread's lease if it is still w's (expired or not);
// otherwise it does nothing. The fence counter stays.
func ReleaseLease(tx kv.Tx, w lease.Writer) error {
	s, err := LoadLease(tx, w.ThreadID)
	if err != nil || !s.Held || s.OwnerToken != w.OwnerToken || s.Fence != w.Fence {
		return err
	}
	s.Held, s.OwnerToken, s.Fence, s.ExpiresAt, s.Holder = false, "", 0, 0, proc.Identity{}
	return storeLease(tx, w.ThreadID, s)
}
