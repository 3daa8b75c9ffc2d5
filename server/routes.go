package server

import "net/http"

// routes registers every endpoint of docs/API.md. Each group lives in its
// own file, beside the decoding of its requests.
func (s *Server) routes() {
	s.contractRoutes() // contract.go: checkpoints, leases, transcripts, instances
	s.threadRoutes()   // threads.go: checkpoint references, deleting a thread
	s.blobRoutes()     // blobs.go: blobs, plain objects, artifact records
	s.adminRoutes()    // admin.go: health, stats, gc, sweep, check, capture, restore
	s.uiRoutes()       // uiauth.go: the UI (server/ui) under /ui/
	s.mux.HandleFunc(catchAllRoute, func(w http.ResponseWriter, r *http.Request) {
		// A wrong method on a known path was answered 405 by the
		// middleware (allowedMethods); what reaches here has no route.
		writeError(w, errorf(CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
}

// rawJSON is a response body encoded already (wire.go), which handle
// writes as it is: encoding/json would compact the raw messages it holds.
type rawJSON []byte

// handle registers pattern ("POST /v1/…") with a handler that returns
// the response value or an error; the value is written as JSON with 200.
func (s *Server) handle(pattern string, h func(r *http.Request) (any, error)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.charged(r, h)
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
