package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/gc"
)

// ndjson is the media type of a progress stream (docs/API.md, Maintenance).
const ndjson = "application/x-ndjson"

// progressInterval is how often a progress stream carries a line.
const progressInterval = 100 * time.Millisecond

func (s *Server) adminRoutes() {
	s.handle(healthRoute, s.health)
	s.mux.Handle("GET /metrics", s.metrics.handler())
	s.handle("GET /v1/stats", func(r *http.Request) (any, error) { return s.db.Stats(r.Context()) })
	s.mux.HandleFunc("POST /v1/gc", s.gc)
	s.mux.HandleFunc("POST /v1/sweep", s.sweep)
	s.mux.HandleFunc("POST /v1/check", s.check)
	s.mux.HandleFunc("POST /v1/capture", s.capture)
	s.mux.HandleFunc("POST /v1/restore", s.restore)
}

// healthJSON is the body of GET /v1/health.
type healthJSON struct {
	OK      bool   `json:"ok"`
	Version string `json:"version"`
	Format  int    `json:"format"` // engine.FormatVersion
	Store   string `json:"store"`  // the store directory, absolute
	// Scrub is the last background scrub's outcome (scrub.go), when the
	// server scrubs. Findings leave OK true and the status 200: health
	// says the server serves, and damage stops no request but those that
	// read the damaged data (restarting would not mend it).
	Scrub *scrubHealthJSON `json:"scrub,omitempty"`
	// Code, Message and Cause say why OK is false: a poisoned store
	// (CodePoisoned), its error and the failure that poisoned it.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Cause   string `json:"cause,omitempty"`
}

// health answers 200 with OK set, or, while the store is poisoned, 503
// SBXDB_POISONED with the same body, OK false and the cause: a supervisor
// probing it sees a server that cannot write.
func (s *Server) health(r *http.Request) (any, error) {
	dir := s.db.Dir()
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	h := healthJSON{OK: true, Version: s.opts.Version, Format: engine.FormatVersion, Store: dir, Scrub: s.scrubHealth()}
	if err := s.db.Poisoned(); err != nil {
		h.OK, h.Code, h.Message = false, CodePoisoned, Message(err)
		h.Cause = strings.TrimPrefix(err.Error(), sbxdb.ErrPoisoned.Error()+": ")
		return nil, &bodyError{err: err, body: h}
	}
	return h, nil
}

// gcRequest is the body of POST /v1/gc.
type gcRequest struct {
	Retain          bool               `json:"retain"`
	Keep            int                `json:"keep"`
	Threads         []chain.WireString `json:"threads"`
	OlderThanMs     int64              `json:"olderThanMs"`
	Immediate       bool               `json:"immediate"`
	RepackThreshold float64            `json:"repackThreshold"`
	Recompress      bool               `json:"recompress"`
	DryRun          bool               `json:"dryRun"`
}

