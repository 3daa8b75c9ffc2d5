// Package storetest is the conformance kit of sbxdb: the contract's store
// cases of SPEC §9 plus X cases beyond it (aliasing, concurrency,
// persistence, atomicity, limits). Each case is a subtest named by its ID
// and what it checks, C3_NullParentOnExistingHead, so that
// -run 'Conformance/C3_' selects it. Any sbxdb.Store passes the kit or is
// not an sbxdb store; both the bbolt engine and the in-memory reference
// store run it.
package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
)

// Factory makes a fresh, empty store with opts for one subtest. It registers
// its own cleanup with t.
type Factory func(t *testing.T, opts sbxdb.Options) *Subject

// Subject is a store under test plus the hooks the kit needs to reach below
// the public API. A nil hook makes the subtests that need it skip, saying
// which hook is missing.
type Subject struct {
	Store sbxdb.Store

	// InsertRaw stores cp exactly as given: no validation, lease, head or
	// reference change. It fabricates states the contract cannot reach:
	// orphan and off-chain checkpoints (M2, D7).
	InsertRaw func(cp *chain.Checkpoint) error

	// SetRefCount forces the stored count of a blob key; 0 removes it (S3).
	SetRefCount func(key string, n int64) error

	// OnPoint registers fn to run at a named point of a write and returns a
	// function that removes it. When fn returns an error the write fails
	// with it and must change nothing. Points:
	//   "fork.preflight"              before the fork's transaction starts
	//                                  (fn may call the store)
	//   "append.publish", "fork.publish", "deleteHead.publish",
	//   "deleteCheckpoints.publish"   inside the transaction, after the
	//                                  checks and after the first writes
	//                                  (fn must not call the store)
	OnPoint func(point string, fn func() error) (remove func())

	// Reopen closes the store and opens it again on the same files,
	// returning the new handle. Nil for a store that keeps nothing.
	Reopen func(t *testing.T) sbxdb.Store

	// OpenSecond tries to open a second handle on the same files while
	// Store is open, and returns Open's error (nil if it wrongly opened).
	// Nil for a store with no files.
	OpenSecond func() error
}

// Clock is a movable test clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now int64 // epoch ms
}

// NewClock returns a clock reading ms (epoch milliseconds).
func NewClock(ms int64) *Clock { return &Clock{now: ms} }

// Now returns the current reading; use it as sbxdb.Options.Now.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.UnixMilli(c.now)
}

// Ms returns the current reading in epoch milliseconds.
func (c *Clock) Ms() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += d.Milliseconds()
	c.mu.Unlock()
}

// Set moves the clock to ms.
func (c *Clock) Set(ms int64) {
	c.mu.Lock()
	c.now = ms
	c.mu.Unlock()
}

// ConformanceOptions are the options of the reference suite: a clock frozen
// at 1000 ms, leases of 100 ms renewed after 25 ms.
func ConformanceOptions(clock *Clock) sbxdb.Options {
	return sbxdb.Options{Now: clock.Now, LeaseDuration: 100 * time.Millisecond, RenewAfter: 25 * time.Millisecond}
}
