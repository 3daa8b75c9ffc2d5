package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriterServesOthers: while a command holds the store for writing
// (here, opened as capture opens it), another process's threads answers
// through it instead of finding the store busy, a capture into another
// thread goes through it too, and once the command closes the store its
// socket is gone and the files open again.
func TestWriterServesOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	store, ws := captured(t, "cp1")
	var errOut bytes.Buffer
	inv := &invocation{ctx: context.Background(), dir: store, writes: true, out: &bytes.Buffer{}, errOut: &errOut}
	db, err := inv.open()
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			db.Close()
		}
	}()
	if _, err := os.Stat(filepath.Join(store, socketName)); err != nil {
		t.Fatalf("a writer holding the store serves no socket: %v", err)
	}
	r := runChild(t, "threads", "--db", store)
	if r.code != 0 || !strings.Contains(r.stdout, "main") {
		t.Fatalf("threads beside a writer: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if r := runChild(t, "capture", ws, "--db", store, "--thread", "other", "--id", "o1"); r.code != 0 {
		t.Fatalf("capture into another thread beside a writer: exit %d, %q", r.code, r.stderr)
	}
	if head, err := db.Head(context.Background(), "other"); err != nil || head != "o1" {
		t.Errorf("the served capture: head %q, %v; want o1", head, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := os.Stat(filepath.Join(store, socketName)); !os.IsNotExist(err) {
		t.Errorf("the socket outlived the writer: %v", err)
	}
	if out := ok(t, "log", "other", "--db", store); !strings.Contains(out, "o1") {
		t.Errorf("log after the writer closed:\n%s", out)
	}
}
