package sbxdb

import (
	"errors"
	"fmt"
	"time"
)

// Options are what the contract lets a caller choose when a store is made
// (SPEC §2.1): its clock and its lease timings. Every store takes them; the
// engine's own options (engine.Options) add where and how it stores.
type Options struct {
	// Now is the store's one clock, read at each call: it decides which
	// leases are live and dates what the caller gives no date. Default:
	// time.Now.
	Now func() time.Time
	// LeaseDuration is how long an acquired or renewed lease lives.
	// Default DefaultLeaseDuration; must be at least 1 ms.
	LeaseDuration time.Duration
	// RenewAfter is the renewal cadence handed to lease holders. Default
	// DefaultRenewAfter; must be at least 1 ms and strictly below
	// LeaseDuration.
	RenewAfter time.Duration
}

// The contract's lease timings (SPEC §2.1).
const (
	DefaultLeaseDuration = 120 * time.Second
	DefaultRenewAfter    = 45 * time.Second
)

// ErrInvalidOptions reports options the contract rejects at construction.
// It is a plain error, not a contract code (SPEC §2.1).
var ErrInvalidOptions = errors.New("sbxdb: invalid options")

// Check returns o with the defaults filled in, or an error wrapping
// ErrInvalidOptions. A zero duration means the default; a negative or
// sub-millisecond one is rejected (the contract counts in milliseconds, so
// it would be 0 ms), and so is RenewAfter >= LeaseDuration, which makes a
// LeaseDuration below 45 s alone invalid, as in the reference.
func (o Options) Check() (Options, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewAfter == 0 {
		o.RenewAfter = DefaultRenewAfter
	}
	switch {
	case o.LeaseDuration < time.Millisecond:
		return o, fmt.Errorf("%w: LeaseDuration %v must be at least 1ms", ErrInvalidOptions, o.LeaseDuration)
	case o.RenewAfter < time.Millisecond:
		return o, fmt.Errorf("%w: RenewAfter %v must be at least 1ms", ErrInvalidOptions, o.RenewAfter)
	case o.RenewAfter >= o.LeaseDuration:
		return o, fmt.Errorf("%w: RenewAfter %v must be below LeaseDuration %v", ErrInvalidOptions, o.RenewAfter, o.LeaseDuration)
	}
	return o, nil
}
