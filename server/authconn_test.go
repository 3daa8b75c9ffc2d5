package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/client"
)

// fakeWaits replaces the limiter's clock and sleeper: the clock moves
// only when a request sleeps (by what it slept, while advance) and every
// sleep is recorded, so that the test sees the waits, not wall time.
type fakeWaits struct {
	mu      sync.Mutex
	now     time.Time
	slept   []time.Duration
	advance bool
}

func (f *fakeWaits) install(l *authLimiter) {
	f.now, f.advance = time.Unix(1_000_000, 0), true
	l.now = func() time.Time {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.now
	}
	l.sleep = func(_ context.Context, d time.Duration) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.slept = append(f.slept, d)
		if f.advance {
			f.now = f.now.Add(d)
		}
		return nil
	}
}

func (f *fakeWaits) take() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.slept
	f.slept = nil
	return s
}

// TestAuthFailuresBackOff: each wrong token from a peer doubles the wait
// before that peer's next check (10 ms, 20 ms, ...), the failures are
// counted in /metrics, a request whose turn is more than 5 s off is
// refused unchecked with Retry-After, another peer is not slowed, and the
// right token, once its turn comes, is served and forgets the failures.
func TestAuthFailuresBackOff(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	s := New(openDB(t), Options{Token: token})
	var f fakeWaits
	f.install(s.auth)
	_, url := tcp(t, s, "")
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

	const n = 6
	for i := range n {
		if r := do(t, httpClient, "GET", url+"/v1/stats", "", bearer("wrong")...); r.status != 401 || r.code(t) != CodeUnauthorized {
			t.Fatalf("wrong token %d: %d %s", i, r.status, r.body)
		}
	}
	got := f.take()
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	if fails, next := s.auth.state("127.0.0.1"); fails != n || next.Sub(s.auth.now()) != 320*time.Millisecond {
		t.Fatalf("peer state: %d failures, next check in %s; want %d, 320ms", fails, next.Sub(s.auth.now()), n)
	}
	if v := metric(t, s, "sbxdb_auth_failures_total"); v != "6" {
		t.Errorf("sbxdb_auth_failures_total %s, want %d", v, n)
	}

	// Another peer, with the token, neither waits nor is refused.
	req := httptest.NewRequest("GET", "/v1/stats", nil)
	req.RemoteAddr = "192.0.2.7:4000"
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 200 || len(f.take()) != 0 {
		t.Fatalf("another peer with the token: %d %s", rec.Code, rec.Body)
	}

	// Requests whose turn is more than 5 s off are refused unchecked.
	f.mu.Lock()
	f.advance = false
	f.mu.Unlock()
	refused := 0
	for range 8 {
		r := do(t, httpClient, "GET", url+"/v1/stats", "", bearer("wrong")...)
		if r.status != 401 {
			t.Fatalf("wrong token: %d", r.status)
		}
		if r.header.Get("Retry-After") != "" {
			refused++
		}
	}
	fails, _ := s.auth.state("127.0.0.1")
	if refused == 0 || fails+refused != n+8 || metric(t, s, "sbxdb_auth_throttled_total") != strconv.Itoa(refused) {
		t.Fatalf("%d refused unchecked, %d failures, throttled counter %s", refused, fails, metric(t, s, "sbxdb_auth_throttled_total"))
	}

	// The right token, once its turn comes, is served and resets the peer.
	f.mu.Lock()
	f.advance = true
	f.now = f.now.Add(time.Minute)
	f.mu.Unlock()
	f.take()
	if r := do(t, httpClient, "GET", url+"/v1/stats", "", bearer(token)...); r.status != 200 {
		t.Fatalf("the right token after the failures: %d %s", r.status, r.body)
	}
	if fails, _ := s.auth.state("127.0.0.1"); fails != 0 {
		t.Errorf("%d failures remembered after a success", fails)
	}
}

// metric returns the value of the series name in s's /metrics, read by
// another peer with the token, or "" when it is absent.
func metric(t *testing.T, s *Server, name string) string {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.RemoteAddr = "192.0.2.99:1"
	req.Header.Set("Authorization", "Bearer "+s.opts.Token)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("metrics: %d", rec.Code)
	}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestAuthLimiterBounded: the limiter remembers at most its maximum of
