package server

// Test stores (docs/API.md, Test mode): a server made with
// Options.TestStores (sbxdb serve --test) opens, on request, fresh stores
// of their own beside the one it serves, each with its own clock and lease
// timings, so that a conformance suite gets an isolated store per case and
// drives its clock. A request naming a test store in HeaderTestStore is
// served by that store's own handlers; a server without test mode refuses
// every request that names one, or sets a clock, before any handler runs.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/wire"
)

// Header names of test mode: internal/wire's.
const (
	HeaderTestStore = wire.HeaderTestStore
	HeaderNow       = wire.HeaderNow
)

// MaxTestStores bounds the test stores open at once in one server.
const MaxTestStores = 4096

// The routes of test mode, and the prefix of every path that is.
const (
	createTestStoreRoute = "POST /v1/test/stores"
	deleteTestStoreRoute = "DELETE /v1/test/stores/{id}"
	testPathPrefix       = "/v1/test/"
)

// notStoreRoutes are the routes that are not about a store: they are
// served by the server itself whatever test store a request names. Every
// other route is a store's, and a request naming a test store is served by
// that store's handlers.
var notStoreRoutes = map[string]bool{
	healthRoute:          true,
	"GET /metrics":       true, // admin.go
	createTestStoreRoute: true,
	deleteTestStoreRoute: true,
	catchAllRoute:        true, // no route: 404 or 405, whatever the store
	"":                   true, // a redirect of an unclean path
}

// maxSafeInt is the largest integer a JavaScript number holds exactly.
const maxSafeInt = 1<<53 - 1

// errNeedsTestMode is the refusal of test mode's requests by a server
// without it.
func errNeedsTestMode() error {
	return errorf(CodeForbidden, "test stores need sbxdb serve --test")
}

// testStoreRoutes registers the endpoints that create and delete test
// stores. They are registered whether or not the server is in test mode:
// without it, the middleware refuses every path under testPathPrefix
// before any handler runs (refuseTestMode).
func (s *Server) testStoreRoutes() {
	s.handle(createTestStoreRoute, s.createTestStore)
	s.mux.HandleFunc(deleteTestStoreRoute, s.deleteTestStore)
}

// refuseTestMode returns the refusal of a request that needs test mode on
// a server without it: a path under testPathPrefix, or either header of
// test mode, present even empty. It returns nil in test mode.
func (s *Server) refuseTestMode(r *http.Request) error {
	if s.tests != nil {
		return nil
	}
	if len(r.Header.Values(HeaderTestStore)) > 0 || len(r.Header.Values(HeaderNow)) > 0 ||
		r.URL.Path+"/" == testPathPrefix || strings.HasPrefix(r.URL.Path, testPathPrefix) {
		return errNeedsTestMode()
	}
	return nil
}

// serveTestStore serves r by the test store it names, when the server is
// in test mode, route is a store's, and r carries HeaderTestStore or
// HeaderNow; it reports whether it did (or refused r), so that the caller
// serves r itself only when it did not. HeaderNow without HeaderTestStore
// is refused: the clock of the server's own store is the wall clock.
func (s *Server) serveTestStore(w http.ResponseWriter, r *http.Request, route string) bool {
	if s.tests == nil || notStoreRoutes[route] {
		return false
	}
	ids, nows := r.Header.Values(HeaderTestStore), r.Header.Values(HeaderNow)
	if len(ids) == 0 && len(nows) == 0 {
		return false
	}
	fail := func(err error) bool {
		writeError(w, err)
		return true
	}
	switch {
	case len(ids) == 0:
		return fail(errorf(CodeBadRequest, "%s is set only with %s: the server's own store keeps the wall clock", HeaderNow, HeaderTestStore))
	case len(ids) > 1:
		return fail(errorf(CodeBadRequest, "%s is sent %d times; send it once", HeaderTestStore, len(ids)))
	case len(nows) > 1:
		return fail(errorf(CodeBadRequest, "%s is sent %d times; send it once", HeaderNow, len(nows)))
	}
	now, hasNow := int64(0), len(nows) == 1
	if hasNow {
		var err error
		if now, err = parseNow(nows[0]); err != nil {
			return fail(err)
		}
	}
	ts := s.tests.use(ids[0])
	if ts == nil {
		return fail(errorf(CodeNoTestStore, "no test store %q", ids[0]))
	}
	defer ts.inUse.RUnlock()
	if hasNow {
		ts.clock.set(now)
	}
	ts.srv.mux.ServeHTTP(w, r)
	return true
}

