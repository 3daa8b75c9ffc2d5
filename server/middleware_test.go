package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/client"
)

func TestAuth(t *testing.T) {
	db := openDB(t)
	appendN(t, db, writer(t, db, "t"), 3)
	if _, err := db.Unlock(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	s := New(db, Options{Token: "s3cret"})
	var waits fakeWaits // the backoff of the failures below, without the wall clock
	waits.install(s.auth)
	ctx := context.Background()
	gc := sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true}
	count := func() int {
		cps, err := db.List(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		return len(cps)
	}
	for _, token := range []string{"", "wrong", "s3cret2", "s3cre"} {
		c, url := tcp(t, s, token)
		_, err := c.GC(ctx, gc)
		wantCode(t, "gc with token "+token, err, CodeUnauthorized, client.ErrUnauthorized)
		if n := count(); n != 3 {
			t.Fatalf("an unauthorized gc left %d checkpoints of 3", n)
		}
		if _, err := c.Stats(ctx); !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("stats with token %q: %v", token, err)
		}
		r := do(t, httpClient, "GET", url+"/metrics", "")
		if r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("metrics with token %q: %d, WWW-Authenticate %q", token, r.status, r.header.Get("WWW-Authenticate"))
		}
		if h, err := c.Health(ctx); err != nil || !h.OK {
			t.Errorf("health with token %q: %+v, %v; it needs none", token, h, err)
		}
	}
	_, url := tcp(t, s, "")
	if r := do(t, httpClient, "GET", url+"/v1/stats", "", "Authorization", "Basic czNjcmV0"); r.status != 401 {
		t.Errorf("a Basic credential: %d", r.status)
	}
	// The scheme's case does not matter (RFC 9110, 11.1); the token's does.
	if r := do(t, httpClient, "GET", url+"/v1/stats", "", "Authorization", "bearer s3cret"); r.status != 200 {
		t.Errorf("scheme bearer, lower-case: %d", r.status)
	}
	if r := do(t, httpClient, "GET", url+"/v1/stats", "", "Authorization", "Bearer S3CRET"); r.status != 401 {
		t.Errorf("the token in upper case: %d", r.status)
	}
	c, _ := tcp(t, s, "s3cret")
	if _, err := c.GC(ctx, gc); err != nil || count() != 1 {
		t.Fatalf("gc with the token: %v, %d checkpoints", err, count())
	}
	// A unix socket needs no token.
	u := serveUnix(t, s)
	if _, err := u.c.Stats(ctx); err != nil {
		t.Errorf("stats on the unix socket: %v", err)
	}
}

// blocker registers GET /test/block on s: each request signals entered
// and waits for a value on release, or for its context to end, which it
// then reports on cancelled and answers as the endpoints do.
type blocker struct {
	entered   chan struct{}
	release   chan struct{}
	cancelled chan struct{}
}

func newBlocker(s *Server) *blocker {
	b := &blocker{entered: make(chan struct{}, 8), release: make(chan struct{}), cancelled: make(chan struct{}, 8)}
	s.mux.HandleFunc("GET /test/block", func(w http.ResponseWriter, r *http.Request) {
		b.entered <- struct{}{}
		select {
		case <-b.release:
			writeJSON(w, 200, map[string]bool{"ok": true})
		case <-r.Context().Done():
			b.cancelled <- struct{}{}
			writeError(w, s.stopped(r.Context().Err()))
		}
	})
	return b
}

