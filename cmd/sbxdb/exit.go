package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/internal/wire"
)

// The exit statuses of sbxdb (exitHelp says them to the user).
const (
	exitOK          = 0   // success
	exitError       = 1   // any other failure
	exitUsage       = 2   // the command line does not parse
	exitWarnings    = 3   // finished, with warnings printed
	exitNoStore     = 10  // no store at the path
	exitBusy        = 11  // the store, or the thread's writer lease, is held
	exitDamaged     = 12  // damaged data found
	exitPoisoned    = 13  // the store is poisoned: a sync failed
	exitInterrupted = 130 // SIGINT or SIGTERM
)

// The codes of a failure printed with --json when it has no contract code
// and did not come from a server.
const (
	codeUsage       = "SBXDB_USAGE"
	codeNoStore     = "SBXDB_NO_STORE"
	codeBusy        = "SBXDB_BUSY"
	codeCorrupt     = wire.CodeCorrupt // a server's code for a damaged record
	codeInterrupted = "SBXDB_INTERRUPTED"
	codeError       = "SBXDB_ERROR"
)

// serverCodes are the codes of a server (internal/wire's table) that a
// failure on the files prints too when it is the error a server sends
// them for (wire.Code): every other failure without a contract code
// prints one of the codes above.
var serverCodes = map[string]bool{
	wire.CodeAmbiguous:    true, // a checkpoint prefix several ids start with
	wire.CodePoisoned:     true, // a sync failed (exitPoisoned)
	wire.CodeEmptyCapture: true, // --include globs that matched no file
}

// exitHelp is the exit status section of sbxdb help.
const exitHelp = `exit status:
  0    success
  1    failure
  2    usage: a bad flag, a missing or extra argument, an unknown command;
       delete-thread without --yes
  3    finished with warnings (capture: files changed or vanished while
       read, or skipped with --skip-unsupported)
  10   no store at the path
  11   the store is busy (another process, or a server, holds it; the
       message names it), or the thread's writer lease is held
  12   damaged data found: check found errors, or a blob or record is
       missing or damaged (cat, restore, …)
  13   the store is poisoned: a sync failed (a full or failing disk), so
       it refuses writes until reopened (a server reopens it by itself
       once the cause clears; serve --exit-on-poison exits with it)
  130  interrupted (SIGINT or SIGTERM)

With --json a failure prints one line on standard output and nothing else:
{"error":{"code":CODE,"message":MESSAGE}}. CODE is the contract's code
(SANDBOX_SNAPSHOT_…) where the failure has one, the server's (SBXDB_…) for
a server's own failure, SBXDB_EMPTY_CAPTURE for a capture whose --include
globs matched no file, SBXDB_AMBIGUOUS for a checkpoint prefix that
several ids start with, else SBXDB_USAGE, SBXDB_NO_STORE, SBXDB_BUSY,
SBXDB_CORRUPT, SBXDB_INTERRUPTED or SBXDB_ERROR.
`

var (
	// errWarnings is the outcome of a command that did its work and
	// printed warnings (a capture that left out files that vanished):
	// exit status 3, nothing more printed.
	errWarnings = errors.New("finished with warnings")
	// errInterrupted is a command whose context SIGINT or SIGTERM
	// cancelled.
	errInterrupted = errors.New("interrupted")
	// errProblems is a check that found errors in the store, printed in
	// its report.
	errProblems = errors.New("the store has problems (see above)")
)

// exitStatus returns the exit status of a command that returned err, and
// the code that --json prints for it ("" for success and warnings).
// Through a server the same: the client's errors match the engine's and
// the contract's sentinels, and carry the server's code.
func exitStatus(err error) (status int, code string) {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK, ""
	case errors.As(err, &ue):
		return exitUsage, codeUsage
	case errors.Is(err, errWarnings):
		return exitWarnings, ""
	case errors.Is(err, errInterrupted):
		return exitInterrupted, codeInterrupted
	}
	status, code = exitError, codeError
	switch {
	case errors.Is(err, sbxdb.ErrAmbiguousRef):
		// exit status 1, the code a server gives it (below)
	case errors.Is(err, sbxdb.ErrNoStore):
		status, code = exitNoStore, codeNoStore
	case errors.Is(err, sbxdb.ErrLocked), errors.Is(err, chain.ErrWriterConflict):
		status, code = exitBusy, codeBusy
	case errors.Is(err, sbxdb.ErrPoisoned):
		status = exitPoisoned // the code a server gives it (below)
	case errors.Is(err, errProblems), errors.Is(err, chain.ErrInvalidBlob), errors.Is(err, chain.ErrMissingBlob),
		errors.Is(err, chain.ErrCorrupt), errors.Is(err, sbxdb.ErrBlobCorrupt):
		status, code = exitDamaged, codeCorrupt
	}
	var ce *client.Error
	if c := chain.Code(err); c != "" {
		code = c
	} else if errors.As(err, &ce) && ce.Code != "" {
		code = ce.Code
	} else if c, ok := wire.Code(err); ok && serverCodes[c] {
		code = c // as a server says it
	}
	return status, code
}

// report prints the failure err of the run of t (nothing for success or
// warnings) and returns the exit status. jsonOut prints it as JSON on
// stdout; else it goes to stderr, a usage error followed by its usage
// line.
func (t *cmdTree) report(err error, jsonOut bool, stdout, stderr io.Writer) int {
	status, code := exitStatus(err)
	if code == "" {
		return status
	}
	var ue *usageError
	isUsage := errors.As(err, &ue)
	if jsonOut {
		var re *reportedError
		if errors.As(err, &re) {
			return status // the report printed says it
		}
		msg := message(err)
		if isUsage && ue.name() != "sbxdb" {
			msg = strings.TrimPrefix(ue.name(), "sbxdb ") + ": " + msg
		}
		// The code has its own field: the message does not repeat it.
		msg = strings.TrimPrefix(msg, code+": ")
		writeJSON(stdout, jsonError{Error: jsonErrorBody{Code: code, Message: msg}})
		return status
	}
	switch {
	case isUsage && ue.help:
		t.rootHelp(stderr)
	case isUsage:
		fmt.Fprintf(stderr, "%s: %s\nusage: %s\n", ue.name(), message(err), t.usageLine(ue))
	default:
		fmt.Fprintf(stderr, "sbxdb: %s\n", message(err))
	}
	return status
}

// jsonError is a failure as --json prints it.
type jsonError struct {
	Error jsonErrorBody `json:"error"`
}

type jsonErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// reportedError is a failure whose JSON report the command printed
// already (check --json that found errors): --json prints nothing more,
// the exit status says it.
type reportedError struct{ err error }

func (e *reportedError) Error() string { return e.err.Error() }
func (e *reportedError) Unwrap() error { return e.err }

// rewordedError is an error told in other words: its message replaces
// err's, and errors.Is and errors.As still find err.
type rewordedError struct {
	msg string
	err error
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }

// reword returns err with the message format says.
func reword(err error, format string, args ...any) error {
	return &rewordedError{msg: fmt.Sprintf(format, args...), err: err}
}

// jsonRequested reports whether args ask for --json, for a command line
// that did not parse: the flags after the one that failed were not read.
func jsonRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if v, ok := strings.CutPrefix(a, "--json"); ok {
			if v == "" {
				return true
			}
			if v, ok := strings.CutPrefix(v, "="); ok {
				b, err := strconv.ParseBool(v)
				return err == nil && b
			}
		}
	}
	return false
}
