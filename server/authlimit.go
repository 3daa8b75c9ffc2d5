package server

import (
	"container/list"
	"context"
	"net"
	"net/netip"
	"sync"
	"time"
)

// The backoff of failed authentications (docs/API.md, Transport).
const (
	// authBaseDelay is the wait after a peer's first failed
	// authentication; each further failure doubles it, up to
	// authMaxDelay.
	authBaseDelay = 10 * time.Millisecond
	authMaxDelay  = 5 * time.Second
	// authForget is how long after its last failure, its waits over, a
	// peer's failures are forgotten.
	authForget = time.Minute
	// maxAuthPeers bounds the peers whose failures are remembered; the
	// least recently seen one is forgotten first.
	maxAuthPeers = 4096
)

// authLimiter slows down failed authentications, per peer: once a peer
// has failed n times in a row, the checks of its requests are spaced at
// least backoff(n) apart, each request waiting its turn before its token
// is checked; a request whose turn is more than authMaxDelay away is
// refused without a check. So a peer gets at most one token checked per
// authMaxDelay however many connections it opens, while a peer that never
// failed never waits. A success forgets the peer's failures, and so does
// authForget of quiet. It is safe for concurrent use, and holds at most
// maxAuthPeers peers.
type authLimiter struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu    sync.Mutex
	peers map[string]*list.Element // of *authPeer
	lru   list.List                // most recently seen first
	max   int
}

// authPeer is what the limiter remembers of one peer.
type authPeer struct {
	key      string
	failures int       // failed authentications in a row
	next     time.Time // the earliest time its next request is checked
	last     time.Time // its last failure
}

func newAuthLimiter() *authLimiter {
	return &authLimiter{now: time.Now, sleep: sleepCtx, peers: map[string]*list.Element{}, max: maxAuthPeers}
}

// sleepCtx waits d, or until ctx is done, which it returns.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff is the spacing of a peer's checks after n failures in a row.
func backoff(n int) time.Duration {
	switch {
	case n <= 0:
		return 0
	case n > 10: // 10 ms << 10 is past authMaxDelay already
		return authMaxDelay
	}
	return min(authBaseDelay<<(n-1), authMaxDelay)
}

// peerKey is the peer a remote address counts as: its IP, or, for IPv6,
// its /64, which one host commonly holds whole.
func peerKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// get returns key's state, nil when it has none (or it was forgotten),
// and marks it the most recently seen. The caller holds mu.
func (l *authLimiter) get(key string, now time.Time) *authPeer {
	e := l.peers[key]
	if e == nil {
		return nil
	}
	p := e.Value.(*authPeer)
	if now.After(p.next) && now.Sub(p.last) > authForget {
		l.lru.Remove(e)
		delete(l.peers, key)
		return nil
	}
	l.lru.MoveToFront(e)
	return p
}

// wait holds a request of key until its turn to be checked, and reports
// how long it would have had to wait (0 when it waited) when its turn is
// more than authMaxDelay away, or the error of ctx when it ended first.
func (l *authLimiter) wait(ctx context.Context, key string) (time.Duration, error) {
	l.mu.Lock()
	now := l.now()
	p := l.get(key, now)
	if p == nil || p.failures == 0 {
		l.mu.Unlock()
		return 0, nil
	}
	at := p.next
	if at.Before(now) {
		at = now
	}
	if d := at.Sub(now); d > authMaxDelay {
		l.mu.Unlock()
		return d, nil
	}
	p.next = at.Add(backoff(p.failures))
	l.mu.Unlock()
	if d := at.Sub(now); d > 0 {
		return 0, l.sleep(ctx, d)
	}
	return 0, nil
}

// failed records a failed authentication of key.
func (l *authLimiter) failed(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	p := l.get(key, now)
	if p == nil {
		p = &authPeer{key: key}
		l.peers[key] = l.lru.PushFront(p)
		for l.lru.Len() > l.max {
			old := l.lru.Back()
			l.lru.Remove(old)
			delete(l.peers, old.Value.(*authPeer).key)
		}
	}
	p.failures++
	p.last = now
	if next := now.Add(backoff(p.failures)); next.After(p.next) {
		p.next = next
	}
}

// succeeded forgets key's failures.
func (l *authLimiter) succeeded(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.peers[key]; e != nil {
		l.lru.Remove(e)
		delete(l.peers, key)
	}
}

// state returns key's failures in a row and the time its next request is
// checked, for tests and logs.
func (l *authLimiter) state(key string) (failures int, next time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.peers[key]; e != nil {
		p := e.Value.(*authPeer)
		return p.failures, p.next
	}
	return 0, time.Time{}
}
