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
	// Overwrite lets the target be a non-empty directory, as rsync does:
	// every entry is first written and verified into a staging directory
	// inside the target, then each file or symlink that differs from the
	// checkpoint's (a regular file with other bytes, another mode, a
	// symlink with another target, anything else in its place) is renamed
	// over it, atomically; an identical one is left alone
	// (RestoreStats.Unchanged). A symlink or file in the target where the
	// checkpoint has a directory is replaced by the directory: no write
	// follows a symlink of the target. A directory in the target where the
	// checkpoint has a file or symlink is refused (before anything is
	// changed) unless Delete is set, which replaces it. A failure while
	// the staged entries are moved puts back what was replaced, so the
	// target is left as it was.
	Overwrite bool
	// Delete, only with Overwrite and without Paths, also removes the
	// entries of the target the checkpoint does not hold
	// (RestoreStats.Deleted), as rsync --delete does. Entries the policy
	// excludes (.git, node_modules, … under the default policy) are left
	// alone, as are the staging directories of other restores. A symlink
	// is removed, never followed: nothing outside the target is touched.
	Delete bool
	// KeepGoing restores every file whose blob is intact when some are
	// missing or damaged, instead of failing the whole restore: those
	// files are not written (with Overwrite, the target's copy is left as
	// it is) and are named in RestoreStats.Skipped; the restore then
	// returns no error, so a caller must look at Skipped. Every byte
	// written is still verified.
	KeepGoing bool
}

// SkippedFile names a file that RestoreOptions.KeepGoing left out, and why:
// its blob is missing or damaged (Code, SANDBOX_SNAPSHOT_MISSING_BLOB or
// SANDBOX_SNAPSHOT_INVALID_BLOB, and the error's message without it).
type SkippedFile struct {
	Path   string `json:"path"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

// RestoreStats counts what a restore wrote. Dirs counts the empty
// directories recorded (that RestoreOptions.Paths selected), not the
// directories made above entries. The JSON names are what the CLI prints.
type RestoreStats struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
	// With RestoreOptions.Overwrite: files and symlinks of the target
	// found identical and left alone (not counted in Files, Symlinks or
	// Bytes, which count what was written), and, with Delete, the
	// entries removed (a directory counts once).
	Unchanged int `json:"unchanged,omitempty"`
	Deleted   int `json:"deleted,omitempty"`
	// Skipped names, sorted by path, the files RestoreOptions.KeepGoing
	// left out because their blob is missing or damaged.
	Skipped []SkippedFile `json:"skipped,omitempty"`
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
