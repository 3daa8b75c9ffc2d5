package sbxdb

import (
	"encoding/json"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/workspace"
)

// CaptureRequest is a capture of a directory in a command line's terms:
// globs in place of a workspace.Policy, the secret values themselves. The
// CLI hands it to a store it opened (Input makes the engine's
// CaptureInput of it) or, through client.Client.Capture, to a server
// (POST /v1/capture), which makes the same CaptureInput of it. The caller
// holds Writer's lease and renews it.
type CaptureRequest struct {
	Writer lease.Writer
	// Dir is the workspace root; to a server, an absolute path on its
	// machine.
	Dir          string
	ID, Label    string
	Reason       chain.Reason
	CreatedAt    int64
	SourceRunID  string
	Conversation []json.RawMessage
	Artifacts    []chain.Artifact
	// Excludes and Includes are globs (workspace.Policy.WithGlobs).
	Excludes, Includes []string
	// Secrets are the values to zero-fill (SPEC §6.3).
	Secrets                             []string
	AllowEscapingSymlinks, FailOnChange bool
	Rehash                              bool
	// NoDefaultExcludes drops the default exclusions
	// (workspace.Policy.NoDefaultExclude); a restore of the checkpoint
	// must say the same.
	NoDefaultExcludes bool
	// SkipUnsupported and RequireFiles are CaptureInput's.
	SkipUnsupported, RequireFiles bool
	// Progress, if set, receives the progress reports.
	Progress func(Progress)
}

// Input is the CaptureInput r describes: its globs made a policy
// (workspace.GlobPolicy, whose error a malformed glob is).
func (r *CaptureRequest) Input() (CaptureInput, error) {
	pol, err := workspace.GlobPolicy(r.NoDefaultExcludes, r.Excludes, r.Includes)
	if err != nil {
		return CaptureInput{}, err
	}
	return CaptureInput{
		Writer: r.Writer, Dir: r.Dir, ID: r.ID, Reason: r.Reason, Label: r.Label,
		SourceRunID: r.SourceRunID, CreatedAt: r.CreatedAt, Conversation: r.Conversation,
		Artifacts: r.Artifacts, Policy: pol, Secrets: r.Secrets,
		AllowEscapingSymlinks: r.AllowEscapingSymlinks, FailOnChange: r.FailOnChange,
		Rehash: r.Rehash, SkipUnsupported: r.SkipUnsupported, RequireFiles: r.RequireFiles,
		Progress: r.Progress,
	}, nil
}

// RestoreRequest is a restore of a checkpoint into a directory in a
// command line's terms (globs in place of a workspace.Policy), as
// CaptureRequest is a capture: Options makes the engine's RestoreOptions
// of it, and client.Client.Restore sends it to a server
// (POST /v1/restore).
type RestoreRequest struct {
	// Dir is the directory to restore into; to a server, an absolute path
	// on its machine.
	CheckpointID, Dir  string
	Excludes, Includes []string
	// Paths, if not empty, restores only these entries and the
	// directories above them (RestoreOptions.Paths). A path that is
	// malformed or names nothing in the checkpoint is
	// chain.ErrInvalidPath.
	Paths                 []string
	AllowEscapingSymlinks bool
	// NoDefaultExcludes must be what the capture said.
	NoDefaultExcludes bool
	// Overwrite, Delete and KeepGoing are RestoreOptions'; with KeepGoing
	// the files left out are in the result's Skipped.
	Overwrite, Delete, KeepGoing bool
	Progress                     func(Progress)
}

// Options is the RestoreOptions r describes: its globs made a policy
// (workspace.GlobPolicy, whose error a malformed glob is).
func (r *RestoreRequest) Options() (RestoreOptions, error) {
	pol, err := workspace.GlobPolicy(r.NoDefaultExcludes, r.Excludes, r.Includes)
	if err != nil {
		return RestoreOptions{}, err
	}
	return RestoreOptions{Policy: pol, AllowEscapingSymlinks: r.AllowEscapingSymlinks, Paths: r.Paths, Progress: r.Progress,
		Overwrite: r.Overwrite, Delete: r.Delete, KeepGoing: r.KeepGoing}, nil
}
