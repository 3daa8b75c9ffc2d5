package server

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The routes the layers below treat apart.
const (
	// healthRoute needs no token and takes no slot, so that a probe
	// answers even when every slot is busy.
	healthRoute = "GET /v1/health"
	// catchAllRoute is the pattern of a request no endpoint matches.
	catchAllRoute = "/"
)

// middleware wraps next (the mux) in the layers every request crosses, in
// this order:
//
//  1. observation: the request id (X-Request-Id, kept when the client
//     sent a usable one, else made), one log line and the metrics of the
//     request, and the recovery of a panic into 500 SBXDB_INTERNAL;
//  2. refusal while the server stops: 503 SBXDB_UNAVAILABLE;
//  3. authentication of requests that do not come on a unix socket, when a
//     token is configured: 401 SBXDB_UNAUTHORIZED;
//  4. without test mode, 403 SBXDB_FORBIDDEN for a request of test mode
//     (refuseTestMode);
//  5. the cap on requests served at once: a request waits up to slotWait
//     for a slot, then 503 SBXDB_UNAVAILABLE;
//  6. 405 SBXDB_METHOD_NOT_ALLOWED, with Allow, for a path that an
//     endpoint serves under other methods;
//  7. in test mode, the hand-over of a store's request that names a test
//     store to that store's handlers (serveTestStore).
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.add()
		defer s.requests.done()
		rw := &responseWriter{ResponseWriter: w}
		body := &countingBody{ReadCloser: r.Body}
		r.Body = body
		start := time.Now()
		id := requestID(r.Header.Get("X-Request-Id"))
		w.Header().Set("X-Request-Id", id)
		_, route := s.mux.Handler(r)
		defer func() {
			aborted := s.recovered(recover(), rw, r, id)
			s.observe(r, id, route, rw, body.n, time.Since(start), aborted)
			if aborted {
				panic(http.ErrAbortHandler)
			}
		}()
		s.metrics.inFlight.Inc()
		defer s.metrics.inFlight.Dec()

		if s.stopping.Load() {
			writeError(rw, errorf(CodeUnavailable, "the server is shutting down"))
			return
		}
		if !s.authenticate(rw, r, route) {
			return
		}
		if err := s.refuseTestMode(r); err != nil {
			writeError(rw, err)
			return
		}
		if route != healthRoute {
			if !s.acquire(r) {
				writeError(rw, errorf(CodeUnavailable, "all %d request slots stayed busy for %s", s.opts.MaxRequests, s.slotWait))
				return
			}
			defer func() { <-s.slots }()
		}
		if route == catchAllRoute {
			if allow := s.allowedMethods(r); len(allow) > 0 {
				rw.Header().Set("Allow", strings.Join(allow, ", "))
				writeError(rw, errorf(CodeMethodNotAllowed, "%s %s: the method is not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
				return
			}
		}
		if s.serveTestStore(rw, r, route) {
			return
		}
		next.ServeHTTP(rw, r)
	})
}

