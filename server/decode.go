package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// readBody reads a JSON request body of at most the server's limit, and
// refuses one that is not a JSON object (SBXDB_BAD_REQUEST) or is too long
// (SBXDB_TOO_LARGE). What the object holds is left to decode and to the
// engine's validators.
func (s *Server) readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.opts.MaxJSONBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errorf(CodeTooLarge, "request body over %d bytes", mbe.Limit)
	}
	if err != nil {
		return nil, errorf(CodeBadRequest, "reading the request body: %v", err)
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' || !json.Valid(body) {
		return nil, errorf(CodeBadRequest, "the request body must be a JSON object")
	}
	return body, nil
}

// decode reads the request's JSON object into v, whose members should be
// chain.WireString, chain.WireInt, chain.Writer, json.RawMessage or types
// that cannot lose what the client sent: decoding decides no contract error.
func (s *Server) decode(r *http.Request, v any) error {
	body, err := s.readBody(r)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errorf(CodeBadRequest, "decoding the request: %v", err)
	}
	return nil
}
