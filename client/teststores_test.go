package client_test

// Tests of the client's test mode: CreateTestStore, DeleteTestStore, and
// Options.TestStore and Options.Now sent with every request, on a unix
// socket (pooled exchanges and net/http requests both) and on TCP.

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/server"
)

// serveTestMode serves a store in test mode on network and returns its
// address as client.New takes it.
func serveTestMode(t *testing.T, network string) string {
	t.Helper()
	t.Setenv("TMPDIR", t.TempDir())
	addr := "127.0.0.1:0"
	if network == "unix" {
		dir, err := os.MkdirTemp("", "sbxc")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		addr = filepath.Join(dir, "s.sock")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(openDB(t), server.Options{TestStores: true})
	ts := httptest.NewUnstartedServer(srv)
	ts.Listener.Close()
	ts.Listener = ln
	ts.Config.ConnContext = srv.ConnContext
	ts.Start()
	t.Cleanup(func() {
		ts.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return network + ":" + ln.Addr().String()
}

func TestTestStores(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			addr := serveTestMode(t, network)
			ctx := context.Background()
			admin, err := client.New(addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			_, err = admin.CreateTestStore(ctx, client.TestStoreOptions{LeaseDuration: 100 * time.Millisecond, RenewAfter: 100 * time.Millisecond})
			if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "RenewAfter 100ms must be below LeaseDuration 100ms") {
				t.Errorf("create with renewAfter = lease: %v", err)
			}
			id, err := admin.CreateTestStore(ctx, client.TestStoreOptions{LeaseDuration: 100 * time.Millisecond, RenewAfter: 25 * time.Millisecond})
			if err != nil || len(id) != 32 {
				t.Fatalf("create: %q, %v", id, err)
			}
			var clock atomic.Int64
			clock.Store(1000)
			c, err := client.New(addr, &client.Options{TestStore: id, Now: func() time.Time { return time.UnixMilli(clock.Load()) }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()

			// A pooled exchange on a unix socket (acquire) and a net/http
			// request (a blob) both carry the headers.
			l, err := c.AcquireWriter(ctx, "t")
			if err != nil || l.Fence != 1 || !l.ExpiresAt().Equal(time.UnixMilli(1100)) || l.RenewAfter != 25*time.Millisecond {
				t.Fatalf("acquire at 1000: %+v, %v", l, err)
			}
			clock.Store(1101)
			info, err := c.PutObject(ctx, "obj/a", strings.NewReader("hi"), sbxdb.PutObjectOptions{Size: 2})
			if err != nil || info.Uploaded != 1101 {
				t.Errorf("put at 1101: %+v, %v", info, err)
			}
			if l2, err := c.AcquireWriter(ctx, "t"); err != nil || l2.Fence != 2 || !l2.ExpiresAt().Equal(time.UnixMilli(1201)) {
				t.Errorf("takeover at 1101: %+v, %v", l2, err)
			}
			if _, err := admin.StatObject(ctx, "obj/a"); !errors.Is(err, sbxdb.ErrBlobNotFound) {
				t.Errorf("the served store holds the test store's object: %v", err)
			}

			if err := admin.DeleteTestStore(ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := admin.DeleteTestStore(ctx, id); err != nil {
				t.Errorf("a second delete: %v", err)
			}
			_, err = c.Head(ctx, "t")
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Code != server.CodeNoTestStore || !strings.Contains(ce.Message, id) {
				t.Errorf("head in a deleted store: %v, want %s naming it", err, server.CodeNoTestStore)
			}
		})
	}
}

func TestTestStoreThatIsNoHeaderValue(t *testing.T) {
	for _, id := range []string{"a\r\nX-Other: 1", "a\x00", "é"} {
		if _, err := client.New("unix:/nowhere", &client.Options{TestStore: id}); err == nil {
			t.Errorf("client.New with TestStore %q: no error", id)
		}
	}
}