// recovered turns a handler's panic p into a 500 response when nothing was
// sent yet, logging it with its stack. It reports whether the connection
// must be aborted instead: for http.ErrAbortHandler, and for a panic after
// the status line was sent, whose response cannot be made whole.
func (s *Server) recovered(p any, rw *responseWriter, r *http.Request, id string) (abort bool) {
	switch {
	case p == nil:
		return false
	case p == http.ErrAbortHandler:
		return true
	}
	if l := s.opts.Logger; l != nil {
		l.LogAttrs(r.Context(), slog.LevelError, "panic serving a request",
			slog.String("id", id), slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
	}
	if rw.status != 0 {
		return true
	}
	writeError(rw, errorf(CodeInternal, "internal error serving request %s", id))
	return false
}

// observe logs the request's line and records its metrics.
func (s *Server) observe(r *http.Request, id, route string, rw *responseWriter, in int64, d time.Duration, aborted bool) {
	status := rw.status
	if status == 0 {
		status = http.StatusOK // nothing written: net/http sends 200
	}
	if route == "" {
		route = "unmatched"
	}
	s.metrics.request(route, status, d, in, rw.bytes)
	l := s.opts.Logger
	if l == nil {
		return
	}
	level := slog.LevelInfo
	if status >= 500 || aborted {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String("id", id), slog.String("method", r.Method), slog.String("route", route),
		slog.Int("status", status), slog.Duration("duration", d),
		slog.Int64("bytesIn", in), slog.Int64("bytesOut", rw.bytes),
	}
	if c := connOf(r.Context()); c.Unix {
		attrs = append(attrs, slog.String("conn", "unix"))
		if c.PeerPID != 0 {
			attrs = append(attrs, slog.Int("peerPid", c.PeerPID))
		}
	} else {
		attrs = append(attrs, slog.String("conn", "tcp"), slog.String("remote", r.RemoteAddr))
	}
	if aborted {
		attrs = append(attrs, slog.Bool("aborted", true))
	}
	l.LogAttrs(r.Context(), level, "request", attrs...)
}

// authenticate reports whether r may be served, and answers it 401
// SBXDB_UNAUTHORIZED when not. It may be served when it came on a unix
// socket, or no token is configured, or it is the health probe, or it
// carries the token; then its connection counts as authenticated (conns),
// the health probe's excepted. A request from a peer that failed before
// first waits its turn (authLimiter); one whose turn is too far off is
// refused unchecked, with Retry-After.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, route string) bool {
	c := connOf(r.Context())
	switch {
	case s.opts.Token == "" || c.Unix:
		c.authenticated()
		return true
	case route == healthRoute:
		return true
	case isUIPath(r.URL.Path) && r.Header.Get("Authorization") == "":
		return s.uiAuthenticate(w, r) // uiauth.go: the UI's session cookie
	}
	refuse := func(format string, args ...any) bool {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sbxdb"`)
		writeError(w, errorf(CodeUnauthorized, format, args...))
		return false
	}
	key := peerKey(r.RemoteAddr)
	far, err := s.auth.wait(r.Context(), key)
	switch {
	case err != nil:
		return refuse("the request ended while it waited its turn to be authenticated")
	case far > 0:
		s.metrics.authThrottled.Inc()
		secs := int64((far + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		return refuse("too many failed authentications from %s: the token was not checked; retry in %d s", key, secs)
	case !s.tokenMatches(r):
		s.auth.failed(key)
		s.metrics.authFailures.Inc()
		return refuse("a valid bearer token is required")
	}
	s.auth.succeeded(key)
	c.authenticated()
	return true
}

// tokenMatches reports whether r carries the token. The token is compared
// by its digest in constant time, so that neither its bytes nor its length
// show in the time a refusal takes.
func (s *Server) tokenMatches(r *http.Request) bool {
	// The scheme is case-insensitive (RFC 9110, 11.1).
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(s.opts.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// acquire takes one of the MaxRequests slots, waiting up to slotWait for
// one (or until the client goes away). It reports whether it got one.
func (s *Server) acquire(r *http.Request) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	if h := s.hooks.waiting; h != nil {
		h()
	}
	t := time.NewTimer(s.slotWait)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-r.Context().Done():
	}
	return false
}

// allowedMethods returns the methods an endpoint serves r's path with, for
// a request that matched none.
func (s *Server) allowedMethods(r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.WithContext(r.Context())
		probe.Method = m
		if _, p := s.mux.Handler(probe); p != catchAllRoute && p != "" {
			allow = append(allow, m)
		}
	}
	return allow
}

// requestID returns the client's request id when it is 1 to 128
// characters of letters, digits and ".-_:", else a new random one.
func requestID(sent string) string {
	if len(sent) > 0 && len(sent) <= 128 && strings.Trim(sent, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:") == "" {
		return sent
	}
	return rand.Text()
}

// responseWriter records the status and the body bytes of a response.
type responseWriter struct {
	http.ResponseWriter
	status int   // 0 until the status line is written
	bytes  int64 // body bytes written
}

func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Flush sends what was written so far (progress streams).
func (w *responseWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingBody counts the bytes a handler read of the request body.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// tracker counts the requests being served, so that Serve can wait until
// every handler has returned before the store is closed.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0
}

func (t *tracker) add() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
}

// wait returns once no request is being served.
func (t *tracker) wait() {
	t.mu.Lock()
	idle := t.idle
	n := t.n
	t.mu.Unlock()
	if n > 0 {
		<-idle
	}
}
