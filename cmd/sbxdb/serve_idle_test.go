package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// exitWait bounds the wait for a server that should exit on its own; the
// test fails past it rather than hang.
const exitWait = 60 * time.Second

// TestServeIdleExit: with --idle-exit, serve keeps serving while a client
// has a connection open, and stops as on SIGTERM (exit 0, socket removed)
// once none has been open for the duration, from the start when no client
// connects at all.
func TestServeIdleExit(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	sock := filepath.Join(store, socketName)
	p := startServe(t, 1, "--db", store, "--idle-exit", "200ms")
	c := p.client(t, 0, "")
	if _, err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The client's kept-alive connection stays open: the server stays,
	// however long it waits.
	select {
	case <-p.exited:
		t.Fatalf("exited (%d) with a client connected; stderr:\n%s", p.code, p.stderr)
	case <-time.After(time.Second):
	}
	if _, err := c.Health(context.Background()); err != nil {
		t.Fatalf("health after a second connected: %v", err)
	}
	c.Close() // closes the idle connection
	select {
	case <-p.exited:
	case <-time.After(exitWait):
		t.Fatalf("still serving %s after the last client closed; stderr:\n%s", exitWait, p.stderr)
	}
	if p.code != 0 {
		t.Errorf("exit %d; stderr:\n%s", p.code, p.stderr)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the socket outlived the server: %v", err)
	}
	for _, want := range []string{"idleExit=200ms", "msg=\"no client connected\" for=200ms", "msg=stopped"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, p.stderr)
		}
	}

	// Nobody connects: it exits all the same.
	q := startServe(t, 1, "--db", filepath.Join(t.TempDir(), "lonely"), "--idle-exit", "50ms")
	select {
	case <-q.exited:
	case <-time.After(exitWait):
		t.Fatalf("still serving %s with no client ever; stderr:\n%s", exitWait, q.stderr)
	}
	if q.code != 0 {
		t.Errorf("a server no client used: exit %d; stderr:\n%s", q.code, q.stderr)
	}

	code, _, errOut := serveInProcess(t, "--db", filepath.Join(t.TempDir(), "x"), "--idle-exit", "-1s")
	if code != exitUsage || !strings.Contains(errOut, "--idle-exit -1s: must not be negative") {
		t.Errorf("a negative --idle-exit: exit %d, %q", code, errOut)
	}
}
