// Package server serves one open store over HTTP/1.1 + JSON, as
// docs/API.md describes endpoint by endpoint: the contract's methods,
// writer leases, transcripts and instances, artifact records, blobs and
// plain objects, maintenance, and capture and restore of directories on
// this machine.
//
// The server keeps no state of its own beyond its connections (and, in
// test mode, the test stores it opened: teststores.go): each request is
// one call of the engine's API (engine.DB), whose checks run in the
// contract's order and whose writes are one transaction each. A request
// body is decoded so that nothing is lost or guessed (chain.WireString,
// chain.WireInt, chain.Writer): the engine's validators give every verdict,
// so an invalid request fails here exactly as it fails embedded.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sbxdb/sbxdb/engine"
)

// DefaultMaxJSONBytes bounds a JSON request body: a checkpoint record's
// limit (chain.MaxRecordBytes) with room for the request around it.
const DefaultMaxJSONBytes = 256<<20 + 1<<20

// Defaults of the Options that have one.
const (
	DefaultMaxRequests = 256
	DefaultGrace       = 30 * time.Second
)

// Options configure a Server. The zero value serves with the defaults.
type Options struct {
	// Logger receives one structured line per request; nil logs nothing.
	Logger *slog.Logger
	// MaxJSONBytes bounds a JSON request body; 0 means DefaultMaxJSONBytes.
	MaxJSONBytes int64
	// MaxRequests bounds the requests served at once; 0 means
	// DefaultMaxRequests. A request that finds them all busy waits up to
	// 5 s for one to finish, then is SBXDB_UNAVAILABLE.
	MaxRequests int
	// Version is reported by /v1/health.
	Version string
	// Token, when set, must be sent as "Authorization: Bearer Token" by
	// every request that does not come on a unix socket, /v1/health
	// excepted.
	Token string
	// AllowDirs are the directories below which a request that does not
	// come on a unix socket may capture or restore. Each is resolved
	// (symlinks, then Clean) when the server is made; none means that
	// such requests may touch no directory.
	AllowDirs []string
	// Registry receives the server's metrics, served at /metrics; nil
	// makes a private registry for this server (with the Go runtime's and
	// the process's collectors).
	Registry *prometheus.Registry
	// Grace is how long Serve lets requests in flight finish once it is
	// told to stop, before it cancels them; 0 means DefaultGrace, and a
	// negative one none: they are cancelled at once.
	Grace time.Duration
	// MaxConns caps the connections open at once on the listeners Serve
	// serves, all together; 0 means MaxConnsFor the process's limit of
	// open files. At the cap, a new connection takes the place of the
	// oldest one that has not authenticated (connLimiter).
	MaxConns int
	// AuthTimeout is how long a TCP connection may stay open before it
	// sends an authenticated request (any request when no Token is set;
	// /v1/health does not count); 0 means DefaultAuthTimeout.
	AuthTimeout time.Duration
	// MaxBodyBytesInFlight bounds the bytes of the JSON request bodies the
	// server holds at once, each counted from its Content-Length (or as it
	// is read, when the request sends none); bodies under 64 KiB are not
	// counted. 0 means DefaultMaxBodyBytesInFlight; a negative one sets no
	// bound. A request whose body does not fit waits up to 5 s for the
	// bodies in flight to shrink, then is 503 SBXDB_UNAVAILABLE with
	// Retry-After, having read nothing; one whose body is larger than the
	// bound itself is 413 SBXDB_TOO_LARGE. A request holds its body's share
	// until its handler returns, and holds, while the engine runs it, up to
	// a few times its body in memory (docs/API.md).
	MaxBodyBytesInFlight int64
	// TestStores serves test stores (teststores.go, docs/API.md, Test
	// mode): fresh stores of their own, each with its own clock and lease
	// timings, for conformance suites. Without it, every request that
	// names a test store or sets a clock is refused, SBXDB_FORBIDDEN.
	TestStores bool
	// NoRecover leaves a poisoned store poisoned (sbxdb.ErrPoisoned),
	// for a caller that stops instead (serve --exit-on-poison). Without
	// it, the server reopens the store in place once the cause clears
	// (engine.DB.RecoverLoop: from 100 ms, doubling to 30 s, jittered),
	// until the store is closed.
	NoRecover bool
}

