package client

import (
	"context"

	"github.com/sbxdb/sbxdb"
)

// ResolveCheckpoint returns the id of the checkpoint ref names: an exact
// id, THREAD@ or THREAD@~N, or a unique id prefix of at least 4 bytes, as
// engine.DB.ResolveCheckpoint resolves it (POST /v1/checkpoints/resolve).
// A prefix of several ids is an error matching sbxdb.ErrAmbiguousRef
// (code SBXDB_AMBIGUOUS), whose message names the candidates; one that
// names nothing matches chain.ErrCheckpointNotFound.
func (c *Client) ResolveCheckpoint(ctx context.Context, ref string) (string, error) {
	var out struct {
		ID text `json:"id"`
	}
	if err := c.call(ctx, "/v1/checkpoints/resolve", struct {
		Ref text `json:"ref"`
	}{text(ref)}, &out); err != nil {
		return "", err
	}
	return string(out.ID), nil
}

// ThreadSummary returns the number of the thread's checkpoints and their
// newest createdAt, as engine.DB.ThreadSummary does (POST
// /v1/threads/summary): an unknown thread is the zero summary.
func (c *Client) ThreadSummary(ctx context.Context, threadID string) (sbxdb.ThreadSummary, error) {
	var out sbxdb.ThreadSummary
	if err := c.call(ctx, "/v1/threads/summary", threadArg{text(threadID)}, &out); err != nil {
		return sbxdb.ThreadSummary{}, err
	}
	return out, nil
}

// DeleteThread removes the thread's checkpoints, head, transcript, writer
// lease and artifact records, as engine.DB.DeleteThread does (POST
// /v1/threads/delete): a live writer is WRITER_CONFLICT unless force, and
// a thread with nothing stored is a result with nothing deleted.
func (c *Client) DeleteThread(ctx context.Context, threadID string, force bool) (sbxdb.DeleteThreadResult, error) {
	var out struct {
		Checkpoints     []text `json:"checkpoints"`
		Transcript      bool   `json:"transcript"`
		Lease           bool   `json:"lease"`
		ArtifactRecords int    `json:"artifactRecords"`
	}
	err := c.call(ctx, "/v1/threads/delete", struct {
		ThreadID text `json:"threadId"`
		Force    bool `json:"force,omitempty"`
	}{text(threadID), force}, &out)
	if err != nil {
		return sbxdb.DeleteThreadResult{}, err
	}
	return sbxdb.DeleteThreadResult{Checkpoints: strs(out.Checkpoints), Transcript: out.Transcript,
		Lease: out.Lease, ArtifactRecords: out.ArtifactRecords}, nil
}
