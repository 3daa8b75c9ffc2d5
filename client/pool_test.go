package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
)

// fakeServer serves handler on a unix socket and counts the connections
// it accepts.
type fakeServer struct {
	ts       *httptest.Server
	accepted atomic.Int64
	c        *client.Client
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func newFakeServer(t *testing.T, opts *client.Options, handler http.HandlerFunc) *fakeServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbxp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{}
	f.ts = httptest.NewUnstartedServer(handler)
	f.ts.Listener.Close()
	f.ts.Listener = countingListener{ln, &f.accepted}
	f.ts.Start()
	t.Cleanup(f.ts.Close)
	if f.c, err = client.New("unix:"+sock, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.c.Close() })
	return f
}

// head answers every request as POST /v1/checkpoints/head does.
func head(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"headId":"h"}` + "\n"))
}

// The JSON exchanges of a client on a unix socket reuse their
// connections: sequential calls one, concurrent calls one each at most.
func TestExchangesReuseConnections(t *testing.T) {
	ctx := t.Context()
	var got atomic.Value
	f := newFakeServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type"))
		head(w, r)
	})
	for range 20 {
		if h, err := f.c.Head(ctx, "t"); err != nil || h != "h" {
			t.Fatalf("Head = %q, %v; want h", h, err)
		}
	}
	if want := "POST /v1/checkpoints/head application/json"; got.Load() != want {
		t.Errorf("the server saw %q, want %q", got.Load(), want)
	}
	if n := f.accepted.Load(); n != 1 {
		t.Errorf("20 sequential calls took %d connections, want 1", n)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if _, err := f.c.Head(ctx, "t"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := f.accepted.Load(); n > 9 {
		t.Errorf("8 concurrent callers took %d connections, want at most 9", n)
	}
}

// A connection the server closed while it was idle is not used: the
// request goes out on a new one.
func TestExchangeAfterTheServerClosedIdleConnections(t *testing.T) {
	ctx := t.Context()
	var served atomic.Int64
	f := newFakeServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		head(w, r)
	})
	for i := range 3 {
		if _, err := f.c.Head(ctx, "t"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		f.ts.CloseClientConnections()
	}
	if n := served.Load(); n != 3 {
		t.Errorf("the server served %d requests, want 3", n)
	}
	if n := f.accepted.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

// A request the server read but did not answer is an error, not sent
// again: the server may have acted on it.
func TestUnansweredExchangeIsNotRepeated(t *testing.T) {
	ctx := t.Context()
	var served atomic.Int64
	f := newFakeServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1) == 2 {
			panic(http.ErrAbortHandler) // closes the connection unanswered
		}
		head(w, r)
	})
	if _, err := f.c.Head(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Head(ctx, "t"); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("unanswered request: %v, want ErrUnreachable", err)
	}
	if n := served.Load(); n != 2 {
		t.Fatalf("the server saw %d requests, want 2", n)
	}
	if h, err := f.c.Head(ctx, "t"); err != nil || h != "h" {
		t.Fatalf("the next call: %q, %v", h, err)
	}
}

// A response that closes its connection leaves it out of the pool.
func TestConnectionCloseIsHonoured(t *testing.T) {
	ctx := t.Context()
	f := newFakeServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		head(w, r)
	})
	for range 3 {
		if _, err := f.c.Head(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.accepted.Load(); n != 3 {
		t.Errorf("%d connections for 3 calls answered with Connection: close, want 3", n)
	}
}

// Cancelling the context or reaching Options.Timeout breaks an exchange
// off with the context's error, and the server's request sees its end.
func TestExchangeCancellation(t *testing.T) {
	release := make(chan struct{})
	ended := make(chan struct{}, 4)
	handler := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // net/http then watches the connection
		if r.URL.Path == "/v1/checkpoints/head" {
			select {
			case <-r.Context().Done():
				ended <- struct{}{}
				return
			case <-release:
			}
		}
		head(w, r)
	}
	defer close(release)

	f := newFakeServer(t, nil, handler)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { _, err := f.c.Head(ctx, "t"); errc <- err }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", err)
	}

	g := newFakeServer(t, &client.Options{Timeout: 50 * time.Millisecond}, handler)
	if _, err := g.c.Head(t.Context(), "t"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past the timeout: %v, want context.DeadlineExceeded", err)
	}
	<-ended // the server's request ended with the connection
}

// A server that answers before reading a whole request, and closes the
// connection, is heard: the client returns its answer, not the failed
// write.
func TestEarlyAnswerToALargeRequest(t *testing.T) {
	ctx := t.Context()
	f := newFakeServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		w.Write([]byte(`{"code":"SBXDB_TOO_LARGE","message":"request body over 1024 bytes"}`))
	})
	big := chain.Checkpoint{ID: "c", ThreadID: "t", CreatedAt: 1, Reason: chain.ReasonAutomatic,
		Conversation: []json.RawMessage{json.RawMessage(`"` + strings.Repeat("x", 8<<20) + `"`)}}
	_, err := f.c.Append(ctx, chain.AppendInput{Checkpoint: &big, Writer: chain.Writer{ThreadID: "t", OwnerToken: "o", Fence: 1}})
	if !errors.Is(err, chain.ErrTooLarge) {
		t.Fatalf("Append of 8 MiB to a server refusing it early: %v, want ErrTooLarge", err)
	}
	if h, err := f.c.Head(ctx, "t"); err == nil || !errors.Is(err, chain.ErrTooLarge) {
		t.Fatalf("the next call: %q, %v; want the server's answer again", h, err)
	}
}
