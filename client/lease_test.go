package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/server"
)

// envAcquire, set in a child, names a socket and a thread: the child
// acquires the thread's lease through the socket, prints its fence and
// exits without releasing it, as a killed writer would.
const envAcquire = "SBXDB_CLIENT_TEST_ACQUIRE"

func TestMain(m *testing.M) {
	if v := os.Getenv(envAcquire); v != "" {
		sock, thread, _ := strings.Cut(v, "\n")
		c, err := client.New("unix:"+sock, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		l, err := c.AcquireWriter(context.Background(), thread)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(l.Fence)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveDB serves db on network ("unix": a socket in a short directory, as
// sun_path holds 108 bytes; "tcp": loopback) and returns the socket path or
// the address and a client of it.
func serveDB(t *testing.T, db *engine.DB, network string) (string, *client.Client) {
	t.Helper()
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
	srv := server.New(db, server.Options{})
	ts := httptest.NewUnstartedServer(srv)
	ts.Listener.Close()
	ts.Listener = ln
	ts.Config.ConnContext = srv.ConnContext
	ts.Start()
	t.Cleanup(ts.Close)
	c, err := client.New(network+":"+ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return ln.Addr().String(), c
}

func openDB(t *testing.T) *engine.DB {
	t.Helper()
	db, err := engine.Open(t.TempDir(), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// needProc skips a test that needs /proc to name and check processes.
func needProc(t *testing.T) {
	t.Helper()
	if me := proc.Self(); me.Start == 0 || me.Boot == "" || me.NS == "" {
		t.Skipf("no /proc on this system (Self() = %+v): peers cannot be named or proved gone", me)
	}
}

// A lease taken through a unix socket records the connecting process as
// its holder; through TCP none is recorded.
func TestLeaseHolderIsTheUnixPeer(t *testing.T) {
	needProc(t)
	ctx := t.Context()
	db := openDB(t)
	_, unix := serveDB(t, db, "unix")
	_, tcp := serveDB(t, db, "tcp")
	for thread, c := range map[string]*client.Client{"by-unix": unix, "by-tcp": tcp} {
		if _, err := c.AcquireWriter(ctx, thread); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*client.Client{unix, tcp} {
		ws, err := c.Writers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := ws["by-unix"].Holder; got != proc.Self() || got.PID != os.Getpid() {
			t.Errorf("holder of a lease taken through the socket = %+v, want this process %+v", got, proc.Self())
		}
		if got := ws["by-tcp"]; !got.Held || !got.Holder.IsZero() {
			t.Errorf("lease taken through TCP = %+v, want held with no holder recorded", got)
		}
		if ws["by-unix"].OwnerToken != "" {
			t.Errorf("Writers sent an owner token")
		}
	}
	if _, err := unix.AcquireWriterWith(ctx, "x", lease.AcquireOptions{Holder: &proc.Identity{}}); !errors.Is(err, client.ErrHolderNotSettable) {
		t.Errorf("AcquireWriterWith naming a holder: %v, want ErrHolderNotSettable", err)
	}
	// A live holder is never taken over, through either listener.
	for _, c := range []*client.Client{unix, tcp} {
		for _, thread := range []string{"by-unix", "by-tcp"} {
			if _, err := c.AcquireWriterWith(ctx, thread, lease.AcquireOptions{TakeOverDead: true}); !errors.Is(err, chain.ErrWriterConflict) {
				t.Errorf("takeover of %s's running or unrecorded holder: %v, want WRITER_CONFLICT", thread, err)
			}
		}
	}
}

// A client process that took a lease through the socket and exited
// without releasing it leaves a lease that takeOverDead takes over, through
// the socket, with the next fence; a plain acquire still conflicts.
func TestTakeOverDeadClientThroughTheSocket(t *testing.T) {
	needProc(t)
	ctx := t.Context()
	db := openDB(t)
	sock, c := serveDB(t, db, "unix")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), envAcquire+"="+sock+"\nthread")
	out, err := child.Output()
	if err != nil {
		t.Fatalf("child: %v (%s)", err, out)
	}
	fence, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("child printed %q", out)
	}
	pid := child.ProcessState.Pid()

	ws, err := c.Writers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := ws["thread"]
	if !held.Live(time.Now().UnixMilli()) || held.Fence != fence || held.Holder.PID != pid || held.Holder.Start == 0 {
		t.Fatalf("lease left by child %d: %+v, want it live, fence %d, held by the child", pid, held, fence)
	}
	if proc.Check(held.Holder) != proc.Gone {
		t.Fatalf("the exited child %+v is not proved gone", held.Holder)
	}
	if _, err := c.AcquireWriter(ctx, "thread"); !errors.Is(err, chain.ErrWriterConflict) {
		t.Fatalf("plain acquire over the dead child's lease: %v, want WRITER_CONFLICT", err)
	}
	if after, _ := c.Writers(ctx); after["thread"] != held {
		t.Fatalf("the refused acquire changed the lease: %+v, was %+v", after["thread"], held)
	}
	l, err := c.AcquireWriterWith(ctx, "thread", lease.AcquireOptions{TakeOverDead: true})
	if err != nil {
		t.Fatalf("takeOverDead through the socket: %v", err)
	}
	if l.Fence != fence+1 {
		t.Errorf("fence after the takeover %d, want %d", l.Fence, fence+1)
	}
	if l.TookOver == nil || l.TookOver.Holder != held.Holder || l.TookOver.Fence != fence || l.TookOver.OwnerToken != "" {
		t.Errorf("TookOver = %+v, want the child's lease %+v without its token", l.TookOver, held)
	}
	if ws, _ := c.Writers(ctx); ws["thread"].Holder != proc.Self() {
		t.Errorf("holder after the takeover = %+v, want this process", ws["thread"].Holder)
	}
	// The lease handle renews and releases through the client.
	if _, err := l.Renew(ctx); err != nil {
		t.Errorf("Renew: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	if ws, _ := c.Writers(ctx); ws["thread"].Held {
		t.Errorf("lease still held after Release: %+v", ws["thread"])
	}
}

// Unlock and Threads through the client; errors keep their sentinel and
// code, and the status the server sent.
func TestUnlockThreadsAndErrors(t *testing.T) {
	ctx := t.Context()
	db := openDB(t)
	_, c := serveDB(t, db, "tcp")
	l, err := c.AcquireWriter(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	cp := &chain.Checkpoint{ID: "c1", ThreadID: "b", Reason: chain.ReasonAutomatic}
	if _, err := c.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveThread(ctx, "a", nil); err != nil {
		t.Fatal(err)
	}
	if th, err := c.Threads(ctx); err != nil || strings.Join(th, ",") != "a,b" {
		t.Errorf("Threads = %q, %v", th, err)
	}
	removed, err := c.Unlock(ctx, "b")
	if err != nil || !removed.Held || removed.Fence != l.Fence || removed.OwnerToken != "" {
		t.Errorf("Unlock = %+v, %v", removed, err)
	}
	if s, err := c.Unlock(ctx, "never"); err != nil || s.Held {
		t.Errorf("Unlock of a thread never leased = %+v, %v", s, err)
	}
	_, err = c.Append(ctx, chain.AppendInput{Checkpoint: &chain.Checkpoint{ID: "c2", ThreadID: "b", ParentID: "c1", Reason: chain.ReasonAutomatic},
		ExpectedHeadID: "c1", Writer: l.Writer})
	var ce *client.Error
	if !errors.Is(err, chain.ErrWriterLost) || chain.Code(err) != chain.CodeWriterLost || !errors.As(err, &ce) || ce.Status != http.StatusConflict {
		t.Errorf("append after Unlock: %v, want WRITER_LOST (409)", err)
	}
	if _, err := c.Unlock(ctx, "\xff"); !errors.Is(err, chain.ErrInvalidID) {
		t.Errorf("Unlock of a thread id that is not UTF-8: %v, want INVALID_ID", err)
	}
	if _, err := l.Renew(ctx); !errors.Is(err, chain.ErrWriterLost) {
		t.Errorf("Renew after Unlock: %v, want WRITER_LOST", err)
	}
}
