package engine

import (
	"context"
	"sync"
	"time"
)

// The database's clock. On shared metadata the times that decide safety
// across servers (a lease's expiry against another server's acquire, a
// blob's upload time against another server's sweep window, a retired
// pack's deletion window) must come from one clock, or a server whose
// clock is fast would take a lease another still holds and delete a blob
// another has just uploaded. Unless the caller set Options.Now, the store's
// clock there is the database server's, estimated without a round trip
// per read: an estimate pairs the database's clock_timestamp() with this
// process's monotonic clock at the middle of the query's round trip, and
// the time is that reading plus the monotonic time elapsed since. The
// database read its clock within the round trip, so an estimate is off by
// at most half of it; Open keeps the best of clockSamples, and a read more
// than clockRefresh after the last estimate starts another in the
// background. The server's wall clock is never read: neither its offset
// nor its steps (NTP, a user's date) matter.

// clockRefresh is how old an estimate may get before a read of the clock
// refreshes it: the monotonic clock's drift from the database's over it
// (parts per million) is far below a lease's millisecond.
const clockRefresh = time.Minute

// clockRetry is how long after a refresh the next may start.
const clockRetry = 10 * time.Second

// clockSamples is how many estimates Open takes, keeping the one of the
// shortest round trip.
const clockSamples = 3

// clockMaxRTT is the round trip above which a refresh is dropped when it
// is also over twice the kept one's, an estimate taken while the database
// stalled; the kept one stays until a later refresh does better.
const clockMaxRTT = 100 * time.Millisecond

// dbClock is the database's clock as the last estimate gives it.
type dbClock struct {
	query func(context.Context) (time.Time, error)

	mu         sync.Mutex
	base       time.Time     // the database's time at mono
	mono       time.Time     // time.Now() (its monotonic reading) at base
	rtt        time.Duration // the round trip of that estimate
	tried      time.Time     // time.Now() at the last refresh started
	refreshing bool
}

// newDBClock estimates the clock query reads (pgkv's DB.Now).
func newDBClock(ctx context.Context, query func(context.Context) (time.Time, error)) (*dbClock, error) {
	c := &dbClock{query: query}
	for i := range clockSamples {
		base, mono, rtt, err := c.sample(ctx)
		if err != nil {
			return nil, err
		}
		if i == 0 || rtt < c.rtt {
			c.base, c.mono, c.rtt = base, mono, rtt
		}
	}
	return c, nil
}

// sample reads the database's clock once: base is its time at mono, the
// middle of the round trip rtt.
func (c *dbClock) sample(ctx context.Context) (base, mono time.Time, rtt time.Duration, err error) {
	start := time.Now()
	base, err = c.query(ctx)
	rtt = time.Since(start)
	return base, start.Add(rtt / 2), rtt, err
}

// now returns the database's time, starting a refresh of the estimate
// when it is older than clockRefresh.
func (c *dbClock) now() time.Time {
	c.mu.Lock()
	base, mono := c.base, c.mono
	elapsed := time.Since(mono)
	// A refresh that failed is tried again clockRetry later, not at
	// every read.
	stale := elapsed >= clockRefresh && !c.refreshing && time.Since(c.tried) >= clockRetry
	if stale {
		c.refreshing, c.tried = true, time.Now()
	}
	c.mu.Unlock()
	if stale {
		go c.refresh()
	}
	return base.Add(elapsed)
}

// refresh takes a new estimate, kept unless its round trip was long. A
// query that fails (the database away, the store closed) keeps the old
// one, for the next read to try again.
func (c *dbClock) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base, mono, rtt, err := c.sample(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	if err != nil || (rtt > clockMaxRTT && rtt > 2*c.rtt) {
		return
	}
	c.base, c.mono, c.rtt = base, mono, rtt
}
