package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb/server/ui"
)

// The UI (server/ui) is served under uiPrefix on the server's listeners,
// authorized as the API is: a request on a unix socket, or to a server
// without a token, is trusted; on TCP with a token, a request needs the
// token, sent as the API's bearer header or proved by the session cookie
// that POST /ui/login sets once it was given the token. The login page and
// the embedded static files (no store data) need nothing.
const (
	uiPrefix      = "/ui/"
	uiLoginPath   = "/ui/login"
	uiStaticPath  = "/ui/static/"
	uiCookieName  = "sbxdb_ui"
	uiSessionLife = 12 * time.Hour
)

// uiRoutes mounts the UI.
func (s *Server) uiRoutes() {
	s.mux.Handle(uiPrefix, ui.New(ui.Config{DB: s.db, Auth: uiAuth{s}, GCPlan: s.uiGCPlan, Runs: s.metrics.gcLog, Version: s.opts.Version}))
	s.mux.Handle("GET /ui", http.RedirectHandler(uiPrefix, http.StatusSeeOther))
}

// uiAuthenticate decides a UI request on TCP when a token is configured
// and the request sends no Authorization header (one that does is decided
// as an API request). It reports whether r may be served: it asks for a
// public path or carries a valid session cookie. Otherwise it answers: a
// GET or HEAD is sent to the login page, anything else is 401
// SBXDB_UNAUTHORIZED.
func (s *Server) uiAuthenticate(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	if p == uiLoginPath || strings.HasPrefix(p, uiStaticPath) {
		return true
	}
	if _, ok := s.uiSession(r); ok {
		connOf(r.Context()).authenticated()
		return true
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		http.Redirect(w, r, uiLoginPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="sbxdb"`)
	writeError(w, errorf(CodeUnauthorized, "a valid bearer token or UI session is required"))
	return false
}

// isUIPath reports whether p is served by the UI.
func isUIPath(p string) bool { return p == "/ui" || strings.HasPrefix(p, uiPrefix) }

// uiProcessKey is random per process: with the token, it keys the UI's
// MACs, so that no one can compute a CSRF token even for a server without
// a token, and a restart ends every session.
var uiProcessKey = func() (k [32]byte) { rand.Read(k[:]); return k }()

// uiMAC is the HMAC-SHA256, keyed by uiProcessKey and the server's token,
// of the parts, each length-prefixed. A session cookie and a CSRF token
// are MACs: only this process can make one, and it makes session cookies
// only for a client that sent the token.
func (s *Server) uiMAC(parts ...string) []byte {
	m := hmac.New(sha256.New, append(uiProcessKey[:], s.opts.Token...))
	for _, p := range parts {
		fmt.Fprintf(m, "%d:%s", len(p), p)
	}
	return m.Sum(nil)
}

// uiSession returns the nonce of r's session cookie when it is valid: a
// random nonce, an expiry in unix seconds not yet past, and their MAC.
func (s *Server) uiSession(r *http.Request) (nonce string, ok bool) {
	c, err := r.Cookie(uiCookieName)
	if err != nil {
		return "", false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 {
		return "", false
	}
	mac, err := hex.DecodeString(parts[2])
	if err != nil || !hmac.Equal(mac, s.uiMAC("session", parts[0], parts[1])) {
		return "", false
	}
	var exp int64
	if _, err := fmt.Sscanf(parts[1], "%d", &exp); err != nil || time.Now().Unix() >= exp {
		return "", false
	}
	return parts[0], true
}

// uiAuth gives the UI the server's sessions and CSRF tokens.
type uiAuth struct{ s *Server }

// LoginRequired reports whether r must log in: it came on TCP to a server
// with a token.
func (a uiAuth) LoginRequired(r *http.Request) bool {
	return a.s.opts.Token != "" && !connOf(r.Context()).Unix
}

// CSRFToken is the MAC of r's session nonce ("" without a session: on a
// unix socket or a server without token): a cross-site page can neither
// read nor compute it.
func (a uiAuth) CSRFToken(r *http.Request) string {
	nonce, _ := a.s.uiSession(r)
	return hex.EncodeToString(a.s.uiMAC("csrf", nonce))
}

// CheckCSRF reports whether got is r's CSRF token, compared in constant
// time.
func (a uiAuth) CheckCSRF(r *http.Request, got string) bool {
	want := a.CSRFToken(r)
	return len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// Login checks token as the API checks a bearer token, failures slowed per
// client address alike, and on success sets the session cookie: HttpOnly,
// SameSite=Strict, scoped to the UI's path, Secure when the request came
// over TLS.
func (a uiAuth) Login(w http.ResponseWriter, r *http.Request, token string) error {
	s := a.s
	if s.opts.Token == "" || connOf(r.Context()).Unix {
		return nil
	}
	key := peerKey(r.RemoteAddr)
	far, err := s.auth.wait(r.Context(), key)
	switch {
	case err != nil:
		return err
	case far > 0:
		s.metrics.authThrottled.Inc()
		return fmt.Errorf("too many failed logins from this address; retry in %d s", int64((far+time.Second-1)/time.Second))
	}
	x, y := sha256.Sum256([]byte(strings.TrimSpace(token))), sha256.Sum256([]byte(s.opts.Token))
	if subtle.ConstantTimeCompare(x[:], y[:]) != 1 {
		s.auth.failed(key)
		s.metrics.authFailures.Inc()
		return fmt.Errorf("that is not the server's token")
	}
	s.auth.succeeded(key)
	connOf(r.Context()).authenticated()
	nonce := rand.Text()
	exp := fmt.Sprint(time.Now().Add(uiSessionLife).Unix())
	http.SetCookie(w, &http.Cookie{Name: uiCookieName, Value: nonce + "." + exp + "." + hex.EncodeToString(s.uiMAC("session", nonce, exp)),
		Path: uiPrefix, MaxAge: int(uiSessionLife / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return nil
}

// Logout clears the session cookie.
func (a uiAuth) Logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: uiCookieName, Value: "", Path: uiPrefix, MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// uiGCPlan runs POST /v1/gc with the JSON body req, dryRun set, through
// the API's own handler (so the plan is the API's, with its checks), and
// returns the response body and status.
func (s *Server) uiGCPlan(ctx context.Context, req map[string]any) (json.RawMessage, int) {
	req["dryRun"] = true
	body, _ := json.Marshal(req)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/gc", bytes.NewReader(body))
	if err != nil {
		return json.RawMessage(`{"error":{"message":"making the request failed"}}`), http.StatusInternalServerError
	}
	r.Header.Set("Content-Type", "application/json")
	h, _ := s.mux.Handler(r)
	rec := &bufferWriter{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return json.RawMessage(rec.buf.Bytes()), rec.status
}

// bufferWriter is a ResponseWriter that keeps the response in memory.
type bufferWriter struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (b *bufferWriter) Header() http.Header { return b.header }
func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.buf.Write(p)
}
func (b *bufferWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}