// peers, forgetting the least recently seen, and a peer quiet for
// authForget is forgotten.
func TestAuthLimiterBounded(t *testing.T) {
	l := newAuthLimiter()
	var f fakeWaits
	f.install(l)
	l.max = 3
	for _, p := range []string{"a", "b", "c", "d"} {
		l.failed(p)
	}
	if n, _ := l.state("a"); n != 0 || len(l.peers) != 3 || l.lru.Len() != 3 {
		t.Fatalf("a: %d failures, %d peers", n, len(l.peers))
	}
	f.now = f.now.Add(authForget + time.Second)
	if d, err := l.wait(context.Background(), "d"); d != 0 || err != nil || len(f.take()) != 0 {
		t.Fatalf("a peer quiet for %s still waits: %s, %v", authForget, d, err)
	}
	if n, _ := l.state("d"); n != 0 {
		t.Errorf("d: %d failures after %s of quiet", n, authForget)
	}
	for _, tc := range []struct{ addr, key string }{
		{"127.0.0.1:5", "127.0.0.1"},
		{"[::ffff:127.0.0.1]:5", "127.0.0.1"},
		{"[2001:db8:1:2:3:4:5:6]:7", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1%eth0]:7", "2001:db8:1:2::/64"},
	} {
		if k := peerKey(tc.addr); k != tc.key {
			t.Errorf("peerKey(%q) = %q, want %q", tc.addr, k, tc.key)
		}
	}
}

// serveTCP serves s by Serve on a loopback port until the test ends and
// returns the address.
func serveTCP(t *testing.T, s *Server) string {
	t.Helper()
	l, err := Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return l.Addr().String()
}

// closedByPeer waits until the server closes c (a read ends in EOF or a
// reset) and reports whether it did within a minute.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleConnectionsCannotLockOutAClient: with the connections capped at
// 50, 60 connections that were refused a request and then idle (kept
// alive) leave room for an authenticated client: each connection past the
// cap closes the oldest unauthenticated one, so the open ones stay at 50,
// and the client's request is served.
func TestIdleConnectionsCannotLockOutAClient(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	const maxConns, idle = 50, 60
	s := New(openDB(t), Options{Token: token, MaxConns: maxConns, AuthTimeout: time.Hour})
	var f fakeWaits
	f.install(s.auth)
	addr := serveTCP(t, s)
	var conns []net.Conn
	for i := range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		io.WriteString(c, "GET /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 401 {
			t.Fatalf("connection %d, a wrong token: %v, %v", i, resp, err)
		}
		resp.Body.Close()
	}
	c, err := client.New("tcp:"+addr, &client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Stats(context.Background()); err != nil {
		t.Fatalf("an authenticated request behind %d idle connections: %v", idle, err)
	}
	if n := s.conns.openConns(); n != maxConns {
		t.Errorf("%d connections open, want the cap, %d", n, maxConns)
	}
	// The client's connection and the 10 past the cap each closed the
	// oldest idle one.
	for i, c := range conns[:idle-maxConns+1] {
		if !closedByPeer(c) {
			t.Fatalf("idle connection %d of %d is still open", i, idle)
		}
	}
	if v := metric(t, s, `sbxdb_connections_closed_total{reason="evicted"}`); v != strconv.Itoa(idle-maxConns+1) {
		t.Errorf("evicted %s, want %d", v, idle-maxConns+1)
	}
}

// TestUnauthenticatedConnectionsClosed: a TCP connection that sends no
// authenticated request within AuthTimeout is closed, idle or after a
// refused request; one that authenticated is not; a unix socket's is not.
func TestUnauthenticatedConnectionsClosed(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	s := New(openDB(t), Options{Token: token, AuthTimeout: 100 * time.Millisecond})
	addr := serveTCP(t, s)
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	refused, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	io.WriteString(refused, "GET /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n")
	authed, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	io.WriteString(authed, "GET /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+token+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(authed), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("authenticated request: %v, %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !closedByPeer(idle) {
		t.Fatal("the idle connection is still open")
	}
	io.Copy(io.Discard, refused) // the 401, then the close
	if s.conns.openConns() != 1 {
		// The closed ones stop counting once the server has seen them go.
		deadline := time.Now().Add(time.Minute)
		for s.conns.openConns() != 1 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n := s.conns.openConns(); n != 1 {
		t.Errorf("%d connections open, want the authenticated one", n)
	}
	if v := metric(t, s, `sbxdb_connections_closed_total{reason="auth_timeout"}`); v != "2" {
		t.Errorf("closed for want of authentication: %s, want 2", v)
	}
	authed.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := authed.Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("the authenticated connection: %v, want it open", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