func TestRequestCap(t *testing.T) {
	db := openDB(t)
	s := New(db, Options{MaxRequests: 1})
	b := newBlocker(s)
	waiting := make(chan struct{}, 8)
	s.hooks.waiting = func() { waiting <- struct{}{} }
	_, url := tcp(t, s, "")

	first := sendAsync(httpClient, "GET", url+"/test/block")
	<-b.entered

	// The health probe takes no slot.
	if r := do(t, httpClient, "GET", url+"/v1/health", ""); r.status != 200 {
		t.Fatalf("health while the slot is busy: %d", r.status)
	}
	// A request that finds the slot busy waits, then is refused.
	s.slotWait = time.Millisecond
	r := do(t, httpClient, "GET", url+"/v1/stats", "")
	if r.status != 503 || r.code(t) != CodeUnavailable || r.header.Get("Retry-After") != "1" {
		t.Fatalf("second request: %d %s, Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
	}
	select {
	case <-waiting:
	default:
		t.Fatal("the second request did not wait for a slot")
	}
	// One that gets the slot while it waits is served.
	s.slotWait = time.Hour
	second := sendAsync(httpClient, "GET", url+"/v1/stats")
	<-waiting
	b.release <- struct{}{}
	if r := <-first; r.err != nil || r.status != 200 {
		t.Errorf("the blocked request: %d, %v", r.status, r.err)
	}
	if r := <-second; r.err != nil || r.status != 200 {
		t.Errorf("the request that waited: %d %s, %v", r.status, r.body, r.err)
	}
}

func TestStopping(t *testing.T) {
	db := openDB(t)
	s := New(db, Options{})
	_, url := tcp(t, s, "")
	s.stopping.Store(true)
	r := do(t, httpClient, "GET", url+"/v1/stats", "")
	if r.status != 503 || r.code(t) != CodeUnavailable || r.header.Get("Retry-After") != "1" {
		t.Errorf("a request while stopping: %d %s", r.status, r.body)
	}
}

// Serve lets a request in flight finish when it is told to stop.
func TestServeGrace(t *testing.T) {
	db := openDB(t)
	s := New(db, Options{Grace: time.Hour})
	b := newBlocker(s)
	u := serveUnix(t, s)
	got := sendAsync(u.http, "GET", "http://sbxdb/test/block")
	<-b.entered
	u.stop()
	b.release <- struct{}{}
	if r := <-got; r.err != nil || r.status != 200 {
		t.Errorf("the request in flight: %d %s, %v", r.status, r.body, r.err)
	}
	if err := <-u.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	u.served <- nil
	if _, err := u.c.Health(context.Background()); !errors.Is(err, client.ErrUnreachable) {
		t.Errorf("health after Serve returned: %v, want ErrUnreachable", err)
	}
}

// Serve cancels the requests still running once its grace is over, lets
// them answer, and returns when they have.
func TestServeCancelsAfterGrace(t *testing.T) {
	db := openDB(t)
	s := New(db, Options{Grace: -1})
	b := newBlocker(s)
	u := serveUnix(t, s)
	got := sendAsync(u.http, "GET", "http://sbxdb/test/block")
	<-b.entered
	u.stop()
	if err := <-u.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	u.served <- nil
	select {
	case <-b.cancelled:
	default:
		t.Fatal("Serve returned before the cancelled handler did")
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the cancelled request: %v", r.err)
	}
	if r.status != 503 || r.code(t) != CodeUnavailable || !strings.Contains(string(r.body), "shutting down") {
		t.Errorf("the cancelled request: %d %s", r.status, r.body)
	}
}

func TestPanics(t *testing.T) {
	db := openDB(t)
	var logs bytes.Buffer
	s := New(db, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	s.mux.HandleFunc("GET /test/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	s.mux.HandleFunc("GET /test/abort", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })
	s.mux.HandleFunc("GET /test/late", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		w.Write([]byte("partial"))
		panic("late boom")
	})
	_, url := tcp(t, s, "")
	r := do(t, httpClient, "GET", url+"/test/panic", "")
	if r.status != 500 || r.code(t) != CodeInternal {
		t.Errorf("a panic: %d %s", r.status, r.body)
	}
	if !strings.Contains(logs.String(), `"panic":"boom"`) {
		t.Errorf("the panic is not logged:\n%s", logs.String())
	}
	for _, path := range []string{"/test/abort", "/test/late"} {
		resp, err := httpClient.Get(url + path)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Errorf("%s: a whole response, want the connection aborted", path)
		}
	}
	if r := do(t, httpClient, "GET", url+"/v1/health", ""); r.status != 200 {
		t.Errorf("health after the panics: %d", r.status)
	}
}

func TestRequestIDsAndLogs(t *testing.T) {
	db := openDB(t)
	var mu sync.Mutex
	var logs bytes.Buffer
	s := New(db, Options{Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))})
	_, url := tcp(t, s, "")
	r := do(t, httpClient, "POST", url+"/v1/check", `{"verifyBlobs": false}`, "X-Request-Id", "req-42")
	if r.status != 200 || r.header.Get("X-Request-Id") != "req-42" {
		t.Errorf("a sent id: %d, echoed %q", r.status, r.header.Get("X-Request-Id"))
	}
	a := do(t, httpClient, "GET", url+"/v1/health", "").header.Get("X-Request-Id")
	b := do(t, httpClient, "GET", url+"/v1/health", "", "X-Request-Id", "has spaces in it").header.Get("X-Request-Id")
	if a == "" || b == "" || a == b || b == "has spaces in it" {
		t.Errorf("made ids %q and %q", a, b)
	}
	do(t, httpClient, "GET", url+"/no/such/route", "")

	mu.Lock()
	defer mu.Unlock()
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		got = append(got, m)
	}
	if len(got) != 4 {
		t.Fatalf("%d log lines for 4 requests:\n%s", len(got), logs.String())
	}
	first := got[0]
	for k, v := range map[string]any{"msg": "request", "id": "req-42", "method": "POST", "route": "POST /v1/check",
		"status": 200.0, "bytesIn": 22.0, "conn": "tcp"} {
		if first[k] != v {
			t.Errorf("log %s = %v, want %v", k, first[k], v)
		}
	}
	if first["bytesOut"].(float64) != float64(len(r.body)) || first["duration"].(float64) <= 0 {
		t.Errorf("log bytesOut %v (body %d), duration %v", first["bytesOut"], len(r.body), first["duration"])
	}
	if got[3]["route"] != "/" || got[3]["status"] != 404.0 {
		t.Errorf("the unmatched request logged %v", got[3])
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestRoutingErrors(t *testing.T) {
	db := openDB(t)
	_, url := tcp(t, New(db, Options{}), "")
	r := do(t, httpClient, "GET", url+"/v1/gc", "")
	if r.status != 405 || r.code(t) != CodeMethodNotAllowed || r.header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/gc: %d %s, Allow %q", r.status, r.body, r.header.Get("Allow"))
	}
	r = do(t, httpClient, "DELETE", url+"/v1/health", "")
	if r.status != 405 || r.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("DELETE /v1/health: %d, Allow %q", r.status, r.header.Get("Allow"))
	}
	r = do(t, httpClient, "GET", url+"/v1/nothing", "")
	if r.status != 404 || r.code(t) != CodeNotFound {
		t.Errorf("GET /v1/nothing: %d %s", r.status, r.body)
	}
}