// Server serves one store. Its handler is safe for concurrent use.
type Server struct {
	db        *engine.DB
	opts      Options
	allowDirs []string // opts.AllowDirs resolved
	mux       *http.ServeMux
	handler   http.Handler
	metrics   *metrics

	slots    chan struct{} // one per request being served (MaxRequests)
	slotWait time.Duration // how long a request waits for a slot
	stopping atomic.Bool   // Serve was told to stop: new requests are refused
	requests tracker       // the requests being served
	tests    *testStores   // the test stores; nil without Options.TestStores
	parent   *Server       // for a test store's server, the server that opened it
	auth     *authLimiter  // the backoff of failed authentications
	conns    *connLimiter  // the connections Serve accepted
	body     *bodyBudget   // the JSON bodies in memory (MaxBodyBytesInFlight)

	scrubMu sync.Mutex
	scrub   *scrubber // the background scrub (scrub.go); nil if none runs

	hooks hooks // test hooks; all nil when serving
}

// hooks let tests stop a request at a chosen point.
type hooks struct {
	// waiting is called when a request starts waiting for a slot.
	waiting func()
	// progress is called with the request's context each time an
	// operation reports progress.
	progress func(r *http.Request)
	// bodyWaiting is called when a request starts waiting for room in the
	// body budget.
	bodyWaiting func()
}

// New returns a server of db. The caller keeps db open while the server
// runs and closes it after.
func New(db *engine.DB, opts Options) *Server {
	if opts.MaxJSONBytes <= 0 {
		opts.MaxJSONBytes = DefaultMaxJSONBytes
	}
	if opts.MaxRequests <= 0 {
		opts.MaxRequests = DefaultMaxRequests
	}
	if opts.Grace == 0 {
		opts.Grace = DefaultGrace
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = MaxConnsFor(openFileLimit())
	}
	if opts.AuthTimeout <= 0 {
		opts.AuthTimeout = DefaultAuthTimeout
	}
	if opts.MaxBodyBytesInFlight == 0 {
		opts.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	s := &Server{db: db, opts: opts, mux: http.NewServeMux(),
		slots: make(chan struct{}, opts.MaxRequests), slotWait: 5 * time.Second, auth: newAuthLimiter(),
		body: newBodyBudget(opts.MaxBodyBytesInFlight, 5*time.Second)}
	for _, d := range opts.AllowDirs {
		s.allowDirs = append(s.allowDirs, resolvePrefix(d))
	}
	if opts.TestStores {
		var logDir func(string)
		if l := opts.Logger; l != nil {
			logDir = func(dir string) { l.Info("test stores", "dir", dir) }
		}
		s.tests = newTestStores(logDir)
	}
	if !opts.NoRecover {
		go db.RecoverLoop(context.Background(), engine.RecoverOptions{Attempted: s.recoverAttempted})
	}
	s.metrics = newMetrics(s, opts.Registry)
	s.conns = newConnLimiter(opts.MaxConns, opts.AuthTimeout, func(reason string) {
		s.metrics.connsClosed.WithLabelValues(reason).Inc()
	})
	s.routes()
	s.testStoreRoutes()
	s.handler = s.middleware(s.mux)
	return s
}

// recoverAttempted logs the outcome of an attempt to reopen the poisoned
// store.
func (s *Server) recoverAttempted(err error) {
	if l := s.opts.Logger; l != nil {
		if err != nil {
			l.Warn("store poisoned; reopening failed, will retry", "err", err)
		} else {
			l.Info("store reopened after it was poisoned", "recoveries", s.db.Recoveries())
		}
	}
}

// resolvePrefix returns dir absolute, its symlinks resolved, and clean; a
// directory that does not exist is only made absolute and clean.
func resolvePrefix(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	return filepath.Clean(dir)
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handler.ServeHTTP(w, r)
}
