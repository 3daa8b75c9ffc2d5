package wire

import (
	"context"
	"errors"
	"net/http"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
)

// sbxdb's own error codes, for failures the contract has no code for
// (docs/API.md, Errors). The contract's codes are chain's (chain.Code*).
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

// The errors of the codes that no contract or engine sentinel matches: a
// client's error of such a code matches one of these (Sentinel).
var (
	ErrBadRequest   = errors.New("sbxdb: bad request")
	ErrUnauthorized = errors.New("sbxdb: unauthorized")
	ErrForbidden    = errors.New("sbxdb: forbidden")
	ErrUnavailable  = errors.New("sbxdb: server unavailable")
	ErrRange        = errors.New("sbxdb: range not satisfiable")
	ErrInternal     = errors.New("sbxdb: server error")
)

// ErrorBody is the JSON body of every failed request.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// way says in which directions a row of the table holds.
type way uint8

const (
	// both: an error matching the row's err is sent as its code, and a
	// code's error on a client matches err.
	both way = iota
	// send: an error matching err is sent as the code; a client's error
	// of the code matches the code's other, "both" or "recv", row.
	send
	// recv: a client's error of the code matches err; a server sends the
	// code for other errors, or decides it itself.
	recv
)

// table is the one map between wire codes and errors, both ways: Code
// reads it from the top, the first row whose err the error matches
// (errors.Is) and that sends giving the code; Sentinel takes the row of
// the code that a client receives by. Every code has exactly one
// receiving row, and every sending row is reached by its own err
// (TestTable).
//
// The order of the sending rows is the order of the checks: an error may
// match several of them, and the first decides.
var table = []struct {
	err  error
	code string
	way  way
}{
	// The contract's codes. Code reads them with chain.Code before this
	// table, so that an error wrapping a contract error anywhere gives
	// its code (a poisoned store's error naming a contract cause too).
	{chain.ErrStaleHead, chain.CodeStaleHead, both},
	{chain.ErrParentMismatch, chain.CodeParentMismatch, both},
	{chain.ErrDuplicateID, chain.CodeDuplicateID, both},
	{chain.ErrNotHead, chain.CodeNotHead, both},
	{chain.ErrWriterConflict, chain.CodeWriterConflict, both},
	{chain.ErrWriterLost, chain.CodeWriterLost, both},
	{chain.ErrInvalidID, chain.CodeInvalidID, both},
	{chain.ErrInvalidEntry, chain.CodeInvalidEntry, both},
	{chain.ErrCheckpointNotFound, chain.CodeCheckpointNotFound, both},
	{chain.ErrAtomicForkRequired, chain.CodeAtomicForkRequired, both},
	{chain.ErrForkSourceNotFound, chain.CodeForkSourceNotFound, both},
	{chain.ErrForkSourceThreadMismatch, chain.CodeForkSourceThreadMismatch, both},
	{chain.ErrForkDestinationNotEmpty, chain.CodeForkDestinationNotEmpty, both},
	{chain.ErrInvalidPath, chain.CodeInvalidPath, both},
	{chain.ErrInvalidWorkspace, chain.CodeInvalidWorkspace, both},
	{chain.ErrUnsupportedEntry, chain.CodeUnsupportedEntry, both},
	{chain.ErrMissingBlob, chain.CodeMissingBlob, both},
	{chain.ErrInvalidBlob, chain.CodeInvalidBlob, both},
	{chain.ErrMissingCheckpointArtifact, chain.CodeMissingCheckpointArtifact, both},
	{chain.ErrForeignCheckpointArtifact, chain.CodeForeignCheckpointArtifact, both},
	{chain.ErrInvalidArtifactBytes, chain.CodeInvalidArtifactBytes, both},

	// The engine's errors that have no contract code.
	// First: it wraps the failed sync's error, whatever that matches.
	{sbxdb.ErrPoisoned, CodePoisoned, both},
	{sbxdb.ErrInvalidObject, CodeBadRequest, send},
	{sbxdb.ErrBlobInUse, CodeBlobInUse, both},
	{sbxdb.ErrAmbiguousRef, CodeAmbiguous, both},
	{chain.ErrTooLarge, CodeTooLarge, both},
	{sbxdb.ErrBlobKeyMismatch, CodeBlobMismatch, both},
	{sbxdb.ErrBlobNotFound, CodeNotFound, both},
	{sbxdb.ErrInvalidBlobKey, CodeBadRequest, send},
	{chain.ErrCorrupt, CodeCorrupt, both},
	{sbxdb.ErrBlobCorrupt, CodeCorrupt, send},
	{sbxdb.ErrReadOnly, CodeReadOnly, both},
	{sbxdb.ErrEmptyCapture, CodeEmptyCapture, both},
	{sbxdb.ErrClosed, CodeUnavailable, send},
	// The metadata database (the engine's Options.Metadata) is down or
	// was lost mid-request: the server is up and a retry may succeed
	// once the database is back, as for any other outage.
	{sbxdb.ErrMetadataUnavailable, CodeUnavailable, send},
	// So is the bucket of the blobs (the engine's Options.Blobs).
	{sbxdb.ErrBlobsUnavailable, CodeUnavailable, send},
	{context.Canceled, CodeUnavailable, send},
	{context.DeadlineExceeded, CodeUnavailable, send},

	// The codes no engine sentinel matches on a client.
	{ErrBadRequest, CodeBadRequest, both},
	{ErrBadRequest, CodeMethodNotAllowed, recv},
	{ErrUnauthorized, CodeUnauthorized, both},
	{ErrForbidden, CodeForbidden, both},
	{ErrRange, CodeRange, both},
	{ErrUnavailable, CodeUnavailable, both},
	{ErrInternal, CodeInternal, both},
	{ErrInternal, CodeNoTestStore, recv},
}

