// Package server serves one open store over HTTP/1.1 + JSON, as
// docs/API.md describes endpoint by endpoint: the contract's methods,
// writer leases, transcripts and instances, artifact records, blobs and
// plain objects, maintenance, and capture and restore of directories on
// this machine.
//
// The server keeps no state of its own beyond its connections: each
// request is one call of the engine's API (engine.DB), whose checks run in
// the contract's order and whose writes are one transaction each. A request
// body is decoded so that nothing is lost or guessed (chain.WireString,
// chain.WireInt, chain.Writer): the engine's validators give every verdict,
// so an invalid request fails here exactly as it fails embedded.
package server

import (
	"log/slog"
	"net/http"

	"github.com/sbxdb/sbxdb/engine"
)

// DefaultMaxJSONBytes bounds a JSON request body: a checkpoint record's
// limit (chain.MaxRecordBytes) with room for the request around it.
const DefaultMaxJSONBytes = 256<<20 + 1<<20

// Options configure a Server. The zero value serves with the defaults.
type Options struct {
	// Logger receives one structured line per request; nil logs nothing.
	Logger *slog.Logger
	// MaxJSONBytes bounds a JSON request body; 0 means DefaultMaxJSONBytes.
	MaxJSONBytes int64
	// MaxRequests bounds the requests served at once; 0 means 256.
	MaxRequests int
	// Version is reported by /v1/health.
	Version string
}

// Server serves one store. Its handler is safe for concurrent use.
type Server struct {
	db      *engine.DB
	opts    Options
	mux     *http.ServeMux
	handler http.Handler
}

// New returns a server of db. The caller keeps db open while the server
// runs and closes it after.
func New(db *engine.DB, opts Options) *Server {
	if opts.MaxJSONBytes <= 0 {
		opts.MaxJSONBytes = DefaultMaxJSONBytes
	}
	if opts.MaxRequests <= 0 {
		opts.MaxRequests = 256
	}
	s := &Server{db: db, opts: opts, mux: http.NewServeMux()}
	s.routes()
	s.handler = s.mux
	return s
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handler.ServeHTTP(w, r)
}
