package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
)

// lockedBuffer is a log destination several goroutines write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A server scrubbing a store with one damaged blob reports the finding in
// health (which stays 200 and ok), in /metrics and in its log.
func TestScrubReportsDamagedBlob(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	data := []byte(strings.Repeat("scrubbed bytes ", 100))
	key := cas.Files.Key(sha256.Sum256(data))
	if _, err := db.PutObject(ctx, key, bytes.NewReader(data), sbxdb.PutObjectOptions{Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(db.Dir(), engine.BlobDir, "packs", "*.pack"))
	if len(packs) != 1 {
		t.Fatalf("packs %v; want the one holding the blob", packs)
	}
	b, err := os.ReadFile(packs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(packs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}

	logs := &lockedBuffer{}
	s := New(db, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	sctx, stop := context.WithCancel(ctx)
	scrubbed := make(chan struct{})
	go func() { defer close(scrubbed); s.Scrub(sctx, 10*time.Millisecond, 0) }()
	t.Cleanup(func() { stop(); <-scrubbed }) // before openDB's Close
	_, url := tcp(t, s, "")

	var h healthJSON
	for deadline := time.Now().Add(time.Minute); ; {
		r := do(t, http.DefaultClient, "GET", url+"/v1/health", "")
		if r.status != http.StatusOK {
			t.Fatalf("health: status %d, %s", r.status, r.body)
		}
		h = healthJSON{}
		if err := json.Unmarshal(r.body, &h); err != nil {
			t.Fatal(err)
		}
		if h.Scrub == nil {
			t.Fatalf("health of a scrubbing server has no scrub: %s", r.body)
		}
		if h.Scrub.Result != "pending" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no scrub ended within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !h.OK || h.Scrub.Result != ScrubFindings || h.Scrub.Errors != 1 || h.Scrub.Kinds[sbxdb.FindingBlob] != 1 || h.Scrub.EndedAt == "" {
		t.Fatalf("health after a scrub of a store with one damaged blob: %+v, scrub %+v", h, *h.Scrub)
	}
	metrics := string(do(t, http.DefaultClient, "GET", url+"/metrics", "").body)
	for _, want := range []string{
		`sbxdb_scrub_findings{kind="blob",severity="error"} 1`,
		"sbxdb_scrub_last_end_timestamp_seconds ",
		"sbxdb_scrub_last_duration_seconds ",
		`sbxdb_scrubs_total{result="clean"} 0`,
		`sbxdb_scrubs_total{result="findings"} `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	if l := logs.String(); !strings.Contains(l, "scrub finding") || !strings.Contains(l, key) {
		t.Errorf("the log names no finding of %s:\n%s", key, l)
	}
}

// A server that does not scrub reports no scrub in health, and no scrub
// series.
func TestNoScrubNoReport(t *testing.T) {
	s := New(openDB(t), Options{})
	_, url := tcp(t, s, "")
	if r := do(t, http.DefaultClient, "GET", url+"/v1/health", ""); strings.Contains(string(r.body), "scrub") {
		t.Errorf("health of a server that does not scrub: %s", r.body)
	}
	if r := do(t, http.DefaultClient, "GET", url+"/metrics", ""); strings.Contains(string(r.body), "sbxdb_scrub") {
		t.Error("/metrics of a server that does not scrub has scrub series")
	}
}
