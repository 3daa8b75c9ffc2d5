package server

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"time"
)

// DefaultMaxBodyBytesInFlight is the default of
// Options.MaxBodyBytesInFlight: four bodies at the JSON limit.
const DefaultMaxBodyBytesInFlight = 1 << 30

// smallBody is the size of a JSON body below which it is not charged to
// the body budget: such bodies are bounded by MaxRequests × smallBody in
// all (16 MiB at the default), and never wait behind a big one.
const smallBody = 64 << 10

// bodyBudget bounds the bytes of the JSON request bodies held in memory
// at once. A request charges its body before reading it (its
// Content-Length, or what it has read so far when the length is not
// sent), and gives the charge back when its handler returns. The sum of
// the charges never exceeds max.
type bodyBudget struct {
	max  int64 // ≤ 0: no budget
	wait time.Duration

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed and replaced at each release
}

func newBodyBudget(max int64, wait time.Duration) *bodyBudget {
	return &bodyBudget{max: max, wait: wait, changed: make(chan struct{})}
}

// acquire adds n bytes to the charges, waiting until they fit, for up to
// b.wait in all since start, or until ctx is done. It reports whether it
// charged them. waiting, when not nil, is called once n does not fit, before
// the wait.
func (b *bodyBudget) acquire(ctx context.Context, n int64, start time.Time, waiting func()) bool {
	if b.max <= 0 || n <= 0 {
		return true
	}
	var timer *time.Timer
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		changed := b.changed
		b.mu.Unlock()
		if timer == nil {
			if waiting != nil {
				waiting()
			}
			left := b.wait - time.Since(start)
			if left <= 0 {
				return false
			}
			timer = time.NewTimer(left)
			defer timer.Stop()
		}
		select {
		case <-changed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// release gives n charged bytes back.
func (b *bodyBudget) release(n int64) {
	if b.max <= 0 || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// inUse returns the bytes charged now.
func (b *bodyBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// bodyCharge is what one request has charged to the body budget, given
// back when its handler returns (handle).
type bodyCharge struct {
	n     int64
	start time.Time // when the request first waited, for the bound on its waits
}

type bodyChargeKey struct{}

// charged runs h with a fresh charge in r's context, and gives back what
// h charged when it returns or panics.
//
// Once h returns, what a large body held (the body, and what the engine
// made of it: several times its size) is garbage that the collector,
// paced by the heap at its peak, would leave in place while the next
// bodies grow the heap again. A charge of collectBody or more is given
// back only after a collection, so that a request admitted in its place
// starts from the heap without it.
func (s *Server) charged(r *http.Request, h func(*http.Request) (any, error)) (any, error) {
	c := &bodyCharge{}
	defer func() {
		if c.n >= collectBody {
			runtime.GC()
		}
		s.body.release(c.n)
	}()
	return h(r.WithContext(context.WithValue(r.Context(), bodyChargeKey{}, c)))
}

// collectBody is the charge from which a request's end collects garbage
// (charged): at 16 MiB a collection costs far less than the request did.
const collectBody = 16 << 20

// charge charges n more bytes of r's body to the budget, waiting for room
// as bodyBudget.acquire does. A body that could never fit is
// SBXDB_TOO_LARGE, one that does not fit in time SBXDB_UNAVAILABLE
// (503, Retry-After): the server is busy, not the request wrong. A
// request without a charge in its context (a handler not registered with
// handle) charges nothing.
func (s *Server) charge(r *http.Request, total, n int64) error {
	c, _ := r.Context().Value(bodyChargeKey{}).(*bodyCharge)
	if c == nil || s.body.max <= 0 {
		return nil
	}
	if total > s.body.max {
		return errorf(CodeTooLarge, "request body over %d bytes (the server's budget for bodies in memory)", s.body.max)
	}
	if c.start.IsZero() {
		c.start = time.Now()
	}
	if !s.body.acquire(r.Context(), n, c.start, s.hooks.bodyWaiting) {
		return errorf(CodeUnavailable, "the request bodies in memory stayed too large for this one's %d bytes within the server's budget of %d for %s", n, s.body.max, s.body.wait)
	}
	c.n += n
	return nil
}
