package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// mountTmpfs mounts a tmpfs of size (mount's syntax: "8m") on a new
// directory, unmounted when the test ends. Without the rights to mount it
// skips, saying why, unless $CI is set: then it fails.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("cannot mount a tmpfs (needs root): %v: %s", err, out)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file at path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			return
		}
	}
}

// healthOf returns GET /v1/health's status, Retry-After and body.
func healthOf(t *testing.T, url string) (int, string, healthJSON) {
	t.Helper()
	r := do(t, http.DefaultClient, "GET", url+"/v1/health", "")
	var h healthJSON
	if err := json.Unmarshal(r.body, &h); err != nil {
		t.Fatalf("health: status %d, body %q: %v", r.status, r.body, err)
	}
	return r.status, r.header.Get("Retry-After"), h
}

// metricAt returns the value of a metric without labels as the /metrics of the server at url says it.
func metricAt(t *testing.T, url, name string) string {
	t.Helper()
	r := do(t, http.DefaultClient, "GET", url+"/metrics", "")
	for line := range strings.SplitSeq(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return ""
}

// A store on a file system that fills up: the commit that hits ENOSPC
// poisons it; health and writes say so (503 SBXDB_POISONED, Retry-After),
// reads go on; once space is freed the server reopens the store by itself
// and writes succeed, with every write acknowledged before still there,
// also after the store is opened again from scratch.
func TestPoisonServerRecoversWhenSpaceIsFreed(t *testing.T) {
	mnt := mountTmpfs(t, "16m")
	dir := filepath.Join(mnt, "store")
	db, err := engine.Open(dir, nil) // fsync on: the commit is what fails
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	c, url := tcp(t, New(db, Options{}), "")
	ctx := context.Background()
	msg := func(thread string) []json.RawMessage {
		return []json.RawMessage{json.RawMessage(fmt.Sprintf("%q", thread+strings.Repeat("x", 32<<10)))}
	}
	var acked []string
	for i := range 8 {
		th := fmt.Sprint("before-", i)
		if err := c.SaveThread(ctx, th, msg(th)); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, th)
	}
	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	// Writes until one fails: bbolt's free pages may take a few first.
	var failed error
	for i := 0; failed == nil; i++ {
		if i > 10000 {
			t.Fatal("no write failed on a full file system")
		}
		th := fmt.Sprint("full-", i)
		if failed = c.SaveThread(ctx, th, msg(th)); failed == nil {
			acked = append(acked, th)
		}
	}
	if !errors.Is(db.Poisoned(), sbxdb.ErrPoisoned) || !errors.Is(db.Poisoned(), syscall.ENOSPC) {
		t.Fatalf("after a write failed (%v), the store is not poisoned by ENOSPC: %v", failed, db.Poisoned())
	}
	status, retry, h := healthOf(t, url)
	if status != http.StatusServiceUnavailable || h.OK || h.Code != CodePoisoned || retry == "" ||
		!strings.Contains(h.Cause, "no space left on device") || h.Store != dir || h.Format != engine.FormatVersion {
		t.Fatalf("health of the poisoned store: %d, Retry-After %q, %+v; want 503 SBXDB_POISONED naming ENOSPC and the store", status, retry, h)
	}
	if got, err := c.Health(ctx); !errors.Is(err, sbxdb.ErrPoisoned) || got.Store != dir || got.OK || got.Cause == "" {
		t.Fatalf("client health of the poisoned store: %+v, %v; want ErrPoisoned and the store", got, err)
	}
	r := do(t, http.DefaultClient, "POST", url+"/v1/transcripts/save", `{"threadId":"refused","messages":[1]}`, "Content-Type", "application/json")
	if r.status != http.StatusServiceUnavailable || r.code(t) != CodePoisoned || r.header.Get("Retry-After") == "" {
		t.Fatalf("a write on the poisoned store: %d %s, Retry-After %q; want 503 SBXDB_POISONED with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
	}
	err = c.SaveThread(ctx, "refused", msg("refused"))
	wantCode(t, "client write on the poisoned store", err, CodePoisoned, sbxdb.ErrPoisoned)
	for _, th := range acked {
		if got, err := c.LoadThread(ctx, th); err != nil || len(got) != 1 {
			t.Fatalf("reading %s on the poisoned store: %d messages, %v", th, len(got), err)
		}
	}
	if v := metricAt(t, url, "sbxdb_store_poisoned"); v != "1" {
		t.Errorf("sbxdb_store_poisoned while poisoned: %s; want 1", v)
	}
	// The disk is still full: the server keeps the store poisoned.
	if err := db.Recover(ctx); !errors.Is(err, sbxdb.ErrPoisoned) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Recover on a full disk: %v; want ErrPoisoned naming ENOSPC", err)
	}
	if status, _, _ := healthOf(t, url); status != http.StatusServiceUnavailable {
		t.Fatalf("health after a recovery failed on a full disk: %d; want 503", status)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(120 * time.Second) // the backoff reaches 30 s
	for {
		status, _, h := healthOf(t, url)
		if status == http.StatusOK && h.OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not reopen the store after space was freed: health %d %+v", status, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.SaveThread(ctx, "after", msg("after")); err != nil {
		t.Fatalf("a write after the recovery: %v", err)
	}
	acked = append(acked, "after")
	if v := metricAt(t, url, "sbxdb_store_poisoned"); v != "0" {
		t.Errorf("sbxdb_store_poisoned after the recovery: %s; want 0", v)
	}
	if v := metricAt(t, url, "sbxdb_store_recoveries_total"); v != "1" {
		t.Errorf("sbxdb_store_recoveries_total after the recovery: %s; want 1", v)
	}
	for _, th := range acked {
		if got, err := c.LoadThread(ctx, th); err != nil || len(got) != 1 {
			t.Fatalf("reading %s after the recovery: %d messages, %v", th, len(got), err)
		}
	}

	// From scratch: every acknowledged write, and a clean check.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range acked {
		if got, err := db.LoadThread(ctx, th); err != nil || len(got) != 1 {
			t.Fatalf("reading %s after opening the store again: %d messages, %v", th, len(got), err)
		}
	}
	rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(rep.Findings); !rep.Clean() {
		t.Fatalf("check after the recovery: %s", b)
	}
}
