package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
)

// sbxdb's own error codes, for failures the contract has no code for
// (docs/API.md, Errors).
const (
	CodeBadRequest       = "SBXDB_BAD_REQUEST"
	CodeBlobMismatch     = "SBXDB_BLOB_MISMATCH"
	CodeUnauthorized     = "SBXDB_UNAUTHORIZED"
	CodeForbidden        = "SBXDB_FORBIDDEN"
	CodeNotFound         = "SBXDB_NOT_FOUND"
	CodeMethodNotAllowed = "SBXDB_METHOD_NOT_ALLOWED"
	CodeBlobInUse        = "SBXDB_BLOB_IN_USE"
	CodeTooLarge         = "SBXDB_TOO_LARGE"
	CodeRange            = "SBXDB_RANGE"
	CodeCorrupt          = "SBXDB_CORRUPT"
	CodeInternal         = "SBXDB_INTERNAL"
	CodeUnavailable      = "SBXDB_UNAVAILABLE"
	CodeReadOnly         = "SBXDB_READ_ONLY"
	CodeAmbiguous        = "SBXDB_AMBIGUOUS"
	// CodeNoTestStore names a test store that does not exist (any more):
	// distinct from CodeNotFound, which a blob or object missing from a
	// store gives, so that a client never reads a deleted store as an
	// empty one.
	CodeNoTestStore  = "SBXDB_NO_TEST_STORE"
	CodeEmptyCapture = "SBXDB_EMPTY_CAPTURE"
	// CodePoisoned is a write refused, and a health probe answered,
	// while the store is poisoned (sbxdb.ErrPoisoned): a sync failed, and
	// the server reopens the store once the cause clears. Reads go on.
	CodePoisoned = "SBXDB_POISONED"
)

// poisonedRetryAfter is the Retry-After, in seconds, of a poisoned
// store's answers: the server tries to reopen it every 100 ms at first,
// backing off to 30 s while the cause lasts.
const poisonedRetryAfter = "5"

// ErrorBody is the JSON body of every failed request.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// codeError is a failure the server itself decides, with its code.
type codeError struct{ code, msg string }

func (e *codeError) Error() string { return e.msg }

func errorf(code, format string, args ...any) error {
	return &codeError{code, fmt.Sprintf(format, args...)}
}

// sentinels maps the engine's errors that have no contract code to
// sbxdb's codes. The first match wins.
var sentinels = []struct {
	err  error
	code string
}{
	// First: it wraps the failed sync's error, whatever that matches.
	{sbxdb.ErrPoisoned, CodePoisoned},
	{sbxdb.ErrInvalidObject, CodeBadRequest},
	{sbxdb.ErrBlobInUse, CodeBlobInUse},
	{sbxdb.ErrAmbiguousRef, CodeAmbiguous},
	{chain.ErrTooLarge, CodeTooLarge},
	{sbxdb.ErrBlobKeyMismatch, CodeBlobMismatch},
	{cas.ErrPinned, CodeBlobInUse},
	{sbxdb.ErrBlobNotFound, CodeNotFound},
	{sbxdb.ErrInvalidBlobKey, CodeBadRequest},
	{chain.ErrCorrupt, CodeCorrupt},
	{sbxdb.ErrBlobCorrupt, CodeCorrupt},
	{sbxdb.ErrReadOnly, CodeReadOnly},
	{sbxdb.ErrEmptyCapture, CodeEmptyCapture},
	{cas.ErrReadOnly, CodeReadOnly},
	{sbxdb.ErrClosed, CodeUnavailable},
	// The metadata database (engine.Options.Metadata) is down or was
	// lost mid-request: the server is up and a retry may succeed once the
	// database is back, as for any other outage.
	{engine.ErrMetadataUnavailable, CodeUnavailable},
	// So is the bucket of the blobs (engine.Options.Blobs).
	{engine.ErrBlobsUnavailable, CodeUnavailable},
	{context.Canceled, CodeUnavailable},
	{context.DeadlineExceeded, CodeUnavailable},
}

// Code returns the wire code of err: the contract's where it has one,
// else sbxdb's.
func Code(err error) string {
	var ce *codeError
	if errors.As(err, &ce) {
		return ce.code
	}
	if c := chain.Code(err); c != "" {
		return c
	}
	for _, s := range sentinels {
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
func Status(code string) int {
	switch code {
	case chain.CodeInvalidID, chain.CodeInvalidEntry, chain.CodeInvalidPath,
		chain.CodeInvalidWorkspace, chain.CodeUnsupportedEntry,
		CodeBadRequest, CodeBlobMismatch, CodeEmptyCapture:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case chain.CodeCheckpointNotFound, chain.CodeForkSourceNotFound,
		chain.CodeMissingBlob, chain.CodeMissingCheckpointArtifact, CodeNotFound, CodeNoTestStore:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case chain.CodeStaleHead, chain.CodeParentMismatch, chain.CodeDuplicateID,
		chain.CodeNotHead, chain.CodeWriterConflict, chain.CodeWriterLost,
		chain.CodeForkSourceThreadMismatch, chain.CodeForkDestinationNotEmpty,
		chain.CodeForeignCheckpointArtifact, chain.CodeAtomicForkRequired, CodeBlobInUse,
		CodeAmbiguous:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeRange:
		return http.StatusRequestedRangeNotSatisfiable
	case chain.CodeInvalidBlob, chain.CodeInvalidArtifactBytes:
		return http.StatusUnprocessableEntity
	case CodeUnavailable, CodeReadOnly, CodePoisoned:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

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
