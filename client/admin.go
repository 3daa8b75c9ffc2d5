package client

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/gc"
	"github.com/sbxdb/sbxdb/lease"
)

// TODO(admin): every method below is a stub until the admin change.

// Health is what GET /v1/health answers.
type Health struct {
	OK      bool   `json:"ok"`
	Version string `json:"version"`
	Format  int    `json:"format"`
	Store   string `json:"store"` // the store directory
}

func (c *Client) Health(ctx context.Context) (Health, error) {
	return Health{}, errors.ErrUnsupported
}

func (c *Client) Stats(ctx context.Context) (*engine.StoreStats, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) GC(ctx context.Context, opts engine.GCOptions) (*engine.GCResult, error) {
	return nil, errors.ErrUnsupported
}

func (c *Client) Sweep(ctx context.Context, opts engine.SweepOptions) (gc.SweepResult, error) {
	return gc.SweepResult{}, errors.ErrUnsupported
}

func (c *Client) Check(ctx context.Context, opts engine.CheckStoreOptions) (*engine.CheckReport, error) {
	return nil, errors.ErrUnsupported
}

// CaptureRequest asks the server to capture a directory on its machine
// (POST /v1/capture). The caller holds Writer's lease and renews it.
type CaptureRequest struct {
	Writer       lease.Writer
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
	// Progress, if set, receives the server's progress reports.
	Progress func(engine.Progress)
}

func (c *Client) Capture(ctx context.Context, in CaptureRequest) (*engine.CaptureResult, error) {
	return nil, errors.ErrUnsupported
}

// RestoreRequest asks the server to restore a checkpoint into a directory
// on its machine (POST /v1/restore).
type RestoreRequest struct {
	CheckpointID, Dir     string
	Excludes, Includes    []string
	AllowEscapingSymlinks bool
	Progress              func(engine.Progress)
}

func (c *Client) Restore(ctx context.Context, in RestoreRequest) (engine.RestoreStats, error) {
	return engine.RestoreStats{}, errors.ErrUnsupported
}