func (s *Server) gc(w http.ResponseWriter, r *http.Request) {
	var in gcRequest
	if err := s.decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	olderThan, err := millis("olderThanMs", in.OlderThanMs)
	switch {
	case err != nil:
	case in.Keep < 0:
		err = errorf(CodeBadRequest, "keep is %d; it must be 0 or more", in.Keep)
	case !(in.RepackThreshold >= 0 && in.RepackThreshold <= 1):
		err = errorf(CodeBadRequest, "repackThreshold is %v; it must be from 0 to 1", in.RepackThreshold)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	opts := sbxdb.GCOptions{Retain: in.Retain, Keep: in.Keep, OlderThan: olderThan, Immediate: in.Immediate,
		RepackThreshold: in.RepackThreshold, Recompress: in.Recompress}
	for _, t := range in.Threads {
		opts.Threads = append(opts.Threads, string(t))
	}
	s.stream(w, r, func(ctx context.Context, _ func(any)) (any, error) {
		if in.DryRun {
			// The plan itself: GCResult's fields, and freed.
			p, err := s.db.PlanGC(ctx, opts)
			if err != nil {
				s.metrics.gcRan(true, 0, sbxdb.RetentionResult{}, err)
				return nil, badOptions(err)
			}
			s.metrics.gcRan(true, p.Freed, p.Retention, nil)
			return &p.GCPlan, nil
		}
		res, err := s.db.GC(ctx, opts)
		if !in.DryRun {
			s.metrics.gcLast.done("gc", err)
		}
		if err != nil {
			s.metrics.gcRan(false, 0, sbxdb.RetentionResult{}, err)
			return nil, badOptions(err)
		}
		freed := res.Sweep.Bytes + max(0, res.Repack.Before-res.Repack.After)
		s.metrics.gcRan(false, freed, res.Retention, nil)
		s.metrics.gcRuns.WithLabelValues("gc").Inc()
		s.metrics.gcFreed.WithLabelValues("gc").Add(float64(freed))
		return res, nil
	})
}

// sweepRequest is the body of POST /v1/sweep.
type sweepRequest struct {
	OlderThanMs int64 `json:"olderThanMs"`
	Immediate   bool  `json:"immediate"`
	DryRun      bool  `json:"dryRun"`
}

func (s *Server) sweep(w http.ResponseWriter, r *http.Request) {
	var in sweepRequest
	if err := s.decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	olderThan, err := millis("olderThanMs", in.OlderThanMs)
	if err != nil {
		writeError(w, err)
		return
	}
	opts := sbxdb.SweepOptions{OlderThan: olderThan, Immediate: in.Immediate, DryRun: in.DryRun}
	s.stream(w, r, func(ctx context.Context, _ func(any)) (any, error) {
		res, err := s.db.Sweep(ctx, opts)
		s.metrics.sweepRan(in.DryRun, res, err)
		if !in.DryRun {
			s.metrics.gcLast.done("sweep", err)
		}
		if err != nil {
			return nil, badOptions(err)
		}
		if !in.DryRun {
			s.metrics.gcRuns.WithLabelValues("sweep").Inc()
			s.metrics.gcFreed.WithLabelValues("sweep").Add(float64(res.Bytes))
		}
		return res, nil
	})
}

// millis is a duration given in milliseconds, which must be 0 or more and
// fit a time.Duration.
func millis(name string, ms int64) (time.Duration, error) {
	if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, errorf(CodeBadRequest, "%s is %d; it must be from 0 to %d", name, ms, math.MaxInt64/int64(time.Millisecond))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// badOptions gives the sweep's refusal of its options (a zero window
// without immediate) its code: the request is at fault.
func badOptions(err error) error {
	if errors.Is(err, gc.ErrInvalidOptions) {
		return errorf(CodeBadRequest, "%v", err)
	}
	return err
}

// checkRequest is the body of POST /v1/check.
type checkRequest struct {
	VerifyBlobs bool `json:"verifyBlobs"`
	Repair      bool `json:"repair"`
}

// checkProgress is a progress line of POST /v1/check: blobs verified so far
// and in all.
type checkProgress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	var in checkRequest
	if err := s.decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	s.stream(w, r, func(ctx context.Context, progress func(any)) (any, error) {
		return s.db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: in.VerifyBlobs, Repair: in.Repair,
			Progress: func(done, total int) { progress(checkProgress{done, total}) }})
	})
}

// progressJSON is a progress line of capture and restore: sbxdb.Progress
// with the JSON names of the wire.
type progressJSON struct {
	Files      int   `json:"files"`
	TotalFiles int   `json:"totalFiles"`
	Bytes      int64 `json:"bytes"`
	TotalBytes int64 `json:"totalBytes"`
	Done       bool  `json:"done"`
}

func wireProgress(p sbxdb.Progress) progressJSON {
	return progressJSON{Files: p.Files, TotalFiles: p.TotalFiles, Bytes: p.Bytes, TotalBytes: p.TotalBytes, Done: p.Done}
}

// captureRequest is the body of POST /v1/capture. Identifiers, strings the
// engine checks and integers are decoded without loss (chain.WireString,
// chain.WireInt), so that the engine decides every contract error.
type captureRequest struct {
	Writer                chain.Writer       `json:"writer"`
	Dir                   text               `json:"dir"`
	ID                    chain.WireString   `json:"id"`
	Label                 chain.WireString   `json:"label"`
	Reason                chain.WireString   `json:"reason"`
	CreatedAt             chain.WireInt      `json:"createdAt"`
	SourceRunID           chain.WireString   `json:"sourceRunId"`
	Conversation          []json.RawMessage  `json:"conversation"`
	Artifacts             []artifactJSON     `json:"artifacts"`
	Excludes              []text             `json:"excludes"`
	Includes              []text             `json:"includes"`
	Secrets               []chain.WireString `json:"secrets"`
	AllowEscapingSymlinks bool               `json:"allowEscapingSymlinks"`
	FailOnChange          bool               `json:"failOnChange"`
	Rehash                bool               `json:"rehash"`
	NoDefaultExcludes     bool               `json:"noDefaultExcludes"`
	SkipUnsupported       bool               `json:"skipUnsupported"`
	RequireFiles          bool               `json:"requireFiles"`
}

