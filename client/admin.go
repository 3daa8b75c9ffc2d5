package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/wire"
)

// Health is what GET /v1/health answers.
type Health struct {
	OK      bool   `json:"ok"`
	Version string `json:"version"`
	Format  int    `json:"format"`
	Store   string `json:"store"` // the store directory
	// Cause is, while the store is poisoned, the failure that poisoned
	// it.
	Cause string `json:"cause,omitempty"`
}

// Health asks the server whether it serves, and which store. It needs no
// token. While the store is poisoned the server answers 503: the error
// matches sbxdb.ErrPoisoned, and the Health returned is still filled in
// (OK false, Cause set).
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.call(ctx, "/v1/health", nil, &h)
	if ce, ok := errors.AsType[*Error](err); ok && ce.Code == wire.CodePoisoned {
		json.Unmarshal(ce.body, &h)
	}
	return h, err
}

// Stats returns what the store holds and what it costs on disk
// (engine.DB.Stats).
func (c *Client) Stats(ctx context.Context) (*sbxdb.StoreStats, error) {
	var st sbxdb.StoreStats
	if err := c.call(ctx, "/v1/stats", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// GC runs retention, the sweep and repacking on the server (engine.DB.GC).
// Durations travel in milliseconds: a positive OlderThan is rounded up to
// the next one.
func (c *Client) GC(ctx context.Context, opts sbxdb.GCOptions) (*sbxdb.GCResult, error) {
	var res sbxdb.GCResult
	if err := c.call(ctx, "/v1/gc", gcBody(opts, false), &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// PlanGC returns what GC with opts would do on the server, changing
// nothing (engine.DB.PlanGC; POST /v1/gc with dryRun). The plan is a
// report: it is carried out by the server's own GC, not sent back.
func (c *Client) PlanGC(ctx context.Context, opts sbxdb.GCOptions) (*sbxdb.GCPlan, error) {
	p := sbxdb.GCPlan{Options: opts}
	if err := c.call(ctx, "/v1/gc", gcBody(opts, true), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// gcBody is the body of POST /v1/gc.
func gcBody(opts sbxdb.GCOptions, dryRun bool) map[string]any {
	return map[string]any{
		"retain": opts.Retain, "keep": opts.Keep, "threads": adminStrings(opts.Threads),
		"olderThanMs": ceilMillis(opts.OlderThan), "immediate": opts.Immediate,
		"repackThreshold": opts.RepackThreshold, "recompress": opts.Recompress, "dryRun": dryRun,
	}
}

// Sweep deletes the blobs nothing references that are older than
// opts.OlderThan (engine.DB.Sweep), rounded up to a millisecond.
func (c *Client) Sweep(ctx context.Context, opts sbxdb.SweepOptions) (sbxdb.SweepResult, error) {
	in := map[string]any{"olderThanMs": ceilMillis(opts.OlderThan), "immediate": opts.Immediate, "dryRun": opts.DryRun}
	var res sbxdb.SweepResult
	err := c.call(ctx, "/v1/sweep", in, &res)
	return res, err
}

// Check verifies the store (engine.DB.Check). With opts.Progress set, the
// response is a progress stream whose reports it receives.
func (c *Client) Check(ctx context.Context, opts sbxdb.CheckStoreOptions) (*sbxdb.CheckReport, error) {
	in := map[string]any{"verifyBlobs": opts.VerifyBlobs, "repair": opts.Repair}
	var progress func(json.RawMessage) error
	if opts.Progress != nil {
		progress = func(raw json.RawMessage) error {
			var p struct{ Done, Total int }
			if err := json.Unmarshal(raw, &p); err != nil {
				return err
			}
			opts.Progress(p.Done, p.Total)
			return nil
		}
	}
	var rep sbxdb.CheckReport
	if err := c.maintain(ctx, "/v1/check", in, progress, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// CaptureRequest asks the server to capture a directory on its machine
// (POST /v1/capture): the contract's sbxdb.CaptureRequest, whose Dir is an
// absolute path on the server's machine. The caller holds Writer's lease
// and renews it.
type CaptureRequest = sbxdb.CaptureRequest

// Capture records the directory in.Dir of the server's machine as a new
// checkpoint on the head of the writer's thread (engine.DB.Capture). If
// ctx ends before the server answers, the server cancels the capture,
// which then appends nothing unless its commit had begun.
func (c *Client) Capture(ctx context.Context, in sbxdb.CaptureRequest) (*sbxdb.CaptureResult, error) {
	body := map[string]any{
		"writer": in.Writer, "dir": text(in.Dir), "id": chain.WireString(in.ID), "label": chain.WireString(in.Label),
		"reason": chain.WireString(in.Reason), "createdAt": in.CreatedAt, "sourceRunId": chain.WireString(in.SourceRunID),
		"excludes": texts(in.Excludes), "includes": texts(in.Includes), "secrets": adminStrings(in.Secrets),
		"allowEscapingSymlinks": in.AllowEscapingSymlinks, "failOnChange": in.FailOnChange, "rehash": in.Rehash,
		"noDefaultExcludes": in.NoDefaultExcludes, "skipUnsupported": in.SkipUnsupported, "requireFiles": in.RequireFiles,
	}
	if in.Conversation != nil {
		body["conversation"] = in.Conversation
	}
	if in.Artifacts != nil {
		body["artifacts"] = in.Artifacts
	}
	var out struct {
		Checkpoint *chain.Checkpoint  `json:"checkpoint"`
		Stats      sbxdb.CaptureStats `json:"stats"`
		Warnings   []warning          `json:"warnings"`
	}
	if err := c.maintain(ctx, "/v1/capture", body, workProgress(in.Progress), &out); err != nil {
		return nil, err
	}
	return &sbxdb.CaptureResult{Checkpoint: out.Checkpoint, Stats: out.Stats, Warnings: engineWarnings(out.Warnings)}, nil
}

// RestoreRequest asks the server to restore a checkpoint into a directory
// on its machine (POST /v1/restore): the contract's sbxdb.RestoreRequest,
// whose Dir is an absolute path on the server's machine.
type RestoreRequest = sbxdb.RestoreRequest

// Restore writes the tree of a checkpoint into in.Dir on the server's
// machine (engine.DB.Restore).
func (c *Client) Restore(ctx context.Context, in sbxdb.RestoreRequest) (sbxdb.RestoreStats, error) {
	body := map[string]any{
		"checkpointId": chain.WireString(in.CheckpointID), "dir": text(in.Dir), "excludes": texts(in.Excludes), "includes": texts(in.Includes),
		"allowEscapingSymlinks": in.AllowEscapingSymlinks, "noDefaultExcludes": in.NoDefaultExcludes,
	}
	if len(in.Paths) > 0 {
		body["paths"] = texts(in.Paths)
	}
	// Sent only when set, so that an older server, which rejects unknown
	// fields or ignores them, is never asked for what it cannot do
	// without it showing.
	for name, on := range map[string]bool{"overwrite": in.Overwrite, "delete": in.Delete, "keepGoing": in.KeepGoing} {
		if on {
			body[name] = true
		}
	}
	var st sbxdb.RestoreStats
	err := c.maintain(ctx, "/v1/restore", body, workProgress(in.Progress), &st)
	return st, err
}

// workProgress decodes the progress lines of capture and restore for fn;
// nil when fn is.
func workProgress(fn func(sbxdb.Progress)) func(json.RawMessage) error {
	if fn == nil {
		return nil
	}
	return func(raw json.RawMessage) error {
		var p struct {
			Files      int   `json:"files"`
			TotalFiles int   `json:"totalFiles"`
			Bytes      int64 `json:"bytes"`
			TotalBytes int64 `json:"totalBytes"`
			Done       bool  `json:"done"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return err
		}
		fn(sbxdb.Progress{Files: p.Files, TotalFiles: p.TotalFiles, Bytes: p.Bytes, TotalBytes: p.TotalBytes, Done: p.Done})
		return nil
	}
}

// maintain posts in to path and decodes the result into out. With progress
// set it asks for a progress stream (docs/API.md, Maintenance) and hands
// progress each report; a stream bounds nothing by Options.Timeout, since
// its reports show it alive. An error line is the server's error, and a
// stream that ends without a result is ErrUnreachable (the server went
// away).
func (c *Client) maintain(ctx context.Context, path string, in any, progress func(json.RawMessage) error, out any) error {
	if progress == nil {
		return c.call(ctx, path, in, out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("client: encoding the request to %s: %w", path, err)
	}
	req, err := c.newRequest(ctx, http.MethodPost, path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := (&http.Client{Transport: c.http.Transport}).Do(req)
	if err != nil {
		return transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return responseError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("client: decoding the response of %s: %w", path, err)
		}
		return nil
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var line struct {
			Progress json.RawMessage `json:"progress"`
			Result   json.RawMessage `json:"result"`
			Error    *wire.ErrorBody `json:"error"`
		}
		if err := dec.Decode(&line); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("%w: the progress stream of %s ended without a result: %v", ErrUnreachable, path, err)
		}
		switch {
		case line.Error != nil:
			// The stream's 200 went out before the failure: the error
			// has no status of its own.
			return wireError(0, line.Error.Code, line.Error.Message)
		case line.Result != nil:
			if err := json.Unmarshal(line.Result, out); err != nil {
				return fmt.Errorf("client: decoding the result of %s: %w", path, err)
			}
			return nil
		case line.Progress != nil:
			if err := progress(line.Progress); err != nil {
				return fmt.Errorf("client: decoding a progress report of %s: %w", path, err)
			}
		}
	}
}

// ceilMillis is d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// adminStrings is ss as request members that cross JSON without loss
// (chain.WireString); nil stays null.
func adminStrings(ss []string) []chain.WireString {
	if ss == nil {
		return nil
	}
	out := make([]chain.WireString, len(ss))
	for i, s := range ss {
		out[i] = chain.WireString(s)
	}
	return out
}

// texts carries paths and globs without loss: a directory's name is bytes,
// not always UTF-8 (text).
func texts(ss []string) []text {
	if ss == nil {
		return nil
	}
	out := make([]text, len(ss))
	for i, s := range ss {
		out[i] = text(s)
	}
	return out
}
