package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sbxdb/sbxdb/internal/wire"
)

// Errors for the server's own codes (docs/API.md, Errors) that no engine
// sentinel matches: internal/wire's, the one table of codes and errors
// the server answers by.
var (
	ErrBadRequest   = wire.ErrBadRequest // also SBXDB_METHOD_NOT_ALLOWED
	ErrUnauthorized = wire.ErrUnauthorized
	ErrForbidden    = wire.ErrForbidden
	ErrUnavailable  = wire.ErrUnavailable
	ErrRange        = wire.ErrRange
	ErrInternal     = wire.ErrInternal // also any code this build does not know
	// ErrUnreachable is a server that did not answer at all.
	ErrUnreachable = errors.New("sbxdb: server unreachable")
)

// Error is a failure the server reported. It matches the sentinel of its
// code (errors.Is), and chain.Code gives a contract code back.
type Error struct {
	Status  int    // the HTTP status
	Code    string // the wire code
	Message string
	// sentinel is wire.Sentinel(Code), set when the error is decoded; for
	// a contract code it is chain's, whose code chain.Code reads through
	// Unwrap. An Error made as a literal has none: Unwrap looks it up.
	sentinel error
	// body is the response's body as read (up to 1 MiB): a poisoned
	// health answer carries the health beside the code (Client.Health).
	body []byte
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinel of the error's code.
func (e *Error) Unwrap() error {
	if e.sentinel == nil {
		return wire.Sentinel(e.Code)
	}
	return e.sentinel
}

// responseError decodes the error body of a failed response.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var body wire.ErrorBody
	if json.Unmarshal(b, &body) != nil || body.Code == "" {
		return &Error{Status: resp.StatusCode, Code: wire.CodeInternal,
			Message: fmt.Sprintf("sbxdb: server answered %s", resp.Status), sentinel: ErrInternal}
	}
	err := wireError(resp.StatusCode, body.Code, body.Message)
	err.(*Error).body = b
	return err
}

// wireError is the error of a code and message from the server.
func wireError(status int, code, message string) error {
	return &Error{Status: status, Code: code, Message: message, sentinel: wire.Sentinel(code)}
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
