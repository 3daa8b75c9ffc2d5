// Package ui is sbxdb's web UI, "see what the agent did": server-rendered
// pages (html/template, SVG drawn on the server, a little plain
// JavaScript, every asset embedded) over one open store (*engine.DB).
//
// The server package mounts it under /ui/ and authorizes every request
// before it reaches this package, exactly as the API's (docs/API.md, UI).
// This package adds, for every state-changing request, the refusal of a
// cross-origin one (http.CrossOriginProtection) and of one without the
// session's CSRF token (Auth.CheckCSRF).
//
// Everything shown comes from the store and was written by an agent: it is
// hostile. Templates escape it by context (html/template); stored bytes
// are only ever sent as downloads (application/octet-stream, attachment,
// nosniff), never rendered by the browser; the Content-Security-Policy
// allows scripts and styles from this origin's /ui/static/ alone.
package ui

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Auth is what the UI needs of the server's authorization.
type Auth interface {
	// LoginRequired reports whether r's client must log in with the token
	// (TCP to a server with one), so the UI offers logging out.
	LoginRequired(r *http.Request) bool
	// CSRFToken is the token a state-changing form of r's session carries;
	// CheckCSRF reports whether got is it.
	CSRFToken(r *http.Request) string
	CheckCSRF(r *http.Request, got string) bool
	// Login checks the token and, when it is right, starts a session on w;
	// the error says why not. Logout ends r's session.
	Login(w http.ResponseWriter, r *http.Request, token string) error
	Logout(w http.ResponseWriter, r *http.Request)
}

// Config configures the UI.
type Config struct {
	DB   *engine.DB
	Auth Auth
	// GCPlan runs the API's POST /v1/gc with the request's members and
	// dryRun set, and returns its response body and status.
	GCPlan func(ctx context.Context, req map[string]any) (json.RawMessage, int)
	// Runs, when not nil, is the server's record of its last gc and sweep
	// runs, which the storage page lists.
	Runs    *GCRuns
	Version string
	Logger  *slog.Logger
}

// UI serves the pages. It is safe for concurrent use.
type UI struct {
	cfg   Config
	db    *engine.DB
	mux   *http.ServeMux
	pages map[string]*template.Template
	cop   *http.CrossOriginProtection
}

// csp allows nothing but this origin's static files, forms posting to it,
// and no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// New returns the UI's handler, which serves paths under /ui/.
func New(cfg Config) *UI {
	u := &UI{cfg: cfg, db: cfg.DB, mux: http.NewServeMux(), pages: map[string]*template.Template{},
		cop: http.NewCrossOriginProtection()}
	base := template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	names, _ := fs.Glob(templateFS, "templates/*.html")
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		u.pages[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, n))
	}
	static, _ := fs.Sub(staticFS, "static")
	u.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	u.mux.HandleFunc("GET /ui/login", u.loginPage)
	u.mux.HandleFunc("POST /ui/login", u.login)
	u.mux.HandleFunc("POST /ui/logout", u.post(u.logout))
	u.mux.HandleFunc("GET /ui/{$}", u.threads)
	u.routes()
	u.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		u.fail(w, r, http.StatusNotFound, "There is no page "+r.URL.Path+".")
	})
	return u
}

// ServeHTTP sets the security headers of every response, then serves r.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	if !strings.HasPrefix(r.URL.Path, "/ui/static/") {
		h.Set("Cache-Control", "no-store")
	}
	u.mux.ServeHTTP(w, r)
}

// post wraps the handler of a state-changing request: a cross-origin
// request (Sec-Fetch-Site, Origin) is refused, 403, and so is one whose
// form does not carry the session's CSRF token.
func (u *UI) post(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := u.cop.Check(r); err != nil {
			u.fail(w, r, http.StatusForbidden, "Refused: a cross-origin request may not change anything.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !u.cfg.Auth.CheckCSRF(r, r.PostFormValue("csrf")) {
			u.fail(w, r, http.StatusForbidden, "Refused: the form's CSRF token is missing or wrong; reload the page and try again.")
			return
		}
		h(w, r)
	}
}

// page is what the layout renders around a page's content.
type page struct {
	Title    string
	Nav      string // the section the page belongs to: "threads" or "storage"
	CSRF     string
	LoggedIn bool
	Version  string
	Data     any
}

// render writes the page name with data, 200, or a 500 page when it fails.
func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, name, title, nav string, data any) {
	t := u.pages[name]
	p := page{Title: title, Nav: nav, CSRF: u.cfg.Auth.CSRFToken(r), LoggedIn: u.cfg.Auth.LoginRequired(r),
		Version: u.cfg.Version, Data: data}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		if l := u.cfg.Logger; l != nil {
			l.Error("ui: rendering a page", "page", name, "err", err)
		}
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail renders the error page with status and msg.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	u.render(w, r, status, "error", http.StatusText(status), "", struct {
		Status  int
		Message string
	}{status, msg})
}

// failErr renders err: a contract error by its code (invalid ids are the
// client's fault), anything else 500.
func (u *UI) failErr(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	if errors.Is(err, chain.ErrInvalidID) || errors.Is(err, chain.ErrInvalidEntry) {
		status = http.StatusBadRequest
	}
	u.fail(w, r, status, err.Error())
}

// loginPage offers the form that takes the token.
func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	u.render(w, r, http.StatusOK, "login", "Log in", "", struct {
		Next, Error string
		Required    bool
	}{safeNext(r.URL.Query().Get("next")), "", u.cfg.Auth.LoginRequired(r)})
}

// login takes the token from the form. It is refused cross-origin; it
// needs no CSRF token (the client has no session yet, and the token
// proves itself).
func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	if err := u.cop.Check(r); err != nil {
		u.fail(w, r, http.StatusForbidden, "Refused: a cross-origin request may not log in.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	next := safeNext(r.PostFormValue("next"))
	if err := u.cfg.Auth.Login(w, r, r.PostFormValue("token")); err != nil {
		u.render(w, r, http.StatusUnauthorized, "login", "Log in", "", struct {
			Next, Error string
			Required    bool
		}{next, err.Error(), true})
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	u.cfg.Auth.Logout(w, r)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// safeNext is next when it is a path of the UI, else the UI's start page:
// the login page never redirects elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	return next
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"bytes":   humanBytes,
	"time":    msTime,
	"iso":     msISO,
	"short":   shortID,
	"add":     func(a, b int) int { return a + b },
	"ratio":   func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) + "×" },
	"percent": func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + " %" },
}

// humanBytes is n in B, KiB, MiB or GiB, with the exact count for small n.
func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// msTime is epoch ms as UTC time, to the second.
func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z") }

// msISO is epoch ms in RFC 3339, for <time datetime>.
func msISO(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// shortID is id cut to 16 characters (runes), with an ellipsis when cut.
func shortID(id string) string {
	r := []rune(id)
	if len(r) <= 16 {
		return id
	}
	return string(r[:15]) + "…"
}
