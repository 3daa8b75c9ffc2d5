package client

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb/internal/wire"
)

// connPool carries the API's JSON exchanges (call and post) on a unix
// socket: HTTP/1.1 over a pool of idle connections, each request written
// and its response read on the caller's goroutine. net/http's Transport
// gives every connection a reader and a writer goroutine and hands each
// request and response between them, which costs a small exchange about
// as much CPU as the server's whole HTTP side. Blobs and progress streams,
// and every request over TCP, keep net/http.
//
// A connection is reused only after its response was read to the end
// without error and did not ask to close. One idle for over a second is
// probed first (a read that must find nothing), and one idle past
// idleTimeout is closed: the server closes idle connections (after
// 120 s, and when it stops). A request whose connection turns out closed
// before any of it was written is sent again on a new one; a request
// written but unanswered is an error, as with net/http: the server may
// have acted on it.
type connPool struct {
	path string // the socket's path
	// dial makes a new connection to path (unixDialer); nil dials it
	// unchecked.
	dial func(context.Context) (net.Conn, error)

	mu   sync.Mutex
	idle []*poolConn // most recently used last
}

// Limits of the pool, as client.New sets net/http's.
const (
	maxIdleConns = 256
	idleTimeout  = 90 * time.Second
)

// probeAfter is how long a connection may stay idle and be reused without
// a probe (a variable for tests).
var probeAfter = time.Second

// poolConn is one connection of the pool.
type poolConn struct {
	nc     net.Conn
	br     *bufio.Reader
	head   []byte    // the request line and headers being written
	idleAt time.Time // when it was put back
}

// get returns an idle connection that is still open, or a new one;
// reused says which.
func (p *connPool) get(ctx context.Context) (pc *poolConn, reused bool, err error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		pc = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		idle := time.Since(pc.idleAt)
		if idle < probeAfter || idle < idleTimeout && pc.open() {
			return pc, true, nil
		}
		pc.nc.Close()
	}
	dial := p.dial
	if dial == nil {
		dial = unixDialer(p.path, nil)
	}
	nc, err := dial(ctx)
	if err != nil {
		return nil, false, err
	}
	return &poolConn{nc: nc, br: bufio.NewReaderSize(nc, 4<<10)}, false, nil
}

// put returns pc to the pool, or closes it when the pool is full.
func (p *connPool) put(pc *poolConn) {
	pc.idleAt = time.Now()
	p.mu.Lock()
	if len(p.idle) < maxIdleConns {
		p.idle = append(p.idle, pc)
		pc = nil
	}
	p.mu.Unlock()
	if pc != nil {
		pc.nc.Close()
	}
}

// closeIdle closes the idle connections.
func (p *connPool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, pc := range idle {
		pc.nc.Close()
	}
}

// open reports whether the server has left pc open: nothing is due on an
// idle connection, so anything to read, end of file included, means that
// it is done with.
func (pc *poolConn) open() bool {
	return pc.br.Buffered() == 0 && idleOpen(pc.nc)
}

// plainPath reports whether path can be written in a request line as it
// is: the API's own paths and queries, which need no escaping.
func plainPath(path string) bool {
	if path == "" || path[0] != '/' {
		return false
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// exchange sends one request (a POST of body as JSON, or a GET when body
// is nil) on a pooled connection and returns the response, whatever its
// status; closing its body puts the connection back. Errors are as do's.
func (c *Client) exchange(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cancel := context.CancelFunc(func() {})
	if c.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	for first := true; ; first = false {
		pc, reused, err := c.pool.get(ctx)
		if err != nil {
			cancel()
			return nil, transportError(ctxErr(ctx, err))
		}
		// Cancellation breaks off the exchange at once: the connection
		// is then closed, never reused.
		stop := context.AfterFunc(ctx, func() { pc.nc.SetDeadline(time.Unix(1, 0)) })
		pc.head = c.appendHead(pc.head[:0], method, path, body)
		bufs := net.Buffers{pc.head, body}
		n, werr := bufs.WriteTo(pc.nc)
		if werr != nil && n == 0 && reused && first && ctx.Err() == nil {
			stop()
			pc.nc.Close()
			continue // closed while idle: nothing of the request left
		}
		// A server may answer before reading the whole request (a body
		// too large) and close the connection: its answer still counts.
		resp, err := http.ReadResponse(pc.br, &http.Request{Method: method})
		if err != nil {
			stop()
			pc.nc.Close()
			cancel()
			if werr != nil {
				err = werr
			}
			return nil, transportError(ctxErr(ctx, err))
		}
		resp.Body = &pooledBody{body: resp.Body, pool: &c.pool, pc: pc, keep: !resp.Close && werr == nil,
			ctx: ctx, stop: stop, cancel: cancel}
		return resp, nil
	}
}

// ctxErr is ctx's error when ctx has ended, which is then what broke err's
// exchange off, else err.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// appendHead appends the request line and headers of a request as
// net/http writes them for call and post.
func (c *Client) appendHead(dst []byte, method, path string, body []byte) []byte {
	dst = append(dst, method...)
	dst = append(dst, ' ')
	dst = append(dst, path...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, c.host...)
	dst = append(dst, "\r\nUser-Agent: Go-http-client/1.1\r\n"...)
	if body != nil {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(len(body)), 10)
		dst = append(dst, "\r\nContent-Type: application/json\r\n"...)
	}
	if c.token != "" {
		dst = append(dst, "Authorization: Bearer "...)
		dst = append(dst, c.token...)
		dst = append(dst, "\r\n"...)
	}
	if c.testStore != "" {
		dst = append(dst, wire.HeaderTestStore+": "...)
		dst = append(dst, c.testStore...)
		dst = append(dst, "\r\n"...)
		if c.now != nil {
			dst = append(dst, wire.HeaderNow+": "...)
			dst = strconv.AppendInt(dst, c.now().UnixMilli(), 10)
			dst = append(dst, "\r\n"...)
		}
	}
	return append(dst, "\r\n"...)
}

// pooledBody is the body of an exchange's response. Close reads what is
// left of it (a JSON response, small) and puts the connection back when
// the response ended cleanly, else closes the connection.
type pooledBody struct {
	body   io.ReadCloser
	pool   *connPool
	pc     *poolConn
	keep   bool // the response did not ask to close the connection
	ctx    context.Context
	stop   func() bool
	cancel context.CancelFunc
	done   bool
}

// drainLimit bounds what Close reads of a body left unread to reuse its
// connection.
const drainLimit = 256 << 10

func (b *pooledBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil && err != io.EOF {
		err = ctxErr(b.ctx, err)
	}
	return n, err
}

func (b *pooledBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	left, err := io.Copy(io.Discard, io.LimitReader(b.body, drainLimit))
	ended := err == nil && left < drainLimit
	if !ended {
		b.pc.nc.Close() // before the body's Close, which would read it all
	}
	b.body.Close()
	live := b.stop() && b.ctx.Err() == nil // else its deadline broke it off
	b.cancel()
	if ended && b.keep && live {
		b.pool.put(b.pc)
	} else if ended {
		b.pc.nc.Close()
	}
	return nil
}
