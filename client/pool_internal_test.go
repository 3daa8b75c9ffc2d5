package client

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// With every reuse probed, a connection the server left open is reused
// and one it closed is not: the probe, not a failed write, finds it.
func TestIdleConnectionsAreProbed(t *testing.T) {
	old := probeAfter
	probeAfter = 0
	t.Cleanup(func() { probeAfter = old })
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
	var conns atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"headId":"h"}`))
	}))
	ts.Listener.Close()
	ts.Listener = ln
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	c, err := New("unix:"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for range 5 {
		if _, err := c.Head(t.Context(), "t"); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("5 calls, each reuse probed, took %d connections, want 1", n)
	}
	ts.CloseClientConnections()
	// The probe must find the connection closed: a write to it is not
	// even tried.
	pc, reused, err := c.pool.get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pc.nc.Close()
	if reused {
		t.Fatal("the pool handed out a connection the server had closed")
	}
}
