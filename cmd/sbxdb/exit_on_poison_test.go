package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
)

// serve --exit-on-poison: once a commit fails for want of space, the
// server stops, as on a signal, and exits 13; every write it acknowledged
// is in the store, which opens and checks clean once space is freed.
func TestServeExitOnPoison(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("cannot mount a tmpfs (needs root): %v: %s", err, out)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	store := filepath.Join(mnt, "store")
	p := startServe(t, 1, "--db", store, "--exit-on-poison")
	c := p.client(t, 0, "")
	ctx := context.Background()
	msg := func(th string) []json.RawMessage {
		return []json.RawMessage{json.RawMessage(fmt.Sprintf("%q", th+strings.Repeat("x", 32<<10)))}
	}
	var acked []string
	for i := range 4 {
		th := fmt.Sprint("before-", i)
		if err := c.SaveThread(ctx, th, msg(th)); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, th)
	}
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatal("no write failed on a full file system")
		}
		th := fmt.Sprint("full-", i)
		if err := c.SaveThread(ctx, th, msg(th)); err != nil {
			break
		}
		acked = append(acked, th)
	}
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("sbxdb serve --exit-on-poison still runs after the store was poisoned; stderr:\n%s", p.stderr)
	}
	if p.code != exitPoisoned || !strings.Contains(p.stderr.String(), "poisoned") {
		t.Fatalf("sbxdb serve --exit-on-poison exited %d; want %d; stderr:\n%s", p.code, exitPoisoned, p.stderr)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, th := range acked {
		if got, err := db.LoadThread(ctx, th); err != nil || len(got) != 1 {
			t.Fatalf("thread %s after the server exited: %d messages, %v", th, len(got), err)
		}
	}
	rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
	if err != nil || !rep.Clean() {
		t.Fatalf("check after the server exited: %+v, %v", rep, err)
	}
}
