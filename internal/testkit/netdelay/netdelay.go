// Package netdelay is a TCP proxy on loopback that adds a fixed one-way
// delay to every byte, to measure sbxdb across a simulated network: put
// it in front of PostgreSQL or an S3 server, and point the client at
// Proxy.Addr instead of the server.
//
// Each connection has two directions, each a queue: a reader takes a
// chunk off one socket as soon as it arrives and stamps it with its
// arrival time; a writer sends each chunk to the other socket no earlier
// than that time + the delay, in arrival order. A chunk's release does
// not wait for the chunks behind it, so many chunks are in flight at once
// and throughput is not capped by the delay (up to Window bytes in flight
// per direction); the delay only adds latency, as a long wire does.
//
// The proxy counts, per connection, the round trips its clients start: a
// client-to-server chunk that follows a server-to-client chunk (or opens
// the connection) begins one. Requests a client sends back to back
// without waiting for a reply (a pipelined batch) count once, as they
// cost one wait on a real network.
//
// It listens on 127.0.0.1 and forwards only to loopback addresses: load
// and latency tests on this workplace send traffic to loopback only.
package netdelay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ChunkSize bounds one read, hence one queued chunk.
const ChunkSize = 64 << 10

// Window bounds the chunks queued per direction of one connection: a
// reader that gets this far ahead of its writer waits, as a full TCP
// window makes a sender wait.
const Window = 256

// Proxy forwards every connection accepted on its listener to one target
// address, delaying each direction by Delay.
type Proxy struct {
	target string
	delay  atomic.Int64 // nanoseconds
	ln     net.Listener

	roundTrips atomic.Int64
	up, down   atomic.Int64 // bytes client to server, server to client
	conns      atomic.Int64 // connections accepted

	mu     sync.Mutex
	open   map[*pair]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Listen starts a proxy on a free port of 127.0.0.1 forwarding to target
// ("host:port", a loopback address) with a one-way delay of delay in each
// direction.
func Listen(target string, delay time.Duration) (*Proxy, error) {
	if err := checkLoopback(target); err != nil {
		return nil, err
	}
	if delay < 0 {
		return nil, fmt.Errorf("netdelay: negative delay %v", delay)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, open: map[*pair]struct{}{}}
	p.delay.Store(int64(delay))
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// checkLoopback refuses a target that does not resolve to loopback
// addresses only.
func checkLoopback(target string) error {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("netdelay: target %q: %w", target, err)
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return fmt.Errorf("netdelay: target %q: %w", target, err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("netdelay: target %q resolves to %v, not a loopback address", target, ip)
		}
	}
	return nil
}

// Addr is the address clients connect to, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Delay returns the one-way delay.
func (p *Proxy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// SetDelay changes the one-way delay for chunks read from now on; chunks
// already queued keep their release time, and order is kept regardless.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(max(d, 0))) }

// Stats are a proxy's counters since Listen.
type Stats struct {
	// RoundTrips counts client-to-server chunks that follow a
	// server-to-client chunk on their connection, or open it.
	RoundTrips int64
	// Up and Down count bytes client to server and server to client.
	Up, Down int64
	// Conns counts connections accepted.
	Conns int64
}

// Sub returns s - o, field by field.
func (s Stats) Sub(o Stats) Stats {
	return Stats{RoundTrips: s.RoundTrips - o.RoundTrips, Up: s.Up - o.Up, Down: s.Down - o.Down, Conns: s.Conns - o.Conns}
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{RoundTrips: p.roundTrips.Load(), Up: p.up.Load(), Down: p.down.Load(), Conns: p.conns.Load()}
}

// Close stops accepting, closes every open connection, and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	err := p.ln.Close()
	for c := range p.open {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.conns.Add(1)
		p.wg.Add(1)
		go p.serve(client)
	}
}

// pair is one proxied connection.
type pair struct {
	client, server net.Conn
	once           sync.Once
	// lastDown says the last chunk seen was server to client: the next
	// client chunk starts a round trip. It starts true: the first client
	// chunk starts one.
	lastDown atomic.Bool
}

func (c *pair) close() {
	c.once.Do(func() {
		c.client.Close()
		if c.server != nil {
			c.server.Close()
		}
	})
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	c := &pair{client: client}
	c.lastDown.Store(true)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		return
	}
	p.open[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.open, c)
		p.mu.Unlock()
	}()
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return // the client sees the connection close
	}
	p.mu.Lock()
	c.server = server
	closed := p.closed
	p.mu.Unlock()
	if closed {
		server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.pipe(c, client, server, func(n int) {
			p.up.Add(int64(n))
			if c.lastDown.Swap(false) {
				p.roundTrips.Add(1)
			}
		})
	}()
	go func() {
		defer wg.Done()
		p.pipe(c, server, client, func(n int) {
			p.down.Add(int64(n))
			c.lastDown.Store(true)
		})
	}()
	wg.Wait()
}

// chunk is bytes read at a time, to be written at release.
type chunk struct {
	b       []byte
	release time.Time
}

// pipe copies src to dst, each chunk no earlier than its arrival + the
// delay, in order; seen is called with each chunk's length as it is read.
// At src's end of stream, once every chunk is written, it half-closes
// dst, so that dst's reader sees the end too. A read or write error
// closes both sockets of the connection: the other direction ends too.
func (p *Proxy) pipe(c *pair, src, dst net.Conn, seen func(int)) {
	q := make(chan chunk, Window)
	done := make(chan struct{})
	go func() { // the writer
		defer close(done)
		for ch := range q {
			if d := time.Until(ch.release); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(ch.b); err != nil {
				c.close()
				for range q { // let the reader finish
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		} else {
			dst.Close()
		}
	}()
	buf := make([]byte, ChunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen(n)
			q <- chunk{b: append([]byte(nil), buf[:n]...), release: time.Now().Add(p.Delay())}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.close()
			}
			break
		}
	}
	close(q)
	<-done
}