// artifactJSON is a checkpoint artifact in a capture request (chain.Artifact
// on the wire).
type artifactJSON struct {
	ArtifactID chain.WireString `json:"artifactId"`
	Name       chain.WireString `json:"name"`
	MimeType   chain.WireString `json:"mimeType"`
	BlobKey    chain.WireString `json:"blobKey"`
	Size       chain.WireInt    `json:"size"`
	CreatedAt  chain.WireInt    `json:"createdAt"`
}

// captureResult is the result of POST /v1/capture.
type captureResult struct {
	Checkpoint *chain.Checkpoint  `json:"checkpoint"`
	Stats      sbxdb.CaptureStats `json:"stats"`
	Warnings   []warning          `json:"warnings"`
}

func (s *Server) capture(w http.ResponseWriter, r *http.Request) {
	var in captureRequest
	if err := s.decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	dir, err := s.directory(r, "capture", string(in.Dir))
	if err != nil {
		writeError(w, err)
		return
	}
	defer dir.release()
	req := sbxdb.CaptureRequest{
		Writer: in.Writer, Dir: dir.path, ID: string(in.ID), Label: string(in.Label), Reason: chain.Reason(in.Reason),
		CreatedAt: int64(in.CreatedAt), SourceRunID: string(in.SourceRunID), Conversation: in.Conversation,
		Excludes: strs(in.Excludes), Includes: strs(in.Includes), NoDefaultExcludes: in.NoDefaultExcludes,
		AllowEscapingSymlinks: in.AllowEscapingSymlinks, FailOnChange: in.FailOnChange, Rehash: in.Rehash,
		SkipUnsupported: in.SkipUnsupported, RequireFiles: in.RequireFiles,
	}
	for _, a := range in.Artifacts {
		req.Artifacts = append(req.Artifacts, chain.Artifact{ArtifactID: string(a.ArtifactID), Name: string(a.Name),
			MimeType: string(a.MimeType), BlobKey: string(a.BlobKey), Size: int64(a.Size), CreatedAt: int64(a.CreatedAt)})
	}
	for _, v := range in.Secrets {
		req.Secrets = append(req.Secrets, string(v))
	}
	ci, err := req.Input()
	if err != nil {
		writeError(w, badGlobs(err))
		return
	}
	s.stream(w, r, func(ctx context.Context, progress func(any)) (any, error) {
		ci.Progress = func(p sbxdb.Progress) { progress(wireProgress(p)) }
		res, err := s.db.Capture(ctx, ci)
		if err != nil {
			return nil, err
		}
		s.metrics.appends.Inc()
		return captureResult{Checkpoint: res.Checkpoint, Stats: res.Stats, Warnings: wireWarnings(res.Warnings)}, nil
	})
}

// restoreRequest is the body of POST /v1/restore. Paths are the entries
// to restore (sbxdb.RestoreOptions.Paths), all when empty.
type restoreRequest struct {
	CheckpointID          chain.WireString `json:"checkpointId"`
	Dir                   text             `json:"dir"`
	Excludes              []text           `json:"excludes"`
	Includes              []text           `json:"includes"`
	Paths                 []text           `json:"paths"`
	AllowEscapingSymlinks bool             `json:"allowEscapingSymlinks"`
	NoDefaultExcludes     bool             `json:"noDefaultExcludes"`
	// sbxdb.RestoreOptions' Overwrite, Delete and KeepGoing.
	Overwrite bool `json:"overwrite"`
	Delete    bool `json:"delete"`
	KeepGoing bool `json:"keepGoing"`
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	var in restoreRequest
	if err := s.decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	if in.AllowEscapingSymlinks && !connOf(r.Context()).Unix {
		writeError(w, errorf(CodeForbidden, "restore into %s: allowEscapingSymlinks is served on unix sockets only", in.Dir))
		return
	}
	dir, err := s.directory(r, "restore", string(in.Dir))
	if err != nil {
		writeError(w, err)
		return
	}
	defer dir.release()
	req := sbxdb.RestoreRequest{
		CheckpointID: string(in.CheckpointID), Dir: dir.path, Excludes: strs(in.Excludes), Includes: strs(in.Includes),
		AllowEscapingSymlinks: in.AllowEscapingSymlinks, NoDefaultExcludes: in.NoDefaultExcludes,
		Overwrite: in.Overwrite, Delete: in.Delete, KeepGoing: in.KeepGoing,
	}
	for _, p := range in.Paths {
		req.Paths = append(req.Paths, string(p))
	}
	opts, err := req.Options()
	if err != nil {
		writeError(w, badGlobs(err))
		return
	}
	s.stream(w, r, func(ctx context.Context, progress func(any)) (any, error) {
		opts.Progress = func(p sbxdb.Progress) { progress(wireProgress(p)) }
		st, err := s.db.Restore(ctx, req.CheckpointID, req.Dir, &opts)
		if err != nil {
			dir.undo()
		}
		return st, err
	})
}

