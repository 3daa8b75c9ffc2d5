package server

// Tests of test mode (teststores.go): test stores' lease timings and
// clocks, their isolation from each other and from the served store,
// every store route served by the named store, refused options and
// headers, the limit, deletion and the cleanup when the server stops, and
// a server without test mode refusing all of it with nothing changed.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lease"
)

// testMode is a server in test mode on a unix socket, over a store of its
// own that holds thread "real" with one checkpoint.
type testMode struct {
	t  *testing.T
	s  *Server
	db *engine.DB
	u  *unixServer
}

func newTestMode(t *testing.T, opts Options) *testMode {
	t.Helper()
	t.Setenv("TMPDIR", t.TempDir()) // the test stores' directory goes here
	db := openDB(t)
	appendN(t, db, writer(t, db, "real"), 1)
	s := New(db, opts)
	return &testMode{t: t, s: s, db: db, u: serveUnix(t, s)}
}

// req sends a raw request with header (name, value pairs).
func (m *testMode) req(method, path, body string, header ...string) reply {
	m.t.Helper()
	return do(m.t, m.u.http, method, "http://sbxdb"+path, body, header...)
}

// create creates a test store with body and returns its id.
func (m *testMode) create(body string) string {
	m.t.Helper()
	r := m.req("POST", "/v1/test/stores", body)
	var out struct{ Store string }
	if err := json.Unmarshal(r.body, &out); r.status != 200 || err != nil {
		m.t.Fatalf("create %s: %d %s", body, r.status, r.body)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(out.Store) {
		m.t.Fatalf("store id %q is not 32 lowercase hex digits", out.Store)
	}
	return out.Store
}

// client returns a Go client of test store id (none: "") at clock now
// (nil: none sent).
func (m *testMode) client(id string, now func() time.Time) *client.Client {
	m.t.Helper()
	c, err := client.New("unix:"+m.u.path, &client.Options{TestStore: id, Now: now})
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { c.Close() })
	return c
}

// dirs returns the names in the test stores' directory, none when it was
// not made.
func (m *testMode) dirs() []string {
	m.t.Helper()
	m.s.tests.mu.Lock()
	base := m.s.tests.base
	m.s.tests.mu.Unlock()
	if base == "" {
		return nil
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		m.t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() != ownerLockName {
			names = append(names, e.Name())
		}
	}
	return names
}

// realState is what the served store holds, to show that a request left
// it unchanged.
func (m *testMode) realState() string {
	m.t.Helper()
	ctx := context.Background()
	var b strings.Builder
	threads, err := m.db.Threads(ctx)
	fmt.Fprintf(&b, "threads %q %v\n", threads, err)
	for _, th := range append(threads, "t") {
		cps, err := m.db.List(ctx, th)
		fmt.Fprintf(&b, "%s: %d checkpoints %v\n", th, len(cps), err)
	}
	ws, err := m.db.Writers(ctx)
	fmt.Fprintf(&b, "writers %d %v\n", len(ws), err)
	objs, _, err := m.db.ListObjects(ctx, "", "", 1000)
	fmt.Fprintf(&b, "objects %d %v\n", len(objs), err)
	msgs, err := m.db.LoadThread(ctx, "t")
	fmt.Fprintf(&b, "transcript %d %v\n", len(msgs), err)
	st, err := m.db.Stats(ctx)
	fmt.Fprintf(&b, "stats %+v %v\n", st, err)
	return b.String()
}

// grantedLease is a lease on the wire, as a client reads it.
type grantedLease struct {
	ThreadID     string `json:"threadId"`
	OwnerToken   string `json:"ownerToken"`
	Fence        int64  `json:"fence"`
	ExpiresAt    int64  `json:"expiresAt"`
	RenewAfterMs int64  `json:"renewAfterMs"`
}

// decodeLease decodes the response of an acquire that must succeed.
func decodeLease(t *testing.T, r reply) grantedLease {
	t.Helper()
	var l grantedLease
	if err := json.Unmarshal(r.body, &l); r.status != 200 || err != nil {
		t.Fatalf("acquire: %d %s", r.status, r.body)
	}
	return l
}

