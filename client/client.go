// Package client connects a Go host to a store served by sbxdb serve
// (docs/API.md). A *Client implements the engine's interfaces
// (sbxdb.Store: CheckpointStore, Pruner, Forker, Transcripts, and
// Instances) over the API, so that a host moves between an embedded store
// and a served one by changing only how it gets its store; every error
// matches the sentinel the engine's would (errors.Is, chain.Code).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb/internal/wire"
)

// Options configure a Client. The zero value suits a unix socket.
type Options struct {
	// Token is sent as "Authorization: Bearer Token" (TCP listeners).
	Token string
	// Timeout bounds each request that is not streamed; 0 means none (the
	// caller's context decides).
	Timeout time.Duration
	// TestStore names the test store every request of the client is
	// served by (X-Sbxdb-Test-Store; CreateTestStore makes one), on a
	// server run with sbxdb serve --test. "" means the server's own
	// store.
	TestStore string
	// Now, when set with TestStore, is read at each request and sent as
	// the test store's clock (X-Sbxdb-Now, epoch milliseconds).
	Now func() time.Time
	// CheckPeer, when set, vets each new connection to a unix socket
	// before anything is written on it, so that no request (its token,
	// its body, a secret in it) reaches a server the caller does not
	// trust: the server's process is the other end of conn, whose peer
	// credentials name it. An error closes the connection and fails the
	// request with a *PeerError. It is not called for TCP, which has no
	// peer credentials.
	CheckPeer func(conn *net.UnixConn) error
}

// Client is a connection pool to one server. It is safe for concurrent
// use.
type Client struct {
	base    string // scheme://host, the prefix of every request URL
	host    string // the Host of a request through pool
	token   string
	timeout time.Duration
	// testStore and now are Options.TestStore and Options.Now.
	testStore string
	now       func() time.Time
	http      *http.Client
	// unix is set for a unix socket, whose JSON exchanges go through
	// pool (pool.go).
	unix bool
	pool connPool
}

// New returns a client of the server at addr: "unix:PATH", "tcp:HOST:PORT",
// or an http:// URL. It does not connect until the first request.
func New(addr string, opts *Options) (*Client, error) {
	if opts == nil {
		opts = &Options{}
	}
	if err := checkTestStore(opts); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	c := &Client{token: opts.Token, timeout: opts.Timeout, http: &http.Client{Transport: tr, Timeout: opts.Timeout},
		testStore: opts.TestStore, now: opts.Now}
	switch {
	case strings.HasPrefix(addr, "unix:"):
		path := strings.TrimPrefix(addr, "unix:")
		if path == "" {
			return nil, fmt.Errorf("client: %q names no socket", addr)
		}
		dial := unixDialer(path, opts.CheckPeer)
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }
		c.base = "http://sbxdb"
		c.unix, c.host, c.pool.path, c.pool.dial = true, "sbxdb", path, dial
	case strings.HasPrefix(addr, "tcp:"):
		c.base = "http://" + strings.TrimPrefix(addr, "tcp:")
	case strings.HasPrefix(addr, "http://"):
		c.base = strings.TrimSuffix(addr, "/")
	default:
		return nil, fmt.Errorf("client: address %q is not unix:PATH, tcp:HOST:PORT or http://HOST:PORT", addr)
	}
	return c, nil
}

// PeerError is a connection to a unix socket that Options.CheckPeer
// refused: nothing was written on it. Err is CheckPeer's error.
type PeerError struct {
	Path string // the socket
	Err  error
}

func (e *PeerError) Error() string { return e.Err.Error() }
func (e *PeerError) Unwrap() error { return e.Err }

// unixDialer returns the dialer of every connection a client makes to
// the socket at path: each one is passed to check (when set) before it is
// returned, and is closed when check refuses it.
func unixDialer(path string, check func(*net.UnixConn) error) func(context.Context) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) {
		nc, err := d.DialContext(ctx, "unix", path)
		if err != nil || check == nil {
			return nc, err
		}
		uc, ok := nc.(*net.UnixConn)
		if !ok {
			nc.Close()
			return nil, &PeerError{Path: path, Err: fmt.Errorf("client: the connection to %s is not a unix socket's", path)}
		}
		if err := check(uc); err != nil {
			nc.Close()
			return nil, &PeerError{Path: path, Err: err}
		}
		return nc, nil
	}
}

// Close closes the client's idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	c.pool.closeIdle()
	return nil
}

// newRequest builds a request of path (which starts with /) with the token.
func (c *Client) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.testStore != "" {
		req.Header.Set(wire.HeaderTestStore, c.testStore)
		if c.now != nil {
			req.Header.Set(wire.HeaderNow, strconv.FormatInt(c.now().UnixMilli(), 10))
		}
	}
	return req, nil
}

// do sends req and returns its response when the status is 2xx; any other
// status is decoded into the error the server sent (errors.go).
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return resp, nil
}

// exchanges reports whether send sends a request to path as an exchange
// (pool.go), which has written the whole request when it returns.
func (c *Client) exchanges(path string) bool { return c.unix && plainPath(path) }

// send sends a JSON request to path: a POST of body, or a GET when body
// is nil. It returns the response when the status is 2xx, as do does.
func (c *Client) send(ctx context.Context, path string, body []byte) (*http.Response, error) {
	method := http.MethodGet
	if body != nil {
		method = http.MethodPost
	}
	if c.exchanges(path) {
		resp, err := c.exchange(ctx, method, path, body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode/100 != 2 {
			defer resp.Body.Close()
			return nil, responseError(resp)
		}
		return resp, nil
	}
	var rb io.Reader
	if body != nil {
		rb = bytes.NewReader(body)
	}
	req, err := c.newRequest(ctx, method, path, rb)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.do(req)
}

// call posts in as JSON to path (GET when in is nil) and decodes the
// response into out (unless out is nil).
func (c *Client) call(ctx context.Context, path string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: encoding the request to %s: %w", path, err)
		}
		body = b
	}
	return c.post(ctx, path, body, out)
}
