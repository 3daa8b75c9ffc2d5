package sbxdb

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/workspace"
)

// CaptureInput says what to capture and how to label the checkpoint.
type CaptureInput struct {
	// Writer is the caller's lease on the thread (Writer.ThreadID).
	Writer lease.Writer
	// Dir is the workspace root.
	Dir string
	// ID of the new checkpoint; "" makes a random UUID.
	ID string
	// Reason defaults to automatic.
	Reason             chain.Reason
	Label, SourceRunID string
	// CreatedAt in epoch milliseconds; 0 means now (Options.Now).
	CreatedAt    int64
	Conversation []json.RawMessage
	// Artifacts already stored with PutArtifact.
	Artifacts []chain.Artifact
	// Policy chooses the files (SPEC §6.4); the zero value is the default.
	Policy workspace.Policy
	// Secrets are zero-filled wherever they occur in file bytes before
	// hashing and storing (SPEC §6.3).
	Secrets []string
	// AllowEscapingSymlinks records symlinks whose target is absolute or
	// leaves the workspace instead of refusing them.
	AllowEscapingSymlinks bool
	// Progress, if set, is called from one goroutine about every 100 ms
	// while files are read, and once at the end.
	Progress func(Progress)
	// FailOnChange makes a file or directory that changes or vanishes
	// while the capture runs an error (a *WorkspaceChangedError, matching
	// ErrWorkspaceChanged and chain.ErrInvalidWorkspace) that appends
	// nothing. Without it the capture records what it read, leaves out
	// what vanished, and names both in CaptureResult.Warnings.
	FailOnChange bool
	// Rehash ignores the stat cache: every file is read and hashed again
	// (blobs already stored are still not written twice). For trees
	// written in ways that do not move a file's times, such as through a
	// shared mmap (see capture_statcache.go).
	Rehash bool
	// SkipUnsupported leaves out, with one EntrySkipped warning each, the
	// entries that otherwise fail the whole capture: named pipes, sockets
	// and devices, files, symlinks and directories that cannot be opened
	// or read (permission denied, an I/O error), names a manifest cannot
	// hold (not valid UTF-8, a backslash, a drive prefix), and symlinks
	// with an invalid target or, without AllowEscapingSymlinks, one that
	// leaves the workspace. The workspace root itself must still be
	// readable.
	SkipUnsupported bool
	// RequireFiles makes a capture that would record no regular file and
	// no symlink fail with ErrEmptyCapture, appending nothing: an include
	// that matched nothing is a mistake, not an empty checkpoint. Empty
	// directories do not count.
	RequireFiles bool
}

// Progress reports a capture's or restore's advance. Files counts the
// files finished; Bytes advances within a file as its bytes are read or
// written, chunk by chunk, copies to further paths of the same blob
// included. A file counts at most its size in TotalBytes (its size at the
// walk, for a capture), however often it is read again or by how much it
// grew. A file a capture leaves out (vanished, skipped) leaves the totals.
// The last report (Done) of a run that succeeds has Files == TotalFiles and
// Bytes == TotalBytes.
type Progress struct {
	Files, TotalFiles int   // files read (capture) or written (restore)
	Bytes, TotalBytes int64 // their bytes
	Done              bool  // the last report
}