// TestTestStoreLeaseTimings: a store of lease 100/25 at the clocks its
// requests set takes, refuses, takes over and renews leases as the
// contract's conformance cases expect.
func TestTestStoreLeaseTimings(t *testing.T) {
	m := newTestMode(t, Options{TestStores: true})
	id := m.create(`{"leaseDurationMs": 100, "renewAfterMs": 25}`)
	at := func(now string) []string { return []string{HeaderTestStore, id, HeaderNow, now} }
	acquire := `{"threadId": "t"}`

	first := decodeLease(t, m.req("POST", "/v1/leases/acquire", acquire, at("1000")...))
	if first.ThreadID != "t" || first.Fence != 1 || first.ExpiresAt != 1100 || first.RenewAfterMs != 25 {
		t.Errorf("acquire at 1000: %+v, want fence 1, expiresAt 1100, renewAfterMs 25", first)
	}
	if r := m.req("POST", "/v1/leases/acquire", acquire, at("1099")...); r.status != 409 || r.code(t) != chain.CodeWriterConflict {
		t.Errorf("acquire at 1099: %d %s, want 409 WRITER_CONFLICT", r.status, r.body)
	}
	second := decodeLease(t, m.req("POST", "/v1/leases/acquire", acquire, at("1100")...))
	if second.Fence != 2 || second.ExpiresAt != 1200 || second.OwnerToken == first.OwnerToken {
		t.Errorf("acquire at 1100: %+v, want a takeover with fence 2, expiresAt 1200", second)
	}
	w := mustJSON(t, lease.Writer{ThreadID: "t", OwnerToken: second.OwnerToken, Fence: 2})
	r := m.req("POST", "/v1/leases/renew", `{"writer": `+w+`}`, at("1101")...)
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"expiresAt":1201}` {
		t.Errorf("renew at 1101: %d %s, want expiresAt 1201", r.status, r.body)
	}
	// The clock stays at the latest time sent: a request without the
	// header reads 1101.
	r = m.req("POST", "/v1/leases/acquire", acquire, HeaderTestStore, id)
	if r.status != 409 || r.code(t) != chain.CodeWriterConflict {
		t.Errorf("acquire without a clock after renewing at 1101: %d %s, want WRITER_CONFLICT", r.status, r.body)
	}
	// Negative times are times.
	if l := decodeLease(t, m.req("POST", "/v1/leases/acquire", `{"threadId": "neg"}`, at("-5")...)); l.ExpiresAt != 95 {
		t.Errorf("acquire at -5: expiresAt %d, want 95", l.ExpiresAt)
	}

	// A store whose requests never set the clock reads the wall clock,
	// with the engine's default timings when none is given.
	for _, body := range []string{`{}`, `{"leaseDurationMs": null, "renewAfterMs": null}`} {
		id := m.create(body)
		before := time.Now().UnixMilli()
		l := decodeLease(t, m.req("POST", "/v1/leases/acquire", acquire, HeaderTestStore, id))
		after := time.Now().UnixMilli()
		if l.RenewAfterMs != 45000 || l.ExpiresAt < before+120000 || l.ExpiresAt > after+120000 {
			t.Errorf("store of %s: %+v, want renewAfterMs 45000 and expiresAt 120 s after a time in [%d, %d]", body, l, before, after)
		}
	}
	if ws, err := m.db.Writers(context.Background()); err != nil || len(ws) != 1 {
		t.Errorf("the served store's leases: %v, %v; want only that of thread real", ws, err)
	}
}

// TestTestStoreServesEveryStoreRoute sends the same requests, one of each
// store route, to a test store and to a server of a fresh store of its
// own at the same clock: the answers are the same, and the served store
// is unchanged. The routes that are not a store's ignore the header.
func TestTestStoreServesEveryStoreRoute(t *testing.T) {
	m := newTestMode(t, Options{TestStores: true})
	id := m.create(`{}`)
	refDB, err := engine.Open(filepath.Join(t.TempDir(), "ref"), &engine.Options{NoSync: true, Now: func() time.Time { return time.UnixMilli(1000) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { refDB.Close() })
	ref := serveUnix(t, New(refDB, Options{}))
	before := m.realState()

	const cp = `{"id":"c1","threadId":"t","parentCheckpointId":null,"createdAt":5,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`
	steps := []struct{ method, path, body string }{
		{"POST", "/v1/leases/acquire", `{"threadId":"t"}`},
		{"POST", "/v1/leases/acquire", `{"threadId":"f"}`},
		{"POST", "/v1/checkpoints/append", `{"checkpoint":` + cp + `,"expectedHeadId":null,"writer":W(t)}`},
		{"POST", "/v1/checkpoints/get", `{"id":"c1"}`},
		{"POST", "/v1/checkpoints/list", `{"threadId":"t"}`},
		{"POST", "/v1/checkpoints/head", `{"threadId":"t"}`},
		{"POST", "/v1/checkpoints/fork", `{"sourceThreadId":"t","sourceCheckpointId":"c1","destinationThreadId":"f","destinationCheckpointId":"f1","createdAt":6,"writer":W(f)}`},
		{"GET", "/v1/threads", ""},
		{"GET", "/v1/blob-references", ""},
		{"GET", "/v1/leases", ""},
		{"POST", "/v1/leases/renew", `{"writer":W(t)}`},
		{"POST", "/v1/transcripts/save", `{"threadId":"t","messages":[{"role":"user"}]}`},
		{"POST", "/v1/transcripts/load", `{"threadId":"t"}`},
		{"POST", "/v1/instances/upsert", `{"key":"k","provider":"p","providerSandboxId":"s","threadId":"t","updatedAt":7}`},
		{"POST", "/v1/instances/get", `{"key":"k"}`},
		{"PUT", "/v1/blobs/obj/a", "hello"},
		{"HEAD", "/v1/blobs/obj/a", ""},
		{"GET", "/v1/blobs/obj/a", ""},
		{"GET", "/v1/blobs?prefix=obj/", ""},
		{"POST", "/v1/artifacts/save", `{"artifactId":"a","runId":"r","threadId":"t","name":"n","mimeType":"m","size":5,"createdAt":8}`},
		{"POST", "/v1/artifacts/get", `{"artifactId":"a"}`},
		{"POST", "/v1/artifacts/list", `{"runId":"r"}`},
		{"GET", "/v1/stats", ""},
		{"POST", "/v1/check", `{}`},
		{"POST", "/v1/gc", `{"retain":true,"keep":5,"immediate":true,"dryRun":true}`},
		{"POST", "/v1/sweep", `{"immediate":true,"dryRun":true}`},
		{"POST", "/v1/artifacts/delete", `{"artifactId":"a"}`},
		{"POST", "/v1/artifacts/delete-run", `{"runId":"r"}`},
		{"DELETE", "/v1/blobs/obj/a", ""},
		{"POST", "/v1/instances/delete", `{"key":"k"}`},
		{"POST", "/v1/checkpoints/delete-head", `{"threadId":"t","checkpointId":"c1","writer":W(t)}`},
		{"POST", "/v1/checkpoints/delete", `{"threadId":"t","keep":0,"writer":W(t)}`},
		{"POST", "/v1/leases/release", `{"writer":W(t)}`},
		{"POST", "/v1/leases/unlock", `{"threadId":"t"}`},
		{"GET", "/v1/threads/none", ""}, // no route: 404 either way
	}
	// The owner tokens of the test store's leases and the reference's, by
	// thread: W(thread) in a body is that thread's writer, and a token in
	// a response reads TOKEN(thread).
	tokens := [2]map[string]string{{}, {}}
	for _, st := range steps {
		var got [2]reply
		for i := range got {
			body := st.body
			for th, tok := range tokens[i] {
				body = strings.ReplaceAll(body, "W("+th+")", mustJSON(t, lease.Writer{ThreadID: th, OwnerToken: tok, Fence: 1}))
			}
			if i == 0 {
				got[i] = m.req(st.method, st.path, body, HeaderTestStore, id, HeaderNow, "1000")
			} else {
				got[i] = do(t, ref.http, st.method, "http://sbxdb"+st.path, body)
			}
			if st.path == "/v1/leases/acquire" {
				l := decodeLease(t, got[i])
				tokens[i][l.ThreadID] = l.OwnerToken
			}
			for th, tok := range tokens[i] {
				got[i].body = []byte(strings.ReplaceAll(string(got[i].body), tok, "TOKEN("+th+")"))
			}
		}
		if got[0].status != got[1].status || string(got[0].body) != string(got[1].body) {
			t.Errorf("%s %s: the test store answered %d %s; a store of its own answers %d %s",
				st.method, st.path, got[0].status, got[0].body, got[1].status, got[1].body)
		}
		if got[0].status >= 300 && st.path != "/v1/threads/none" {
			t.Errorf("%s %s: %d %s", st.method, st.path, got[0].status, got[0].body)
		}
	}
	if after := m.realState(); after != before {
		t.Errorf("the served store changed:\n%s\nwas:\n%s", after, before)
	}

	// Health, metrics and the test store endpoints are the server's own.
	for _, hdr := range [][]string{{HeaderTestStore, id}, {HeaderTestStore, "unknown"}, {HeaderNow, "5"}} {
		var h healthJSON
		if r := m.req("GET", "/v1/health", "", hdr...); r.status != 200 || json.Unmarshal(r.body, &h) != nil || h.Store != m.db.Dir() {
			t.Errorf("health with %q: %d %s, want the served store %s", hdr, r.status, r.body, m.db.Dir())
		}
		if r := m.req("GET", "/metrics", "", hdr...); r.status != 200 || !strings.Contains(string(r.body), "sbxdb_http_requests_total") {
			t.Errorf("metrics with %q: %d", hdr, r.status)
		}
	}
	r := m.req("POST", "/v1/test/stores", `{}`, HeaderTestStore, "unknown", HeaderNow, "x")
	if r.status != 200 {
		t.Errorf("create with test mode's headers: %d %s", r.status, r.body)
	}
	// A wrong method on a store's path is 405 whatever the store.
	r = m.req("GET", "/v1/checkpoints/get", "", HeaderTestStore, id)
	if r.status != 405 || r.header.Get("Allow") != "POST" {
		t.Errorf("GET of a POST route on a test store: %d, Allow %q", r.status, r.header.Get("Allow"))
	}
}

// TestTestStoresAreIsolated: what a client writes into one test store is
// seen in neither another nor the served store.
func TestTestStoresAreIsolated(t *testing.T) {
	m := newTestMode(t, Options{TestStores: true})
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(1000)
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	before := m.realState()
	a := m.client(m.create(`{"leaseDurationMs": 100, "renewAfterMs": 25}`), now)
	b := m.client(m.create(`{}`), now)
	real := m.client("", nil)

	l, err := a.AcquireWriter(ctx, "t")
	if err != nil || l.Fence != 1 || !l.ExpiresAt().Equal(time.UnixMilli(1100)) {
		t.Fatalf("acquire in a at 1000: %+v, %v", l, err)
	}
	cp := &chain.Checkpoint{ID: "c1", ThreadID: "t", CreatedAt: 5, Reason: chain.ReasonAutomatic}
	if _, err := a.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveThread(ctx, "t", []json.RawMessage{json.RawMessage(`{"role":"user"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutObject(ctx, "obj/a", strings.NewReader("hello"), sbxdb.PutObjectOptions{Size: 5}); err != nil {
		t.Fatal(err)
	}
	clock.Store(1099)
	if _, err := a.AcquireWriter(ctx, "t"); !errors.Is(err, chain.ErrWriterConflict) {
		t.Errorf("acquire in a at 1099: %v, want WRITER_CONFLICT", err)
	}

	for name, c := range map[string]*client.Client{"b": b, "the served store": real} {
		if th, err := c.Threads(ctx); err != nil || slicesContain(th, "t") {
			t.Errorf("%s: threads %q, %v", name, th, err)
		}
		if got, err := c.Get(ctx, "c1"); err != nil || got != nil {
			t.Errorf("%s: get c1 %+v, %v", name, got, err)
		}
		if msgs, err := c.LoadThread(ctx, "t"); err != nil || len(msgs) != 0 {
			t.Errorf("%s: transcript %q, %v", name, msgs, err)
		}
		if _, err := c.StatObject(ctx, "obj/a"); !errors.Is(err, sbxdb.ErrBlobNotFound) {
			t.Errorf("%s: stat obj/a: %v, want not found", name, err)
		}
		// b's lease of "t" is its own: the default timings, at 1099.
		if name == "b" {
			if l, err := c.AcquireWriter(ctx, "t"); err != nil || l.Fence != 1 || !l.ExpiresAt().Equal(time.UnixMilli(1099+120000)) {
				t.Errorf("acquire in b: %+v, %v", l, err)
			}
		}
	}
	if after := m.realState(); after != before {
		t.Errorf("the served store changed:\n%s\nwas:\n%s", after, before)
	}
	if th, err := a.Threads(ctx); err != nil || !cmp.Equal(th, []string{"t"}) {
		t.Errorf("a: threads %q, %v", th, err)
	}
}

func slicesContain(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

// TestTestStoreOptionsRefused: timings the contract refuses are 400
// SBXDB_BAD_REQUEST, and make no store and no directory.
func TestTestStoreOptionsRefused(t *testing.T) {
	m := newTestMode(t, Options{TestStores: true})
	first := m.create(`{"leaseDurationMs": 100, "renewAfterMs": 25}`)
	for _, tc := range []struct{ body, msg string }{
		{`{"leaseDurationMs": 0}`, "sbxdb: invalid options: leaseDurationMs 0 must be from 1 to 9223372036854"},
		{`{"renewAfterMs": 0}`, "sbxdb: invalid options: renewAfterMs 0 must be from 1 to 9223372036854"},
		{`{"leaseDurationMs": -1}`, "sbxdb: invalid options: leaseDurationMs -1 must be from 1 to 9223372036854"},
		{`{"leaseDurationMs": 9223372036855}`, "sbxdb: invalid options: leaseDurationMs 9223372036855 must be from 1 to 9223372036854"},
		{`{"leaseDurationMs": 1.5}`, "sbxdb: invalid options: leaseDurationMs must be an integer number of milliseconds"},
		{`{"leaseDurationMs": "100"}`, "sbxdb: invalid options: leaseDurationMs must be an integer number of milliseconds"},
		{`{"renewAfterMs": 1e400}`, "sbxdb: invalid options: renewAfterMs must be an integer number of milliseconds"},
		{`{"renewAfterMs": true}`, "sbxdb: invalid options: renewAfterMs must be an integer number of milliseconds"},
		{`{"leaseDurationMs": 100, "renewAfterMs": 100}`, "sbxdb: invalid options: RenewAfter 100ms must be below LeaseDuration 100ms"},
		{`{"leaseDurationMs": 100, "renewAfterMs": 250}`, "sbxdb: invalid options: RenewAfter 250ms must be below LeaseDuration 100ms"},
		{`{"leaseDurationMs": 30000}`, "sbxdb: invalid options: RenewAfter 45s must be below LeaseDuration 30s"},
		{`[]`, "the request body must be a JSON object"},
		{``, "the request body must be a JSON object"},
		{`{"leaseDurationMs": 100,`, "the request body must be a JSON object"},
	} {
		r := m.req("POST", "/v1/test/stores", tc.body)
		var e ErrorBody
		if r.status != 400 || json.Unmarshal(r.body, &e) != nil || e.Code != CodeBadRequest || !strings.HasPrefix(e.Message, tc.msg) {
			t.Errorf("create %s: %d %s, want 400 %s %q", tc.body, r.status, r.body, CodeBadRequest, tc.msg)
		}
	}
	if d := m.dirs(); !cmp.Equal(d, []string{first}) {
		t.Errorf("directories after the refusals: %q, want only %s", d, first)
	}
	if n := len(m.s.tests.stores); n != 1 {
		t.Errorf("%d stores after the refusals, want 1", n)
	}
}

// TestTestStoreDelete: deleting a store closes it and removes its
// directory; an unknown or deleted store is 404 SBXDB_NOT_FOUND naming
// it, and deleting it again is 204.
func TestTestStoreDelete(t *testing.T) {
	m := newTestMode(t, Options{TestStores: true})
	id, other := m.create(`{}`), m.create(`{}`)
	if r := m.req("POST", "/v1/instances/upsert", `{"key":"k","provider":"p","providerSandboxId":"s","threadId":"t","updatedAt":7}`, HeaderTestStore, other); r.status != 200 {
		t.Fatalf("upsert into %s: %d %s", other, r.status, r.body)
	}
	for _, name := range []string{"0123456789abcdef0123456789abcdef", "", "../" + id} {
		r := m.req("GET", "/v1/threads", "", HeaderTestStore, name)
		var e ErrorBody
		if want := fmt.Sprintf("no test store %q", name); r.status != 404 || json.Unmarshal(r.body, &e) != nil || e.Code != CodeNoTestStore || e.Message != want {
			t.Errorf("threads of store %q: %d %s, want 404 %q", name, r.status, r.body, want)
		}
	}
	for range 2 {
		if r := m.req("DELETE", "/v1/test/stores/"+id, ""); r.status != 204 || len(r.body) != 0 {
			t.Errorf("delete %s: %d %s, want 204", id, r.status, r.body)
		}
	}
	if r := m.req("DELETE", "/v1/test/stores/unknown", ""); r.status != 204 {
		t.Errorf("delete of an unknown store: %d %s, want 204", r.status, r.body)
	}
	if r := m.req("GET", "/v1/threads", "", HeaderTestStore, id); r.status != 404 || r.code(t) != CodeNoTestStore {
		t.Errorf("threads of a deleted store: %d %s, want 404", r.status, r.body)
	}
	if d := m.dirs(); !cmp.Equal(d, []string{other}) {
		t.Errorf("directories after the delete: %q, want only %s", d, other)
	}
	r := m.req("POST", "/v1/instances/get", `{"key":"k"}`, HeaderTestStore, other)
	if r.status != 200 || !strings.Contains(string(r.body), `"providerSandboxId":"s"`) {
		t.Errorf("the other store after the delete: %d %s", r.status, r.body)
	}
}

// TestTestStoreHeadersRefused: a clock that is not a safe integer, a
// header sent twice, and a clock without a test store are 400
// SBXDB_BAD_REQUEST, changing neither the store nor its clock.
func TestTestStoreHeadersRefused(t *testing.T) {
	m := newTestMode(t, Options{TestStores: true})
	before := m.realState()
	id := m.create(`{"leaseDurationMs": 100, "renewAfterMs": 25}`)
	if r := m.req("GET", "/v1/leases", "", HeaderTestStore, id, HeaderNow, "1000"); r.status != 200 {
		t.Fatalf("setting the clock: %d %s", r.status, r.body)
	}
	acquire := func(header ...string) reply {
		return m.req("POST", "/v1/leases/acquire", `{"threadId":"t"}`, header...)
	}
	for _, now := range []string{"", "abc", "1.5", "+5", "1e3", "0x10", "1_000", "9007199254740992", "-9007199254740992", "99999999999999999999"} {
		r := acquire(HeaderTestStore, id, HeaderNow, now)
		if r.status != 400 || r.code(t) != CodeBadRequest || !strings.Contains(string(r.body), HeaderNow) {
			t.Errorf("%s %q: %d %s, want 400 %s", HeaderNow, now, r.status, r.body, CodeBadRequest)
		}
	}
	// Sent twice.
	for _, name := range []string{HeaderTestStore, HeaderNow} {
		req, err := http.NewRequest("POST", "http://sbxdb/v1/leases/acquire", strings.NewReader(`{"threadId":"t"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(HeaderTestStore, id)
		req.Header.Set(HeaderNow, "5")
		req.Header.Add(name, req.Header.Get(name))
		resp, err := m.u.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get(HeaderCode) != CodeBadRequest {
			t.Errorf("%s twice: %d %s", name, resp.StatusCode, resp.Header.Get(HeaderCode))
		}
	}
	// A clock for the served store.
	r := acquire(HeaderNow, "5")
	if r.status != 400 || r.code(t) != CodeBadRequest {
		t.Errorf("%s without %s: %d %s, want 400", HeaderNow, HeaderTestStore, r.status, r.body)
	}
	if after := m.realState(); after != before {
		t.Errorf("the served store changed:\n%s\nwas:\n%s", after, before)
	}
	// Nothing was acquired, and the clock still reads 1000.
	if r := m.req("GET", "/v1/leases", "", HeaderTestStore, id); strings.TrimSpace(string(r.body)) != `{"leases":{}}` {
		t.Errorf("leases after the refusals: %s", r.body)
	}
	if l := decodeLease(t, acquire(HeaderTestStore, id)); l.ExpiresAt != 1100 {
		t.Errorf("acquire after the refusals: expiresAt %d, want 1100 (the clock at 1000)", l.ExpiresAt)
	}
}

// TestTestStoreLimit: one store over the limit is 503 SBXDB_UNAVAILABLE
// and makes nothing; deleting one makes room.
func TestTestStoreLimit(t *testing.T) {
	m := newTestMode(t, Options{TestStores: true})
	m.s.tests.limit = 3
	var ids []string
	for range 3 {
		ids = append(ids, m.create(`{}`))
	}
	r := m.req("POST", "/v1/test/stores", `{}`)
	if r.status != 503 || r.code(t) != CodeUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("a store over the limit: %d %s, want 503 %s with Retry-After", r.status, r.body, CodeUnavailable)
	}
	if n := len(m.dirs()); n != 3 {
		t.Errorf("%d directories, want 3", n)
	}
	if r := m.req("DELETE", "/v1/test/stores/"+ids[1], ""); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	m.create(`{}`)
}

// TestTestStoresClosedWithTheServer: when Serve returns, every test store
// is closed and their directory is gone; Close then makes none.
func TestTestStoresClosedWithTheServer(t *testing.T) {
	m := newTestMode(t, Options{TestStores: true})
	id := m.create(`{}`)
	if r := m.req("PUT", "/v1/blobs/obj/a", "hello", HeaderTestStore, id); r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	m.s.tests.mu.Lock()
	base, ts := m.s.tests.base, m.s.tests.stores[id]
	m.s.tests.mu.Unlock()
	if fi, err := os.Stat(base); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the test stores' directory: %v, %v; want mode 0700", fi, err)
	}
	m.u.stop()
	if err := <-m.u.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	m.u.served <- nil // for serveUnix's cleanup, which waits for Serve's result
	if _, err := os.Stat(base); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the test stores' directory outlived the server: %v", err)
	}
	if _, err := ts.db.Threads(context.Background()); err == nil {
		t.Errorf("the test store after the server stopped: %v, want closed", err)
	}
	if _, err := m.s.tests.create(engine.Options{NoSync: true}, m.s.testStoreServer); Code(err) != CodeUnavailable {
		t.Errorf("create after Close: %v, want %s", err, CodeUnavailable)
	}
	if err := m.s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// TestNoTestModeRefuses: a server without test mode refuses, with 403
// SBXDB_FORBIDDEN and before any handler, every request under /v1/test/
// and every request carrying a header of test mode, however its store
// route would answer; the store is unchanged.
func TestNoTestModeRefuses(t *testing.T) {
	m := newTestMode(t, Options{})
	w := writer(t, m.db, "held")
	before := m.realState()
	wj := mustJSON(t, w)
	const cp = `{"id":"x","threadId":"held","parentCheckpointId":null,"createdAt":5,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`
	for _, tc := range []struct {
		method, path, body string
		header             []string
	}{
		{"POST", "/v1/test/stores", `{}`, nil},
		{"POST", "/v1/test/stores", `{"leaseDurationMs": 100, "renewAfterMs": 25}`, nil},
		{"DELETE", "/v1/test/stores/0123456789abcdef0123456789abcdef", "", nil},
		{"GET", "/v1/test/stores", "", nil},
		{"GET", "/v1/test", "", nil},
		{"POST", "/v1/checkpoints/append", `{"checkpoint":` + cp + `,"expectedHeadId":null,"writer":` + wj + `}`, []string{HeaderTestStore, "0123456789abcdef0123456789abcdef"}},
		{"POST", "/v1/leases/acquire", `{"threadId":"t"}`, []string{HeaderTestStore, "x"}},
		{"POST", "/v1/leases/acquire", `{"threadId":"t"}`, []string{HeaderNow, "5"}},
		{"POST", "/v1/leases/acquire", `{"threadId":"t"}`, []string{HeaderNow, "not a time"}},
		{"POST", "/v1/leases/acquire", `{"threadId":"t"}`, []string{HeaderTestStore, ""}},
		{"PUT", "/v1/blobs/obj/a", "hello", []string{HeaderTestStore, "x"}},
		{"POST", "/v1/gc", `{"retain":true,"keep":0,"immediate":true}`, []string{HeaderNow, "99999999"}},
		{"GET", "/v1/health", "", []string{HeaderTestStore, "x"}},
		{"GET", "/v1/threads", "", []string{HeaderTestStore, "x", HeaderNow, "5"}},
	} {
		r := m.req(tc.method, tc.path, tc.body, tc.header...)
		var e ErrorBody
		if r.status != 403 || json.Unmarshal(r.body, &e) != nil || e.Code != CodeForbidden || e.Message != "test stores need sbxdb serve --test" {
			t.Errorf("%s %s %q: %d %s, want 403 %s", tc.method, tc.path, tc.header, r.status, r.body, CodeForbidden)
		}
	}
	if after := m.realState(); after != before {
		t.Errorf("the refused requests changed the store:\n%s\nwas:\n%s", after, before)
	}
	if h := head(t, m.db, "held"); h != "" {
		t.Errorf("the refused append appended: head %q", h)
	}
	if m.s.tests != nil {
		t.Errorf("a server without test mode has test stores")
	}
	// The client's CreateTestStore says so with ErrForbidden.
	_, err := m.client("", nil).CreateTestStore(context.Background(), client.TestStoreOptions{})
	wantCode(t, "CreateTestStore without test mode", err, CodeForbidden, client.ErrForbidden)
}

// TestTestStoresConcurrently: stores created, used and deleted from many
// goroutines at once end as the requests say: each store holds only its
// own writes, and the deleted ones are gone with their directories.
func TestTestStoresConcurrently(t *testing.T) {
	m := newTestMode(t, Options{TestStores: true})
	const workers, rounds = 4, 5
	errs := make(chan error, workers)
	kept := make(chan string, workers*rounds)
	for g := range workers {
		go func() {
			errs <- func() error {
				for i := range rounds {
					r, err := send(m.u.http, "POST", "http://sbxdb/v1/test/stores", `{}`)
					if err != nil || r.status != 200 {
						return fmt.Errorf("create: %d %s %v", r.status, r.body, err)
					}
					var out struct{ Store string }
					if err := json.Unmarshal(r.body, &out); err != nil {
						return err
					}
					thread := fmt.Sprintf("w%d-%d", g, i)
					r, err = send(m.u.http, "POST", "http://sbxdb/v1/leases/acquire", `{"threadId":"`+thread+`"}`, HeaderTestStore, out.Store)
					if err != nil || r.status != 200 {
						return fmt.Errorf("acquire: %d %s %v", r.status, r.body, err)
					}
					if i%2 == 1 {
						if r, err = send(m.u.http, "DELETE", "http://sbxdb/v1/test/stores/"+out.Store, ""); err != nil || r.status != 204 {
							return fmt.Errorf("delete: %d %s %v", r.status, r.body, err)
						}
						continue
					}
					kept <- out.Store + " " + thread
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(kept)
	var ids []string
	for k := range kept {
		id, thread, _ := strings.Cut(k, " ")
		ids = append(ids, id)
		r := m.req("GET", "/v1/leases", "", HeaderTestStore, id)
		var got struct{ Leases map[string]json.RawMessage }
		if json.Unmarshal(r.body, &got) != nil || len(got.Leases) != 1 || got.Leases[thread] == nil {
			t.Errorf("store %s: %d %s, want the lease of %s alone", id, r.status, r.body, thread)
		}
	}
	if d := m.dirs(); len(d) != len(ids) || len(ids) != workers*(rounds+1)/2 {
		t.Errorf("directories %q, want the %d kept stores %q", d, len(ids), ids)
	}
}
