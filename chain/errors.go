package chain

import (
	"errors"
	"fmt"
)

// The contract's error codes (SPEC §1.8, §6.8), which Code returns.
const (
	CodeStaleHead                = "SANDBOX_SNAPSHOT_STALE_HEAD"
	CodeParentMismatch           = "SANDBOX_SNAPSHOT_PARENT_MISMATCH"
	CodeDuplicateID              = "SANDBOX_SNAPSHOT_DUPLICATE_ID"
	CodeNotHead                  = "SANDBOX_SNAPSHOT_NOT_HEAD"
	CodeWriterConflict           = "SANDBOX_SNAPSHOT_WRITER_CONFLICT"
	CodeWriterLost               = "SANDBOX_SNAPSHOT_WRITER_LOST"
	CodeInvalidID                = "SANDBOX_SNAPSHOT_INVALID_ID"
	CodeInvalidEntry             = "SANDBOX_SNAPSHOT_INVALID_ENTRY"
	CodeCheckpointNotFound       = "SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND"
	CodeAtomicForkRequired       = "SANDBOX_SNAPSHOT_ATOMIC_FORK_REQUIRED"
	CodeForkSourceNotFound       = "SANDBOX_SNAPSHOT_FORK_SOURCE_NOT_FOUND"
	CodeForkSourceThreadMismatch = "SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH"
	CodeForkDestinationNotEmpty  = "SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY"

	// The codes of capture, restore and artifact reads (SPEC §6.8).
	CodeInvalidPath               = "SANDBOX_SNAPSHOT_INVALID_PATH"
	CodeInvalidWorkspace          = "SANDBOX_SNAPSHOT_INVALID_WORKSPACE"
	CodeUnsupportedEntry          = "SANDBOX_SNAPSHOT_UNSUPPORTED_ENTRY"
	CodeMissingBlob               = "SANDBOX_SNAPSHOT_MISSING_BLOB"
	CodeInvalidBlob               = "SANDBOX_SNAPSHOT_INVALID_BLOB"
	CodeMissingCheckpointArtifact = "SANDBOX_SNAPSHOT_MISSING_CHECKPOINT_ARTIFACT"
	CodeForeignCheckpointArtifact = "SANDBOX_SNAPSHOT_FOREIGN_CHECKPOINT_ARTIFACT"
	CodeInvalidArtifactBytes      = "SANDBOX_SNAPSHOT_INVALID_ARTIFACT_BYTES"
)

// codeError is the type of the sentinel errors: its value is the contract
// code. Errors returned by operations wrap one sentinel, so errors.Is matches
// the sentinel and Code recovers the string.
type codeError string

func (c codeError) Error() string { return string(c) }

// Sentinels, one per contract code. Match them with errors.Is.
var (
	ErrStaleHead                = error(codeError(CodeStaleHead))
	ErrParentMismatch           = error(codeError(CodeParentMismatch))
	ErrDuplicateID              = error(codeError(CodeDuplicateID))
	ErrNotHead                  = error(codeError(CodeNotHead))
	ErrWriterConflict           = error(codeError(CodeWriterConflict))
	ErrWriterLost               = error(codeError(CodeWriterLost))
	ErrInvalidID                = error(codeError(CodeInvalidID))
	ErrInvalidEntry             = error(codeError(CodeInvalidEntry))
	ErrCheckpointNotFound       = error(codeError(CodeCheckpointNotFound))
	ErrAtomicForkRequired       = error(codeError(CodeAtomicForkRequired)) // declared by the contract; nothing returns it (SPEC §10 Q19)
	ErrForkSourceNotFound       = error(codeError(CodeForkSourceNotFound))
	ErrForkSourceThreadMismatch = error(codeError(CodeForkSourceThreadMismatch))
	ErrForkDestinationNotEmpty  = error(codeError(CodeForkDestinationNotEmpty))

	ErrInvalidPath               = error(codeError(CodeInvalidPath))
	ErrInvalidWorkspace          = error(codeError(CodeInvalidWorkspace))
	ErrUnsupportedEntry          = error(codeError(CodeUnsupportedEntry))
	ErrMissingBlob               = error(codeError(CodeMissingBlob))
	ErrInvalidBlob               = error(codeError(CodeInvalidBlob))
	ErrMissingCheckpointArtifact = error(codeError(CodeMissingCheckpointArtifact))
	ErrForeignCheckpointArtifact = error(codeError(CodeForeignCheckpointArtifact))
	ErrInvalidArtifactBytes      = error(codeError(CodeInvalidArtifactBytes))
)

// ErrCorrupt reports a stored record that failed its checksum or decoding;
// errors wrapping it name its bucket and key. The contract has no code for it.
var ErrCorrupt = errors.New("sbxdb: corrupt record")

// ErrTooLarge matches an input past MaxIDBytes or MaxRecordBytes: a
// *LimitError, also matching (with its code) ErrInvalidID or ErrInvalidEntry.
var ErrTooLarge = errors.New("sbxdb: size limit exceeded")

// LimitError reports an input past a size limit (errors.Is ErrTooLarge).
type LimitError struct {
	sentinel error  // ErrInvalidID or ErrInvalidEntry
	What     string // what was too large, e.g. "checkpoint id", "checkpoint record"
	Size     int64  // its size in bytes
	Limit    int64  // the limit in bytes
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: %s is %d bytes, more than the limit of %d", e.sentinel, e.What, e.Size, e.Limit)
}

func (e *LimitError) Unwrap() []error { return []error{e.sentinel, ErrTooLarge} }

func tooLarge(sentinel error, what string, size, limit int) error {
	return &LimitError{sentinel: sentinel, What: what, Size: int64(size), Limit: int64(limit)}
}

// contractError is a contract error: a sentinel plus a message naming the
// offending id, path or field. Unwrap returns the sentinel, so errors.Is
// matches it.
type contractError struct {
	sentinel error
	msg      string
}

func (e *contractError) Error() string { return e.sentinel.Error() + ": " + e.msg }

func (e *contractError) Unwrap() error { return e.sentinel }

// Errorf returns an error matching sentinel (an Err*): "CODE: " + Sprintf.
func Errorf(sentinel error, format string, args ...any) error {
	return &contractError{sentinel: sentinel, msg: fmt.Sprintf(format, args...)}
}

// Code returns err's contract code, or "" for nil and errors without one.
func Code(err error) string {
	var c codeError
	if errors.As(err, &c) {
		return string(c)
	}
	return ""
}