// status is the HTTP status of every code (docs/API.md, Errors).
var status = map[string]int{
	chain.CodeInvalidID:        http.StatusBadRequest,
	chain.CodeInvalidEntry:     http.StatusBadRequest,
	chain.CodeInvalidPath:      http.StatusBadRequest,
	chain.CodeInvalidWorkspace: http.StatusBadRequest,
	chain.CodeUnsupportedEntry: http.StatusBadRequest,
	CodeBadRequest:             http.StatusBadRequest,
	CodeBlobMismatch:           http.StatusBadRequest,
	CodeEmptyCapture:           http.StatusBadRequest,

	CodeUnauthorized: http.StatusUnauthorized,
	CodeForbidden:    http.StatusForbidden,

	chain.CodeCheckpointNotFound:        http.StatusNotFound,
	chain.CodeForkSourceNotFound:        http.StatusNotFound,
	chain.CodeMissingBlob:               http.StatusNotFound,
	chain.CodeMissingCheckpointArtifact: http.StatusNotFound,
	CodeNotFound:                        http.StatusNotFound,
	CodeNoTestStore:                     http.StatusNotFound,

	CodeMethodNotAllowed: http.StatusMethodNotAllowed,

	chain.CodeStaleHead:                 http.StatusConflict,
	chain.CodeParentMismatch:            http.StatusConflict,
	chain.CodeDuplicateID:               http.StatusConflict,
	chain.CodeNotHead:                   http.StatusConflict,
	chain.CodeWriterConflict:            http.StatusConflict,
	chain.CodeWriterLost:                http.StatusConflict,
	chain.CodeForkSourceThreadMismatch:  http.StatusConflict,
	chain.CodeForkDestinationNotEmpty:   http.StatusConflict,
	chain.CodeForeignCheckpointArtifact: http.StatusConflict,
	chain.CodeAtomicForkRequired:        http.StatusConflict,
	CodeBlobInUse:                       http.StatusConflict,
	CodeAmbiguous:                       http.StatusConflict,

	CodeTooLarge: http.StatusRequestEntityTooLarge,
	CodeRange:    http.StatusRequestedRangeNotSatisfiable,

	chain.CodeInvalidBlob:          http.StatusUnprocessableEntity,
	chain.CodeInvalidArtifactBytes: http.StatusUnprocessableEntity,

	CodeCorrupt:  http.StatusInternalServerError,
	CodeInternal: http.StatusInternalServerError,

	CodeUnavailable: http.StatusServiceUnavailable,
	CodeReadOnly:    http.StatusServiceUnavailable,
	CodePoisoned:    http.StatusServiceUnavailable,
}

// Code returns the wire code of err: the contract's where it has one
// (chain.Code), else that of the first sending row of the table err
// matches. ok is false when none does: a server then sends err as
// CodeInternal, unless one of its own errors says more.
func Code(err error) (code string, ok bool) {
	if c := chain.Code(err); c != "" {
		return c, true
	}
	for _, r := range table {
		if r.way != recv && errors.Is(err, r.err) {
			return r.code, true
		}
	}
	return "", false
}

// Sentinel returns the error a client's error of code matches (errors.Is,
// through its Unwrap): the contract's sentinel for a contract code, the
// engine's or this package's for sbxdb's, ErrInternal for a code this
// build does not know.
func Sentinel(code string) error {
	for _, r := range table {
		if r.code == code && r.way != send {
			return r.err
		}
	}
	return ErrInternal
}

// Status returns the HTTP status of a wire code (docs/API.md, Errors):
// 500 for a code this build does not know.
func Status(code string) int {
	if s, ok := status[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}
