package sbxdb

import (
	"errors"
	"fmt"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/workspace"
)

// RestoreOptions adjusts a restore. The zero value (or nil) is the default.
type RestoreOptions struct {
	// Policy must be the one the capture used (SPEC §10 Q22): an entry it
	// would not have recorded is SANDBOX_SNAPSHOT_INVALID_PATH.
	Policy workspace.Policy
	// AllowEscapingSymlinks restores symlinks whose target is absolute or
	// leaves the tree. They are still created last and never followed.
	AllowEscapingSymlinks bool
	// Paths, if not empty, restores only the entries they name: each names
	// a file, a symlink, or a directory (recorded, or implied by entries
	// beneath it) restored with everything beneath it; the directories
	// above them are created as directories. Paths are slash-separated and
	// relative to the tree's root, and cleaned ("." segments, repeated and
	// trailing slashes dropped); an empty, absolute or drive path, a ".."
	// segment, a backslash, or the root itself is
	// SANDBOX_SNAPSHOT_INVALID_PATH, and so is a path that names nothing in
	// the checkpoint (a *PathNotFoundError: errors.Is(err,
	// ErrPathNotFound)), all before anything is written. Duplicates and
	// nested paths are allowed. The whole manifest is still checked (paths,
	// policy, symlinks): a partial restore refuses what a full one refuses.
	Paths []string
	// Progress, if set, is called from one goroutine about every 100 ms
	// while files are written, and once at the end.
	Progress func(Progress)
}

// RestoreStats counts what a restore wrote. Dirs counts the empty
// directories recorded (that RestoreOptions.Paths selected), not the
// directories made above entries. The JSON names are what the CLI prints.
type RestoreStats struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
}

// PathNotFoundError reports a path of RestoreOptions.Paths that names no
// entry of the checkpoint, nor a directory above one. Its contract code is
// SANDBOX_SNAPSHOT_INVALID_PATH.
type PathNotFoundError struct {
	Path       string // as cleaned
	Checkpoint string
}

func (e *PathNotFoundError) Error() string {
	return fmt.Sprintf("%s: restore path %q is not in checkpoint %q", chain.CodeInvalidPath, e.Path, e.Checkpoint)
}

// Unwrap returns the contract sentinel and ErrPathNotFound.
func (e *PathNotFoundError) Unwrap() []error { return []error{chain.ErrInvalidPath, ErrPathNotFound} }

// ErrPathNotFound matches the error of a restore whose RestoreOptions.Paths
// name an entry the checkpoint does not hold (a *PathNotFoundError, which
// also matches chain.ErrInvalidPath).
var ErrPathNotFound = errors.New("sbxdb: path not found in checkpoint")
