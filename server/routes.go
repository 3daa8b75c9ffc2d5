package server

import "net/http"

// routes registers every endpoint of docs/API.md. Each group lives in its
// own file, beside the decoding of its requests.
func (s *Server) routes() {
	s.contractRoutes() // contract.go: checkpoints, leases, transcripts, instances
	s.blobRoutes()     // blobs.go: blobs, plain objects, artifact records
	s.adminRoutes()    // admin.go: health, stats, gc, sweep, check, capture, restore
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
}

// handle registers pattern ("POST /v1/…") with a handler that returns
// the response value or an error; the value is written as JSON with 200.
func (s *Server) handle(pattern string, h func(r *http.Request) (any, error)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		v, err := h(r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}