// strs is a request's paths or globs as strings.
func strs(ts []text) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

// badGlobs is the error of a request whose globs make no workspace
// policy (sbxdb.CaptureRequest.Input, sbxdb.RestoreRequest.Options): a
// CodeBadRequest error.
func badGlobs(err error) error { return errorf(CodeBadRequest, "%v", err) }

// resolveExisting resolves the symlinks of the longest part of the clean
// absolute path p that exists, and joins the rest to it. The rest holds no
// ".." (Clean removed them) and nothing that exists, so no symlink: a
// dangling symlink is refused, since what it would lead to is not known.
func resolveExisting(p string) (string, error) {
	p = filepath.Clean(p)
	rest := ""
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if _, lerr := os.Lstat(p); lerr == nil {
			return "", fmt.Errorf("%s is a symlink to nothing", p)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// within reports whether the clean path p is prefix or lies below it.
func within(prefix, p string) bool {
	rel, err := filepath.Rel(prefix, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// stream runs op, whose result is written as the response: as JSON alone,
// or, when the request accepts application/x-ndjson, as a stream of lines
// (docs/API.md, Maintenance). The stream carries {"progress": P} every
// progressInterval once op has reported a P (the latest one; op may report
// more often), then the last P reported if no line carried it, then
// {"result": R} or {"error": {"code", "message"}}. Its status is 200
// whatever op returns: errors found before op runs are the caller's to
// write.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, progress func(any)) (any, error)) {
	hook := s.hooks.progress
	if !accepts(r, ndjson) {
		res, err := op(r.Context(), func(any) {
			if hook != nil {
				hook(r)
			}
		})
		if err != nil {
			writeError(w, s.stopped(err))
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}

	w.Header().Set("Content-Type", ndjson)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	line := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			b, _ = json.Marshal(map[string]ErrorBody{"error": {Code: CodeInternal, Message: "encoding the response: " + err.Error()}})
		}
		w.Write(append(b, '\n'))
		rc.Flush()
	}
	rc.Flush()

	var (
		mu     sync.Mutex
		latest any
		seq    int // reports so far
		sent   int // the report the last line carried
	)
	// send writes the latest report: on every tick once there is one,
	// and at the end if no line carried it yet.
	send := func(again bool) {
		mu.Lock()
		p, n := latest, seq
		mu.Unlock()
		if n > sent || (again && n > 0) {
			line(map[string]any{"progress": p})
			sent = n
		}
	}
	stop, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				send(true)
			case <-stop:
				return
			}
		}
	}()
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); <-exited }) }
	defer halt() // op panicked: the ticker must not write to a dead response
	res, err := op(r.Context(), func(p any) {
		mu.Lock()
		latest = p
		seq++
		mu.Unlock()
		if hook != nil {
			hook(r)
		}
	})
	halt()
	send(false)
	if err != nil {
		err = s.stopped(err)
		line(map[string]ErrorBody{"error": {Code: Code(err), Message: Message(err)}})
		return
	}
	line(map[string]any{"result": res})
}

// stopped words the error of an operation that Serve cancelled.
func (s *Server) stopped(err error) error {
	if errors.Is(err, context.Canceled) && s.stopping.Load() {
		return errorf(CodeUnavailable, "cancelled: the server is shutting down (%v)", err)
	}
	return err
}

// accepts reports whether the request's Accept header names mediaType.
func accepts(r *http.Request, mediaType string) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), mediaType) {
				return true
			}
		}
	}
	return false
}
