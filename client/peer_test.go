package client_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/client"
)

// Options.CheckPeer vets every new connection on a unix socket, the JSON
// exchanges' (the client's pool) and the streamed requests' (net/http's
// transport) alike: a refused connection carries no request, and the
// request fails with a *PeerError wrapping CheckPeer's error, not as an
// unreachable server.
func TestCheckPeerRefusesBeforeAnyRequest(t *testing.T) {
	ctx := t.Context()
	var requests atomic.Int64
	handler := func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusInternalServerError)
	}
	errNotYours := errors.New("not your server")
	var checked atomic.Int64
	f := newFakeServer(t, &client.Options{CheckPeer: func(conn *net.UnixConn) error {
		checked.Add(1)
		if conn.RemoteAddr() == nil {
			t.Error("CheckPeer got a connection without a peer")
		}
		return errNotYours
	}}, handler)

	calls := map[string]func() error{
		"health (a JSON exchange)": func() error { _, err := f.c.Health(ctx); return err },
		"put object (a streamed body)": func() error {
			_, err := f.c.PutObject(ctx, "k", strings.NewReader("secret bytes"), sbxdb.PutObjectOptions{Size: int64(len("secret bytes"))})
			return err
		},
	}
	for name, call := range calls {
		before := checked.Load()
		err := call()
		var pe *client.PeerError
		if !errors.As(err, &pe) || !errors.Is(err, errNotYours) || errors.Is(err, client.ErrUnreachable) {
			t.Errorf("%s: %v; want a *client.PeerError of CheckPeer's error", name, err)
		}
		if checked.Load() == before {
			t.Errorf("%s: CheckPeer was not called", name)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("the refused server received %d requests", n)
	}
}

// A connection CheckPeer accepts carries requests as without it.
func TestCheckPeerAccepts(t *testing.T) {
	var checked atomic.Int64
	f := newFakeServer(t, &client.Options{CheckPeer: func(*net.UnixConn) error {
		checked.Add(1)
		return nil
	}}, head)
	for range 3 {
		if _, err := f.c.Head(t.Context(), "t"); err != nil {
			t.Fatal(err)
		}
	}
	if n, acc := checked.Load(), f.accepted.Load(); n != acc || n == 0 {
		t.Fatalf("CheckPeer ran %d times for %d connections", n, acc)
	}
}