// CaptureStats counts what a capture did. The JSON names are what the CLI
// prints.
type CaptureStats struct {
	// Manifest entries by kind, and the total size of the files.
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
	// Files taken from the stat cache, not read.
	Unchanged int `json:"unchanged"`
	// Files read and hashed, and their bytes.
	FilesRead int   `json:"filesRead"`
	BytesRead int64 `json:"bytesRead"`
	// Blobs written, and the bytes they take on disk (compressed, frame
	// headers included).
	BlobsNew int   `json:"blobsNew"`
	BytesNew int64 `json:"bytesNew"`
	// Files read whose blob was stored already.
	Deduplicated int `json:"deduplicated"`
	// Files that changed while the capture ran (recorded as read), and
	// files and directories that vanished before they could be read (left
	// out): tar's "file changed as we read it". Each is named in
	// CaptureResult.Warnings.
	Changed  int `json:"changed"`
	Vanished int `json:"vanished"`
	// Entries left out as unsupported or unreadable under
	// CaptureInput.SkipUnsupported, each named in CaptureResult.Warnings.
	Skipped int `json:"skipped"`
	// Entries the policy left out, and their counts by rule: the names of
	// workspace.Policy.SkipRule (".git", "node_modules", ".env*",
	// "CLAUDE.md", "GEMINI.md", "skills", "marker", "exclude",
	// "--exclude GLOB" for each exclude glob, and ".sbxdbignore" for the
	// workspace root's ignore file, gitignore syntax, which every capture
	// honours: workspace.WithIgnore) and workspace.RuleNotIncluded
	// ("not included") for the entries, directories aside, no include matched.
	// Excluded is the sum of the counts. An excluded directory counts
	// once: what lies beneath it is not walked. The store's own directory,
	// when it lies in the workspace, is not counted. ExcludedByRule is
	// never nil in a CaptureResult.
	Excluded       int            `json:"excluded"`
	ExcludedByRule map[string]int `json:"excludedByRule"`
}

// CaptureResult is the appended checkpoint and what it took.
type CaptureResult struct {
	Checkpoint *chain.Checkpoint
	Stats      CaptureStats
	// Warnings names each file that changed and each file or directory
	// that vanished while the capture ran, and each entry skipped as
	// unsupported, sorted by path.
	Warnings []CaptureWarning
}

// EntryChange says what happened to a workspace entry while it was
// captured: the kind of a CaptureWarning.
type EntryChange string

const (
	// EntryChanged: the file's stat moved between the walk and the end of
	// its read, or during the read. It is recorded as the last read found
	// it; if it changed during each of maxReads reads, those bytes may mix
	// versions, and its digest is not cached.
	EntryChanged EntryChange = "changed"
	// EntryVanished: the file or directory was removed, or replaced by a
	// symlink or something else, before it could be read. It is left out.
	EntryVanished EntryChange = "vanished"
	// EntrySkipped: the entry is unsupported or cannot be read, and
	// CaptureInput.SkipUnsupported left it out. The detail says why: "a
	// named pipe", "cannot be read: permission denied", "the name is not
	// valid UTF-8".
	EntrySkipped EntryChange = "skipped"
)

// CaptureWarning names an entry that changed, vanished or was skipped
// during a capture.
type CaptureWarning struct {
	Path   string      `json:"path"`
	What   EntryChange `json:"what"`
	Detail string      `json:"detail"`
}

func (w CaptureWarning) String() string { return fmt.Sprintf("%q %s: %s", w.Path, w.What, w.Detail) }

// WorkspaceChangedError is the error of a capture that
// CaptureInput.FailOnChange stopped because an entry changed or vanished.
// It matches ErrWorkspaceChanged and chain.ErrInvalidWorkspace, whose code
// chain.Code returns.
type WorkspaceChangedError struct{ Warning CaptureWarning }

func (e *WorkspaceChangedError) Error() string {
	return chain.CodeInvalidWorkspace + ": " + e.Warning.String()
}

// Unwrap returns the contract sentinel and ErrWorkspaceChanged.
func (e *WorkspaceChangedError) Unwrap() []error {
	return []error{chain.ErrInvalidWorkspace, ErrWorkspaceChanged}
}

// ErrEmptyCapture matches the error of a capture that
// CaptureInput.RequireFiles stopped because it would record no file. Its
// message names the includes, if any, and the workspace.
var ErrEmptyCapture = errors.New("sbxdb: capture would record no file")

// ErrWorkspaceChanged matches the error of a capture that
// CaptureInput.FailOnChange stopped.
var ErrWorkspaceChanged = errors.New("sbxdb: workspace changed during capture")
