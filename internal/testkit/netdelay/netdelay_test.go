package netdelay

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"
)

// listen starts a loopback server running handle on each connection.
func listen(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

func proxy(t *testing.T, target string, d time.Duration) *Proxy {
	t.Helper()
	p, err := Listen(target, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute)) // a hang fails rather than stalls
	return c.(*net.TCPConn)
}

// reverse returns b's bytes in reverse order, so that what the server
// sends back differs from what it received.
func reverse(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[len(b)-1-i] = c
	}
	return out
}

// Bytes pass through unchanged both ways, many chunks at once, and the
// client's half-close reaches the server and the server's close the
// client, with and without a delay.
func TestBytesBothWaysAndClose(t *testing.T) {
	target := listen(t, func(c net.Conn) {
		b, err := io.ReadAll(c) // until the client's half-close
		if err != nil {
			return
		}
		c.Write(reverse(b))
	})
	for _, d := range []time.Duration{0, 2 * time.Millisecond} {
		p := proxy(t, target, d)
		msg := make([]byte, 3<<20+17)
		rand.Read(msg)
		c := dial(t, p)
		go func() {
			// Many writes of odd sizes: chunks of every size in the queue.
			for b := msg; len(b) > 0; {
				n := min(len(b), 1+len(b)%70001)
				c.Write(b[:n])
				b = b[n:]
			}
			c.CloseWrite()
		}()
		got, err := io.ReadAll(c) // until the server's close
		if err != nil {
			t.Fatalf("delay %v: %v", d, err)
		}
		if !bytes.Equal(got, reverse(msg)) {
			t.Fatalf("delay %v: got %d bytes back, not the %d sent, reversed", d, len(got), len(msg))
		}
		s := p.Stats()
		if s.Up != int64(len(msg)) || s.Down != int64(len(msg)) || s.Conns != 1 {
			t.Fatalf("delay %v: stats %+v, want %d bytes each way on 1 connection", d, s, len(msg))
		}
	}
}

// A server that closes first: the client reads what it sent, then EOF;
// a client that closes first: the server reads EOF.
func TestClosePropagates(t *testing.T) {
	serverSaw := make(chan error, 1)
	target := listen(t, func(c net.Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			serverSaw <- err
			return
		}
		if line == "bye\n" {
			c.Write([]byte("closing\n"))
			return // the deferred Close
		}
		_, err = io.ReadAll(c)
		serverSaw <- err // nil: EOF
	})
	p := proxy(t, target, time.Millisecond)

	c := dial(t, p)
	c.Write([]byte("bye\n"))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "closing\n" {
		t.Fatalf("server closed: read %q, %v; want its last line then EOF", got, err)
	}

	c2 := dial(t, p)
	c2.Write([]byte("stay\n"))
	c2.Close()
	select {
	case err := <-serverSaw:
		if err != nil {
			t.Fatalf("client closed: server read %v, want EOF", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("client closed: the server never saw EOF")
	}
}

// A request and its reply take at least twice the one-way delay, and
// each exchange counts one round trip; writes sent back to back without
// waiting count once.
func TestDelayAndRoundTrips(t *testing.T) {
	target := listen(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			c.Write([]byte(line))
		}
	})
	const d = 20 * time.Millisecond
	p := proxy(t, target, d)
	c := dial(t, p)
	r := bufio.NewReader(c)
	const exchanges = 5
	for i := range exchanges {
		start := time.Now()
		c.Write([]byte("ping\n"))
		line, err := r.ReadString('\n')
		if err != nil || line != "ping\n" {
			t.Fatalf("exchange %d: %q, %v", i, line, err)
		}
		if took := time.Since(start); took < 2*d {
			t.Fatalf("exchange %d took %v, less than twice the delay %v", i, took, d)
		}
	}
	if got := p.Stats().RoundTrips; got != exchanges {
		t.Fatalf("%d round trips counted, want %d", got, exchanges)
	}
	// A pipelined batch: three requests, then three replies.
	c.Write([]byte("a\n"))
	c.Write([]byte("b\n"))
	c.Write([]byte("c\n"))
	for _, want := range []string{"a\n", "b\n", "c\n"} {
		if line, err := r.ReadString('\n'); err != nil || line != want {
			t.Fatalf("pipelined: %q, %v; want %q", line, err, want)
		}
	}
	if got := p.Stats().RoundTrips; got != exchanges+1 {
		t.Fatalf("%d round trips after a pipelined batch, want %d", got, exchanges+1)
	}
}

// Many small writes arrive in order across many queued chunks.
func TestOrder(t *testing.T) {
	target := listen(t, func(c net.Conn) { io.Copy(c, c) })
	p := proxy(t, target, 5*time.Millisecond)
	c := dial(t, p)
	var want bytes.Buffer
	go func() {
		for i := range 2000 {
			b := []byte{byte(i), byte(i >> 8)}
			c.Write(b)
		}
		c.CloseWrite()
	}()
	for i := range 2000 {
		want.Write([]byte{byte(i), byte(i >> 8)})
	}
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("echo of 2,000 ordered writes: %d bytes, %v; want %d in order", len(got), err, want.Len())
	}
}

// Close ends open connections: a client blocked in a read returns.
func TestProxyCloseEndsConnections(t *testing.T) {
	target := listen(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	p := proxy(t, target, 0)
	c := dial(t, p)
	c.Write([]byte("x"))
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	p.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read after Close returned no error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a client's read still blocked after Close")
	}
}

// Only loopback targets: the proxy never sends traffic elsewhere.
func TestLoopbackOnly(t *testing.T) {
	for _, target := range []string{"10.1.2.3:5432", "192.0.2.1:80", "[2001:db8::1]:443"} {
		if p, err := Listen(target, 0); err == nil {
			p.Close()
			t.Errorf("Listen(%q) accepted a target off loopback", target)
		}
	}
	for _, target := range []string{"127.0.0.1:1", "[::1]:1", "localhost:1"} {
		p, err := Listen(target, 0)
		if err != nil {
			t.Errorf("Listen(%q): %v", target, err)
			continue
		}
		p.Close()
	}
}
