package server

import (
	"net/http"
	"strings"
)

// routes registers every endpoint of docs/API.md. Each group lives in its
// own file, beside the decoding of its requests.
func (s *Server) routes() {
	s.contractRoutes() // contract.go: checkpoints, leases, transcripts, instances
	s.blobRoutes()     // blobs.go: blobs, plain objects, artifact records
	s.adminRoutes()    // admin.go: health, stats, gc, sweep, check, capture, restore
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := s.allowedMethods(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, errorf(CodeMethodNotAllowed, "%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		writeError(w, errorf(CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
}

// allowedMethods returns the methods some route serves r's path with. The
// catch-all "/" matches every method, so ServeMux never answers 405 itself:
// this is how a wrong method is told from an unknown path.
func (s *Server) allowedMethods(r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return allow
}

// rawJSON is a response body encoded already (wire.go), which handle
// writes as it is: encoding/json would compact the raw messages it holds.
type rawJSON []byte

// handle registers pattern ("POST /v1/…") with a handler that returns
// the response value or an error; the value is written as JSON with 200.
func (s *Server) handle(pattern string, h func(r *http.Request) (any, error)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		v, err := h(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if b, ok := v.(rawJSON); ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.Write(append(b, '\n'))
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}