// parseNow parses a HeaderNow value: a decimal integer of at most 2^53−1
// in magnitude, with an optional leading "-".
func parseNow(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || v[0] == '+' || n > maxSafeInt || n < -maxSafeInt {
		return 0, errorf(CodeBadRequest, "%s %q is not a safe integer of epoch milliseconds", HeaderNow, v)
	}
	return n, nil
}

// testStoreRequest is the body of POST /v1/test/stores. An absent or null
// member takes the engine's default.
type testStoreRequest struct {
	LeaseDurationMs *chain.WireInt `json:"leaseDurationMs"`
	RenewAfterMs    *chain.WireInt `json:"renewAfterMs"`
}

// testStoreJSON is the response of POST /v1/test/stores.
type testStoreJSON struct {
	Store string `json:"store"`
}

func (s *Server) createTestStore(r *http.Request) (any, error) {
	if s.tests == nil {
		return nil, errNeedsTestMode()
	}
	var in testStoreRequest
	if err := s.decode(r, &in); err != nil {
		return nil, err
	}
	lease, err := optionMs("leaseDurationMs", in.LeaseDurationMs)
	if err != nil {
		return nil, err
	}
	renew, err := optionMs("renewAfterMs", in.RenewAfterMs)
	if err != nil {
		return nil, err
	}
	opts := engine.Options{NoSync: true, LeaseDuration: lease, RenewAfter: renew}
	if _, err := engine.CheckOptions(&opts); err != nil {
		return nil, errorf(CodeBadRequest, "%v", err)
	}
	id, err := s.tests.create(opts, s.testStoreServer)
	if err != nil {
		return nil, err
	}
	return testStoreJSON{Store: id}, nil
}

// optionMs returns the duration of a lease option in milliseconds: 0 (the
// engine's default) when it is absent or null; an error wrapping
// sbxdb.ErrInvalidOptions when it is not an integer from 1 to the largest
// number of milliseconds a time.Duration holds. The engine reads a zero
// duration as its default, so that 0 is refused here, as the contract
// refuses it.
func optionMs(name string, v *chain.WireInt) (time.Duration, error) {
	const maxMs = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case v == nil:
		return 0, nil
	case *v == chain.NotAnInt:
		return 0, errorf(CodeBadRequest, "%v: %s must be an integer number of milliseconds", sbxdb.ErrInvalidOptions, name)
	case *v < 1 || int64(*v) > maxMs:
		return 0, errorf(CodeBadRequest, "%v: %s %d must be from 1 to %d", sbxdb.ErrInvalidOptions, name, int64(*v), maxMs)
	}
	return time.Duration(*v) * time.Millisecond, nil
}

