package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
)

// readBody reads a JSON request body of at most the server's limit, and
// refuses one that is not a JSON object (SBXDB_BAD_REQUEST) or is too long
// (SBXDB_TOO_LARGE). What the object holds is left to decode and to the
// engine's validators.
func (s *Server) readBody(r *http.Request) ([]byte, error) {
	body, err := s.readObject(r)
	if err != nil {
		return nil, err
	}
	if !json.Valid(body) {
		return nil, errNotObject()
	}
	return body, nil
}

// readObject is readBody without the check that the body is JSON: it
// refuses only a body too long or one that does not start as an object.
// Its caller must validate the body before acting on it, and refuse one
// that json.Valid refuses with errNotObject before any other error.
//
// The body is charged to the server's body budget before it is read
// (charge): with its Content-Length, all of it at once, into a buffer of
// exactly that size, so that the bytes read are all the memory the body
// takes; without one, as its buffer grows.
func (s *Server) readObject(r *http.Request) ([]byte, error) {
	limit := s.opts.MaxJSONBytes
	tooLarge := func(limit int64) error { return errorf(CodeTooLarge, "request body over %d bytes", limit) }
	size := int64(512)
	if cl := r.ContentLength; cl > limit {
		return nil, tooLarge(limit)
	} else if cl >= 0 {
		if cl >= smallBody {
			if err := s.charge(r, cl, cl); err != nil {
				return nil, err
			}
		}
		size = cl + 1 // +1: the read that sees EOF needs no new buffer
	}
	charged := int64(0)
	grow := func(c int) error {
		if n := int64(c); n > smallBody && r.ContentLength < 0 {
			if err := s.charge(r, n, n-max(charged, smallBody)); err != nil {
				return err
			}
			charged = n
		}
		return nil
	}
	body, err := readAll(http.MaxBytesReader(nil, r.Body, limit), int(size), int(limit)+1, grow)
	var mbe *http.MaxBytesError
	var ce *codeError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge(mbe.Limit)
	case errors.As(err, &ce):
		return nil, err
	case err != nil:
		return nil, errorf(CodeBadRequest, "reading the request body: %v", err)
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil, errNotObject()
	}
	return body, nil
}

// errNotObject is readBody's error for a body that is not a JSON object.
func errNotObject() error {
	return errorf(CodeBadRequest, "the request body must be a JSON object")
}

// readAll is io.ReadAll into a buffer of size bytes to start with, which
// doubles, up to most bytes, when full; grow is told each new capacity
// before the buffer grows to it, and its error ends the read.
func readAll(r io.Reader, size, most int, grow func(int) error) ([]byte, error) {
	b := make([]byte, 0, max(size, 1))
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			c := max(min(2*cap(b), most), cap(b)+512)
			if err := grow(c); err != nil {
				return nil, err
			}
			b = append(make([]byte, 0, c), b...)
		}
	}
}

// decode reads the request's JSON object into v, whose members should be
// chain.WireString, chain.WireInt, chain.Writer, json.RawMessage or types
// that cannot lose what the client sent: decoding decides no contract error.
func (s *Server) decode(r *http.Request, v any) error {
	body, err := s.readBody(r)
	if err != nil {
		return err
	}
	if body, err = exactMembers(body, v); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errorf(CodeBadRequest, "decoding the request: %v", err)
	}
	return nil
}

// exactMembers drops from the JSON object body every member whose name
// matches a member of v's struct only regardless of case: encoding/json
// matches names case-insensitively, and the contract's names are exact
// ({"threadid": "t"} names no thread). The body is returned unchanged
// when no name needs dropping, which is every well-formed request.
func exactMembers(body []byte, v any) ([]byte, error) {
	names := memberNames(reflect.TypeOf(v))
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		return nil, errorf(CodeBadRequest, "decoding the request: %v", err)
	}
	dropped := false
	for k := range members {
		if names[k] {
			continue
		}
		for n := range names {
			if strings.EqualFold(k, n) {
				delete(members, k)
				dropped = true
				break
			}
		}
	}
	if !dropped {
		return body, nil
	}
	return json.Marshal(members)
}

// memberNames returns the JSON member names of the struct t points to.
func memberNames(t reflect.Type) map[string]bool {
	if m, ok := memberNameCache.Load(t); ok {
		return m.(map[string]bool)
	}
	names := map[string]bool{}
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		for f := range t.Elem().Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if name != "-" {
				names[name] = true
			}
		}
	}
	memberNameCache.Store(t, names)
	return names
}

var memberNameCache sync.Map // reflect.Type → map[string]bool