func TestMetrics(t *testing.T) {
	db := openDB(t)
	writer(t, db, "live")
	s := New(db, Options{})
	u := serveUnix(t, s)
	ctx := context.Background()
	if _, err := u.c.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	do(t, u.http, "GET", "http://sbxdb/v1/gc", "")
	m := scrape(t, u)
	for _, want := range []string{
		`sbxdb_http_requests_total{code="200",route="GET /v1/stats"} 1`,
		`sbxdb_http_requests_total{code="405",route="/"} 1`,
		`sbxdb_http_request_duration_seconds_count{route="GET /v1/stats"} 1`,
		`sbxdb_http_request_bytes_total{route="GET /v1/stats"} 0`,
		`sbxdb_http_response_bytes_total{route="GET /v1/stats"} `,
		`sbxdb_http_requests_in_flight 1`, // the scrape itself
		`sbxdb_appends_total 0`,
		`sbxdb_write_transactions_total `,
		`sbxdb_write_lock_held_seconds_total `,
		// Two transactions of one write each so far: the new store's
		// and the lease taken above.
		`sbxdb_write_batch_size_bucket{le="1"} 2`,
		`sbxdb_write_batch_size_bucket{le="256"} 2`,
		`sbxdb_write_batch_size_sum 2`,
		`sbxdb_writer_leases_live 1`,
		`go_goroutines `,
		`process_open_fds `,
	} {
		if !strings.Contains(m, "\n"+want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Each server has its own registry.
	other := New(db, Options{})
	if other.metrics.reg == s.metrics.reg {
		t.Error("two servers share a registry")
	}
}
