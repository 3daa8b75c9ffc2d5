package engine_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/server"
	"github.com/sbxdb/sbxdb/storetest"
)

// The conformance kit through sbxdb serve: the store is the Go client of a
// server of an engine.DB in this process, over TCP (httptest) and over a
// unix socket. The kit's hooks reach below the API to that DB, as the
// embedded subject's do; they live here because the DB's test hooks
// (export_test.go) are visible only to this package's tests.

func TestServedConformanceTCP(t *testing.T)  { storetest.RunConformance(t, servedSubject("tcp")) }
func TestServedConformanceUnix(t *testing.T) { storetest.RunConformance(t, servedSubject("unix")) }
func TestServedForkConformanceTCP(t *testing.T) {
	storetest.RunForkConformance(t, servedSubject("tcp"))
}
func TestServedForkConformanceUnix(t *testing.T) {
	storetest.RunForkConformance(t, servedSubject("unix"))
}
func TestServedInstanceConformanceTCP(t *testing.T) {
	storetest.RunInstanceConformance(t, servedSubject("tcp"))
}
func TestServedInstanceConformanceUnix(t *testing.T) {
	storetest.RunInstanceConformance(t, servedSubject("unix"))
}

// served is a server of one DB on a fixed address, which Reopen restarts
// on the reopened DB so that the client and its leases keep working.
type served struct {
	network, addr string
	ts            *httptest.Server
}

// serve starts a server of db on network: a unix socket in a short
// directory (sun_path holds 108 bytes; t.TempDir() paths can be longer),
// or a loopback TCP port.
func serve(t *testing.T, network string, db *engine.DB) *served {
	t.Helper()
	s := &served{network: network, addr: "127.0.0.1:0"}
	if network == "unix" {
		dir, err := os.MkdirTemp("", "sbx")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		s.addr = filepath.Join(dir, "s.sock")
	}
	s.start(t, db)
	return s
}

func (s *served) start(t *testing.T, db *engine.DB) {
	t.Helper()
	if s.network == "unix" {
		os.Remove(s.addr) // the socket file a stopped server left
	}
	ln, err := net.Listen(s.network, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	srv := server.New(db, server.Options{})
	s.ts = httptest.NewUnstartedServer(srv)
	s.ts.Listener.Close()
	s.ts.Listener = ln
	s.ts.Config.ConnContext = srv.ConnContext
	s.ts.Start()
}

// stop closes the server once its requests are done.
func (s *served) stop() { s.ts.Close() }

// clientAddr is the address client.New takes.
func (s *served) clientAddr() string { return s.network + ":" + s.addr }

// servedStore is the client as the kit's store. An error a hook injects
// into a write cannot cross the wire as a Go value: the server answers
// SBXDB_INTERNAL with its text. servedStore gives such an error back
// joined with the injected one, so that the atomicity cases, which check
// errors.Is(err, injected), still test what they are for: that the
// failed write changed nothing.
type servedStore struct {
	*client.Client
	mu       sync.Mutex
	injected []error
}

func (s *servedStore) inject(err error) {
	s.mu.Lock()
	s.injected = append(s.injected, err)
	s.mu.Unlock()
}

func (s *servedStore) unwrap(err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != server.CodeInternal {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inj := range s.injected {
		if strings.Contains(ce.Message, inj.Error()) {
			return errors.Join(err, inj)
		}
	}
	return err
}

func (s *servedStore) Append(ctx context.Context, in chain.AppendInput) (string, error) {
	h, err := s.Client.Append(ctx, in)
	return h, s.unwrap(err)
}

func (s *servedStore) DeleteHead(ctx context.Context, threadID, checkpointID string, w lease.Writer) error {
	return s.unwrap(s.Client.DeleteHead(ctx, threadID, checkpointID, w))
}

func (s *servedStore) DeleteCheckpoints(ctx context.Context, threadID string, keep int, w lease.Writer) ([]string, error) {
	d, err := s.Client.DeleteCheckpoints(ctx, threadID, keep, w)
	return d, s.unwrap(err)
}

func (s *servedStore) Fork(ctx context.Context, in chain.ForkInput) (*chain.Checkpoint, error) {
	cp, err := s.Client.Fork(ctx, in)
	return cp, s.unwrap(err)
}

// servedSubject is the kit's factory of served stores over network.
func servedSubject(network string) storetest.Factory {
	return func(t *testing.T, contract sbxdb.Options) *storetest.Subject {
		opts := engineOptions(contract)
		dir := t.TempDir()
		db, err := engine.Open(dir, &opts)
		if err != nil {
			t.Fatal(err)
		}
		cur := db
		srv := serve(t, network, db)
		c, err := client.New(srv.clientAddr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			srv.stop()
			c.Close()
			cur.Close()
		})
		store := &servedStore{Client: c}
		s := &storetest.Subject{
			Store:       store,
			InsertRaw:   func(cp *chain.Checkpoint) error { return cur.InsertRaw(cp) },
			SetRefCount: func(key string, n int64) error { return cur.SetRefCount(key, n) },
			OnPoint: func(name string, fn func() error) func() {
				return cur.OnPoint(name, func() error {
					err := fn()
					if err != nil {
						store.inject(err)
					}
					return err
				})
			},
		}
		s.Reopen = func(t *testing.T) sbxdb.Store {
			srv.stop()
			c.Close()
			if err := cur.Close(); err != nil {
				t.Fatal(err)
			}
			next, err := engine.Open(dir, &opts)
			if err != nil {
				t.Fatal(err)
			}
			cur = next
			srv.start(t, next)
			return store
		}
		s.OpenSecond = func() error {
			o := opts
			o.LockTimeout = 50 * time.Millisecond
			second, err := engine.Open(dir, &o)
			if err == nil {
				second.Close()
			}
			return err
		}
		return s
	}
}
