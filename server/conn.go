package server

import (
	"container/list"
	"context"
	"net"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb/internal/proc"
)

// connInfo is what the server knows of the connection a request came on.
type connInfo struct {
	// Unix is a unix-socket connection: a local user who could open the
	// socket (mode 0600), trusted with directories on this machine.
	Unix bool
	// PeerPID is the connecting process's pid (SO_PEERCRED) on a unix
	// socket, 0 where unknown.
	PeerPID int
	// Peer is the connecting process as a lease records its holder
	// (proc.Of(PeerPID), read when the connection was accepted, while the
	// process certainly ran); zero where PeerPID is unknown.
	Peer proc.Identity
	// Conn is the connection's socket, unwrapped (rawConn).
	Conn net.Conn
	// tracked is the connection as the server's connLimiter counts it;
	// nil for a connection not accepted by Serve (httptest).
	tracked *trackedConn
}

// authenticated marks the connection as having sent an authenticated
// request: the connLimiter neither closes it for want of one nor for room.
func (c connInfo) authenticated() {
	if c.tracked != nil {
		c.tracked.authenticated()
	}
}

type connKey struct{}

// ConnContext records what the server knows of c in ctx; an http.Server
// serving this Server must set it as its ConnContext. A connection whose
// local address is a unix socket counts as one, wrapped or not; its peer
// is known where the platform tells (Linux: SO_PEERCRED).
func (s *Server) ConnContext(ctx context.Context, c net.Conn) context.Context {
	info := connInfo{Conn: rawConn(c)}
	info.tracked, _ = c.(*trackedConn)
	if c.LocalAddr() != nil && c.LocalAddr().Network() == "unix" {
		info.Unix = true
		info.PeerPID = peerPID(c)
		info.Peer = proc.Of(info.PeerPID)
	}
	return context.WithValue(ctx, connKey{}, info)
}

// connOf returns the connection information of a request's context; a
// request served without ConnContext (httptest) counts as TCP.
func connOf(ctx context.Context) connInfo {
	info, _ := ctx.Value(connKey{}).(connInfo)
	return info
}

// rawConn unwraps c to the connection that holds the socket: c itself, or
// what a wrapper (tls.Conn, a limiting listener's conn) returns from
// NetConn.
func rawConn(c net.Conn) net.Conn {
	for range 8 {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	return c
}

// Defaults of the connection limits (Options.MaxConns, AuthTimeout).
const (
	DefaultMaxConns    = 1024
	DefaultAuthTimeout = 10 * time.Second
	minMaxConns        = 16
)

// MaxConnsFor returns the default cap on open connections for a process
// that may hold nofile descriptors: DefaultMaxConns, or half of nofile
// when that is less (the other half left to the store, its packs and test
// stores), and never less than 16.
func MaxConnsFor(nofile uint64) int {
	return int(max(min(DefaultMaxConns, nofile/2), minMaxConns))
}

// connLimiter caps the connections open at once on a server's listeners,
// all of them together (they draw on one process's descriptors), and
// closes a TCP connection that has not sent an authenticated request
// within its deadline. A connection accepted at the cap takes the place of
// the oldest connection still unauthenticated, which is closed; only when
// every open connection has authenticated is the new one closed instead.
// So idle connections that never authenticate cannot keep an
// authenticated client out: they are at most max, and each lives at most
// the deadline. A unix socket's connections are authenticated from the
// start (whoever can open the socket is trusted) and only count.
type connLimiter struct {
	max      int
	deadline time.Duration
	closed   func(reason string) // counts a connection closed by the limiter

	mu      sync.Mutex
	open    int       // connections counted, at most max
	pending list.List // of *trackedConn not yet authenticated, oldest first
}

func newConnLimiter(maxConns int, deadline time.Duration, closed func(string)) *connLimiter {
	return &connLimiter{max: maxConns, deadline: deadline, closed: closed}
}

// Why the limiter closed a connection (sbxdb_connections_closed_total).
const (
	closedAuthTimeout = "auth_timeout" // no authenticated request within the deadline
	closedEvicted     = "evicted"      // the oldest unauthenticated one, for a new one at the cap
	closedRefused     = "refused"      // a new one at the cap, every open one authenticated
)

// openConns returns the connections counted now.
func (l *connLimiter) openConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// listener returns ln with its connections counted by l.
func (l *connLimiter) listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: l, trusted: ln.Addr().Network() == "unix"}
}

// limitListener is a listener whose connections a connLimiter counts.
type limitListener struct {
	net.Listener
	l       *connLimiter
	trusted bool // a unix socket
}

// Accept returns the next connection the limiter admits: one accepted at
// the cap when every open connection has authenticated is closed, and
// Accept waits for the next.
func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := ll.l.admit(c, ll.trusted); tc != nil {
			return tc, nil
		}
	}
}

// admit counts c, making room at the cap by closing the oldest
// unauthenticated connection; it closes c and returns nil when there is
// none.
func (l *connLimiter) admit(c net.Conn, trusted bool) *trackedConn {
	tc := &trackedConn{Conn: c, l: l, counted: true}
	l.mu.Lock()
	var victim *trackedConn
	if l.open >= l.max {
		e := l.pending.Front()
		if e == nil {
			l.mu.Unlock()
			l.closed(closedRefused) // counted before the close anyone may see
			c.Close()
			return nil
		}
		// The victim's place passes to c: l.open stays as it is.
		victim = e.Value.(*trackedConn)
		l.pending.Remove(e)
		victim.pending, victim.counted = nil, false
	} else {
		l.open++
	}
	if !trusted {
		tc.pending = l.pending.PushBack(tc)
		tc.timer = time.AfterFunc(l.deadline, tc.expire)
	}
	l.mu.Unlock()
	if victim != nil {
		victim.timer.Stop()
		l.closed(closedEvicted)
		victim.Conn.Close()
	}
	return tc
}

// trackedConn is a connection a connLimiter counts.
type trackedConn struct {
	net.Conn
	l *connLimiter
	// Under l.mu: its element of l.pending while unauthenticated, and
	// whether it still counts in l.open.
	pending *list.Element
	counted bool
	timer   *time.Timer // the deadline to authenticate; nil on a unix socket
}

// NetConn returns the connection underneath, for rawConn.
func (tc *trackedConn) NetConn() net.Conn { return tc.Conn }

// authenticated takes tc off the unauthenticated ones.
func (tc *trackedConn) authenticated() {
	tc.l.mu.Lock()
	was := tc.pending != nil
	if was {
		tc.l.pending.Remove(tc.pending)
		tc.pending = nil
	}
	tc.l.mu.Unlock()
	if was {
		tc.timer.Stop()
	}
}

// expire closes tc when its deadline passes before it authenticated.
func (tc *trackedConn) expire() {
	tc.l.mu.Lock()
	was := tc.pending != nil
	if was {
		tc.l.pending.Remove(tc.pending)
		tc.pending = nil
	}
	tc.l.mu.Unlock()
	if was {
		// Counted first: whoever sees the connection gone (its server
		// goroutine, the peer) sees the count that says why.
		tc.l.closed(closedAuthTimeout)
		tc.Conn.Close()
	}
}

// Close closes the connection and stops counting it.
func (tc *trackedConn) Close() error {
	tc.l.mu.Lock()
	if tc.pending != nil {
		tc.l.pending.Remove(tc.pending)
		tc.pending = nil
	}
	if tc.counted {
		tc.counted = false
		tc.l.open--
	}
	tc.l.mu.Unlock()
	if tc.timer != nil {
		tc.timer.Stop()
	}
	return tc.Conn.Close()
}
