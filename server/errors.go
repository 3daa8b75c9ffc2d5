package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/wire"
)

// The wire codes (docs/API.md, Errors): internal/wire's, under the names
// the server's code and its tests use.
const (
	CodeBadRequest       = wire.CodeBadRequest
	CodeBlobMismatch     = wire.CodeBlobMismatch
	CodeUnauthorized     = wire.CodeUnauthorized
	CodeForbidden        = wire.CodeForbidden
	CodeNotFound         = wire.CodeNotFound
	CodeMethodNotAllowed = wire.CodeMethodNotAllowed
	CodeBlobInUse        = wire.CodeBlobInUse
	CodeTooLarge         = wire.CodeTooLarge
	CodeRange            = wire.CodeRange
	CodeCorrupt          = wire.CodeCorrupt
	CodeInternal         = wire.CodeInternal
	CodeUnavailable      = wire.CodeUnavailable
	CodeReadOnly         = wire.CodeReadOnly
	CodeAmbiguous        = wire.CodeAmbiguous
	CodeNoTestStore      = wire.CodeNoTestStore
	CodeEmptyCapture     = wire.CodeEmptyCapture
	CodePoisoned         = wire.CodePoisoned
)

// poisonedRetryAfter is the Retry-After, in seconds, of a poisoned
// store's answers: the server tries to reopen it every 100 ms at first,
// backing off to 30 s while the cause lasts.
const poisonedRetryAfter = "5"

// ErrorBody is the JSON body of every failed request.
type ErrorBody = wire.ErrorBody

// codeError is a failure the server itself decides, with its code.
type codeError struct{ code, msg string }

func (e *codeError) Error() string { return e.msg }

func errorf(code, format string, args ...any) error {
	return &codeError{code, fmt.Sprintf(format, args...)}
}

// blobStoreErrors are the blob store's own errors, which the table of
// internal/wire (the contract's and the engine's sentinels) cannot name
// without linking the blob store into every client. They are checked after
// that table; none is ever wrapped together with one of its sentinels but
// ErrBlobInUse, which is checked first there (engine.DeleteObject).
var blobStoreErrors = []struct {
	err  error
	code string
}{
	{cas.ErrPinned, CodeBlobInUse},
	{cas.ErrReadOnly, CodeReadOnly},
}

// Code returns the wire code of err: the one the server decided (errorf),
// else the contract's or the engine's (wire.Code), else the blob store's,
// else CodeInternal.
func Code(err error) string {
	var ce *codeError
	if errors.As(err, &ce) {
		return ce.code
	}
	if c, ok := wire.Code(err); ok {
		return c
	}
	for _, s := range blobStoreErrors {
		if errors.Is(err, s.err) {
			return s.code
		}
	}
	return CodeInternal
}

// Message returns the message of err on the wire: its text, led by what
// a host must know to act on it when the store's own text does not say.
func Message(err error) string {
	switch {
	case errors.Is(err, engine.ErrCommitUnknown):
		// The database went away while the write committed: the host
		// must read the state back (the head, the checkpoint) before
		// retrying, as the write may be stored.
		return "metadata database unavailable; the write may have been committed: " + err.Error()
	case errors.Is(err, engine.ErrMetadataUnavailable):
		return "metadata database unavailable: " + err.Error()
	case errors.Is(err, engine.ErrBlobsUnavailable):
		return "object storage unavailable: " + err.Error()
	case errors.Is(err, sbxdb.ErrPoisoned):
		return "writes are refused until the server reopens the store, once the cause clears: " + err.Error()
	}
	return err.Error()
}

// Status returns the HTTP status of a wire code (docs/API.md, Errors).
func Status(code string) int { return wire.Status(code) }

// writeError writes err as an ErrorBody with its status, and its code and
// message also as headers (HeaderCode, HeaderMessage): the answer to a HEAD
// has no body, and a refusal may come before any handler knows its route.
func writeError(w http.ResponseWriter, err error) {
	code := Code(err)
	switch code {
	case CodeUnavailable:
		w.Header().Set("Retry-After", "1")
	case CodePoisoned:
		w.Header().Set("Retry-After", poisonedRetryAfter)
	}
	w.Header().Set(HeaderCode, code)
	msg := Message(err)
	w.Header().Set(HeaderMessage, headerSafe(msg))
	var body any = ErrorBody{Code: code, Message: msg}
	if b, ok := errors.AsType[*bodyError](err); ok {
		body = b.body
	}
	writeJSON(w, Status(code), body)
}

// bodyError is a failure answered with a body of its own instead of an
// ErrorBody, one that carries at least its code and message (the poisoned
// health: admin.go).
type bodyError struct {
	err  error
	body any
}

func (e *bodyError) Error() string { return e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// writeJSON writes v as the JSON body of a response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Code: CodeInternal, Message: "encoding the response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