func (s *Server) deleteTestStore(w http.ResponseWriter, r *http.Request) {
	if s.tests == nil {
		writeError(w, errNeedsTestMode())
		return
	}
	if err := s.tests.delete(r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// testStoreServer returns the server of a test store's db: this server's
// handlers, without test mode, logging nothing and recording metrics in a
// registry of its own. Only its mux is used: this server's middleware has
// observed, authorized and admitted each request it serves.
func (s *Server) testStoreServer(db *engine.DB) *Server {
	opts := s.opts
	opts.TestStores = false
	opts.Logger = nil
	opts.Token = ""
	opts.MaxRequests = 1
	opts.Registry = prometheus.NewRegistry()
	srv := New(db, opts)
	srv.parent = s
	srv.body = s.body // one budget for every body the process holds
	return srv
}

// Close closes the test stores and removes their directory; afterwards
// the server creates none. Serve calls it once every request has
// returned; a caller that serves the Server as a plain handler calls it
// when done. It does nothing without test mode, and is safe to call more
// than once.
func (s *Server) Close() error {
	if s.tests == nil {
		return nil
	}
	return s.tests.close()
}

// testClock is a test store's clock: the latest HeaderNow its requests
// carried, or the wall clock until one does. It is safe for concurrent
// use; concurrent requests carrying different times leave either.
type testClock struct {
	ms atomic.Int64 // wallClock until set
}

// wallClock is what a testClock holds until it is set: no safe integer.
const wallClock = math.MinInt64

func newTestClock() *testClock {
	c := &testClock{}
	c.ms.Store(wallClock)
	return c
}

func (c *testClock) set(ms int64) { c.ms.Store(ms) }

func (c *testClock) now() time.Time {
	if ms := c.ms.Load(); ms != wallClock {
		return time.UnixMilli(ms)
	}
	return time.Now()
}

// testStore is one open test store.
type testStore struct {
	dir   string // its directory, below testStores.base
	db    *engine.DB
	srv   *Server // the server of db (testStoreServer)
	clock *testClock
	// inUse is read-held by each request the store serves; delete and
	// close take it to close db once none is.
	inUse sync.RWMutex
}

// testStores are the test stores of a server, by id.
type testStores struct {
	logger func(dir string) // told the directory when it is made; may be nil

	mu      sync.Mutex
	base    string   // the private directory holding every store; "" until the first
	owner   *os.File // holds base's owner lock (lockOwner) while base exists
	stores  map[string]*testStore
	opening int  // stores being opened, counted against limit
	closed  bool // close was called: no store is created any more
	limit   int  // MaxTestStores; lowered by tests
	opens   sync.WaitGroup
}

func newTestStores(logger func(dir string)) *testStores {
	return &testStores{logger: logger, stores: map[string]*testStore{}, limit: MaxTestStores}
}

// create opens a new store with opts (valid: engine.CheckOptions accepted
// them) under its own clock and returns its id, 32 lowercase hex digits.
// serverOf makes the store's server. A store that fails to open leaves no
// directory.
func (t *testStores) create(opts engine.Options, serverOf func(*engine.DB) *Server) (string, error) {
	t.mu.Lock()
	switch {
	case t.closed:
		t.mu.Unlock()
		return "", errorf(CodeUnavailable, "the server is shutting down")
	case len(t.stores)+t.opening >= t.limit:
		t.mu.Unlock()
		return "", errorf(CodeUnavailable, "%d test stores are open, the most a server holds; delete one (DELETE /v1/test/stores/{id}) first", t.limit)
	}
	if t.base == "" {
		base, err := os.MkdirTemp("", testStoresPrefix) // mode 0700
		if err != nil {
			t.mu.Unlock()
			return "", fmt.Errorf("making the directory of the test stores: %w", err)
		}
		owner, err := lockOwner(base)
		if err != nil {
			os.RemoveAll(base)
			t.mu.Unlock()
			return "", fmt.Errorf("locking the directory of the test stores: %w", err)
		}
		t.base, t.owner = base, owner
		if t.logger != nil {
			t.logger(base)
		}
	}
	base := t.base
	t.opening++
	t.opens.Add(1)
	t.mu.Unlock()
	defer t.opens.Done()

	ts, id, err := openTestStore(base, opts, serverOf)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.opening--
	if err != nil {
		return "", err
	}
	t.stores[id] = ts
	return id, nil
}

// openTestStore opens a store in a new directory below base.
func openTestStore(base string, opts engine.Options, serverOf func(*engine.DB) *Server) (*testStore, string, error) {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	ts := &testStore{dir: filepath.Join(base, id), clock: newTestClock()}
	opts.Now = ts.clock.now
	db, err := engine.Open(ts.dir, &opts)
	if err != nil {
		os.RemoveAll(ts.dir)
		return nil, "", fmt.Errorf("opening a test store: %w", err)
	}
	ts.db, ts.srv = db, serverOf(db)
	return ts, id, nil
}

// dir returns the directory holding the test stores, "" until the first.
func (t *testStores) dir() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.base
}

// use returns the store id names, read-locked for one request (the caller
// unlocks ts.inUse), or nil when there is none. The lock is taken while
// the store is in the map, so that delete, which takes it out first,
// closes it only after every request that found it.
func (t *testStores) use(id string) *testStore {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.stores[id]
	if ts != nil {
		ts.inUse.RLock()
	}
	return ts
}

// delete closes the store id names, once the requests it serves have
// returned, and removes its directory. An unknown id is no error.
func (t *testStores) delete(id string) error {
	t.mu.Lock()
	ts := t.stores[id]
	delete(t.stores, id)
	t.mu.Unlock()
	if ts == nil {
		return nil
	}
	return ts.close()
}

// close closes every store, once the stores being opened are open, and
// removes the directory that holds them.
func (t *testStores) close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.opens.Wait()
	t.mu.Lock()
	stores, base, owner := t.stores, t.base, t.owner
	t.stores, t.base, t.owner = map[string]*testStore{}, "", nil
	t.mu.Unlock()
	var errs []error
	for _, ts := range stores {
		errs = append(errs, ts.close())
	}
	if base != "" {
		errs = append(errs, os.RemoveAll(base))
	}
	if owner != nil {
		owner.Close() // the directory is gone, or left for the next start to remove
	}
	return errors.Join(errs...)
}

// stopping marks every store's server as stopping, as Serve marks its own,
// so that an operation cancelled by the shutdown says so.
func (t *testStores) stopping() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ts := range t.stores {
		ts.srv.stopping.Store(true)
	}
}

// close closes the store once no request uses it, and removes its
// directory.
func (ts *testStore) close() error {
	ts.inUse.Lock()
	defer ts.inUse.Unlock()
	err := ts.db.Close()
	if rerr := os.RemoveAll(ts.dir); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("closing a test store: %w", err)
	}
	return nil
}
