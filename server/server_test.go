package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lease"
)

// openDB opens a new store for a test, closed when it ends.
func openDB(t *testing.T) *engine.DB {
	t.Helper()
	db, err := engine.Open(filepath.Join(t.TempDir(), "store"), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// tcp serves s on a loopback TCP port (httptest: no ConnContext, so every
// request counts as TCP) and returns a client sending token, and the base
// URL. The server is closed, its requests finished, when the test ends.
func tcp(t *testing.T, s *Server, token string) (*client.Client, string) {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL, &client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ts.URL
}

// unixServer is s served on a unix socket by Serve.
type unixServer struct {
	path   string
	c      *client.Client
	http   *http.Client // a plain client of the socket, for raw requests
	stop   context.CancelFunc
	served chan error // Serve's result
}

// serveUnix serves s on a unix socket until the test ends (or stop).
func serveUnix(t *testing.T, s *Server) *unixServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen("unix:" + path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	u := &unixServer{path: path, stop: cancel, served: make(chan error, 1)}
	go func() { u.served <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-u.served
	})
	u.c, err = client.New("unix:"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.c.Close() })
	u.http = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	t.Cleanup(u.http.CloseIdleConnections)
	return u
}

// reply is a raw response: its status, headers and body.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// code returns the error code of an error reply.
func (r reply) code(t *testing.T) string {
	t.Helper()
	var e ErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("status %d, body %q is no error body", r.status, r.body)
	}
	return e.Code
}

// do sends a raw request through hc to url.
func do(t *testing.T, hc *http.Client, method, url string, body string, header ...string) reply {
	t.Helper()
	r, err := send(hc, method, url, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send is do for another goroutine than the test's: it returns its error.
func send(hc *http.Client, method, url string, body string, header ...string) (reply, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return reply{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: reading the body: %w", method, url, err)
	}
	return reply{resp.StatusCode, resp.Header, b}, nil
}

// sent is the reply of a send, or its error.
type sent struct {
	reply
	err error
}

// sendAsync sends a request from a new goroutine; its reply arrives on
// the channel returned.
func sendAsync(hc *http.Client, method, url string) <-chan sent {
	ch := make(chan sent, 1)
	go func() {
		r, err := send(hc, method, url, "")
		ch <- sent{r, err}
	}()
	return ch
}

// lines splits a progress stream into its JSON objects, each with exactly
// one member, and checks that only the last is a result or an error.
func lines(t *testing.T, body []byte) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || len(m) != 1 {
			t.Fatalf("stream line %q is not one JSON member (%v)", sc.Text(), err)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		t.Fatal("empty stream")
	}
	for i, m := range out {
		_, progress := m["progress"]
		if last := i == len(out)-1; last == progress {
			t.Fatalf("line %d of %d is %v", i+1, len(out), m)
		}
	}
	return out
}

// tree writes n files of size bytes each (distinct contents) under a
// new directory and returns it.
func tree(t *testing.T, n, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("d%d", i%7), fmt.Sprintf("f%04d.txt", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b := bytes.Repeat([]byte(fmt.Sprintf("file %d\n", i)), max(1, size/8))
		if err := os.WriteFile(p, b[:min(len(b), size)], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// writer takes the writer lease of thread on db.
func writer(t *testing.T, db *engine.DB, thread string) lease.Writer {
	t.Helper()
	l, err := db.AcquireWriter(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	return l.Writer
}

// head returns the thread's head ("" for none).
func head(t *testing.T, db *engine.DB, thread string) string {
	t.Helper()
	h, err := db.Head(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// appendN appends n checkpoints without files to thread.
func appendN(t *testing.T, db *engine.DB, w lease.Writer, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		prev := head(t, db, w.ThreadID)
		cp := &chain.Checkpoint{ID: fmt.Sprintf("%s-%d", w.ThreadID, i), ThreadID: w.ThreadID, ParentID: prev,
			CreatedAt: int64(1_700_000_000_000 + i), Reason: chain.ReasonAutomatic}
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: prev, Writer: w}); err != nil {
			t.Fatal(err)
		}
	}
}

// wantCode fails unless err is a client error of code (and so matches
// sentinel).
func wantCode(t *testing.T, what string, err error, code string, sentinel error) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("%s: %v, want code %s", what, err, code)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Fatalf("%s: %v does not match %v", what, err, sentinel)
	}
}
