package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
)

// Errors for the server's own codes (docs/API.md, Errors) that no engine
// sentinel matches.
var (
	ErrBadRequest   = errors.New("sbxdb: bad request")
	ErrUnauthorized = errors.New("sbxdb: unauthorized")
	ErrForbidden    = errors.New("sbxdb: forbidden")
	ErrUnavailable  = errors.New("sbxdb: server unavailable")
	ErrRange        = errors.New("sbxdb: range not satisfiable")
	ErrInternal     = errors.New("sbxdb: server error")
	// ErrUnreachable is a server that did not answer at all.
	ErrUnreachable = errors.New("sbxdb: server unreachable")
)

// byCode maps every wire code to the sentinel its error matches: the
// contract's codes to chain's sentinels, sbxdb's to the engine's where it
// has one.
var byCode = map[string]error{
	chain.CodeStaleHead:                 chain.ErrStaleHead,
	chain.CodeParentMismatch:            chain.ErrParentMismatch,
	chain.CodeDuplicateID:               chain.ErrDuplicateID,
	chain.CodeNotHead:                   chain.ErrNotHead,
	chain.CodeWriterConflict:            chain.ErrWriterConflict,
	chain.CodeWriterLost:                chain.ErrWriterLost,
	chain.CodeInvalidID:                 chain.ErrInvalidID,
	chain.CodeInvalidEntry:              chain.ErrInvalidEntry,
	chain.CodeCheckpointNotFound:        chain.ErrCheckpointNotFound,
	chain.CodeAtomicForkRequired:        chain.ErrAtomicForkRequired,
	chain.CodeForkSourceNotFound:        chain.ErrForkSourceNotFound,
	chain.CodeForkSourceThreadMismatch:  chain.ErrForkSourceThreadMismatch,
	chain.CodeForkDestinationNotEmpty:   chain.ErrForkDestinationNotEmpty,
	chain.CodeInvalidPath:               chain.ErrInvalidPath,
	chain.CodeInvalidWorkspace:          chain.ErrInvalidWorkspace,
	chain.CodeUnsupportedEntry:          chain.ErrUnsupportedEntry,
	chain.CodeMissingBlob:               chain.ErrMissingBlob,
	chain.CodeInvalidBlob:               chain.ErrInvalidBlob,
	chain.CodeMissingCheckpointArtifact: chain.ErrMissingCheckpointArtifact,
	chain.CodeForeignCheckpointArtifact: chain.ErrForeignCheckpointArtifact,
	chain.CodeInvalidArtifactBytes:      chain.ErrInvalidArtifactBytes,

	"SBXDB_BAD_REQUEST":        ErrBadRequest,
	"SBXDB_BLOB_MISMATCH":      sbxdb.ErrBlobKeyMismatch,
	"SBXDB_UNAUTHORIZED":       ErrUnauthorized,
	"SBXDB_FORBIDDEN":          ErrForbidden,
	"SBXDB_NOT_FOUND":          sbxdb.ErrBlobNotFound,
	"SBXDB_METHOD_NOT_ALLOWED": ErrBadRequest,
	"SBXDB_BLOB_IN_USE":        sbxdb.ErrBlobInUse,
	"SBXDB_TOO_LARGE":          chain.ErrTooLarge,
	"SBXDB_RANGE":              ErrRange,
	"SBXDB_CORRUPT":            chain.ErrCorrupt,
	"SBXDB_INTERNAL":           ErrInternal,
	"SBXDB_UNAVAILABLE":        ErrUnavailable,
	"SBXDB_READ_ONLY":          sbxdb.ErrReadOnly,
	"SBXDB_AMBIGUOUS":          sbxdb.ErrAmbiguousRef,
	"SBXDB_EMPTY_CAPTURE":      sbxdb.ErrEmptyCapture,
	"SBXDB_POISONED":           sbxdb.ErrPoisoned,
}

// Error is a failure the server reported. It matches the sentinel of its
// code (errors.Is), and chain.Code gives a contract code back.
type Error struct {
	Status  int    // the HTTP status
	Code    string // the wire code
	Message string
	// sentinel is byCode[Code]; for a contract code it is chain's, whose
	// Code method chain.Code reads through Unwrap.
	sentinel error
	// body is the response's body as read (up to 1 MiB): a poisoned
	// health answer carries the health beside the code (Client.Health).
	body []byte
}

func (e *Error) Error() string { return e.Message }

func (e *Error) Unwrap() error { return e.sentinel }

// responseError decodes the error body of a failed response.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var body struct{ Code, Message string }
	if json.Unmarshal(b, &body) != nil || body.Code == "" {
		return &Error{Status: resp.StatusCode, Code: "SBXDB_INTERNAL",
			Message: fmt.Sprintf("sbxdb: server answered %s", resp.Status), sentinel: ErrInternal}
	}
	err := wireError(resp.StatusCode, body.Code, body.Message)
	err.(*Error).body = b
	return err
}

// wireError is the error of a code and message from the server.
func wireError(status int, code, message string) error {
	s, ok := byCode[code]
	if !ok {
		s = ErrInternal
	}
	return &Error{Status: status, Code: code, Message: message, sentinel: s}
}

// transportError wraps a failure to reach the server, keeping the
// caller's cancellation and a refused peer (*PeerError: a server that was
// reached and not trusted) visible as themselves.
func transportError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *PeerError
	if errors.As(err, &pe) {
		return pe
	}
	return fmt.Errorf("%w: %v", ErrUnreachable, err)
}
