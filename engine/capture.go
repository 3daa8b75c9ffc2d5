package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/workspace"
	bolt "go.etcd.io/bbolt"
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
}

// Progress reports a capture's or restore's advance.
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
}

// CaptureResult is the appended checkpoint and what it took.
type CaptureResult struct {
	Checkpoint *chain.Checkpoint
	Stats      CaptureStats
}

// smallFile is the size up to which a file is read whole into memory and
// packed; larger files are streamed into a blob file of their own.
const smallFile = 1 << 20

// Capture records the workspace in.Dir as a new checkpoint on the head of
// in.Writer.ThreadID. It walks the tree under the policy, takes unchanged
// files from the stat cache, hashes and compresses the others in parallel,
// makes every new blob durable with one barrier, and then appends the
// checkpoint and indexes its new blobs in one transaction: blob bytes are
// durable before the checkpoint that names them commits, and any error
// leaves the store as it was. The store's
// own directory is never captured, even when it lies inside in.Dir.
func (db *DB) Capture(ctx context.Context, in CaptureInput) (*CaptureResult, error) {
	if db.c == nil {
		return nil, ErrReadOnly
	}
	if err := chain.CheckID("threadId", in.Writer.ThreadID); err != nil {
		return nil, err
	}
	root, err := filepath.Abs(in.Dir)
	if err != nil {
		return nil, chain.Errorf(chain.ErrInvalidWorkspace, "workspace %q: %v", in.Dir, err)
	}
	// Fail early, before reading gigabytes, if the lease is not ours; the
	// append checks it again.
	if err := db.checkWriter(in.Writer); err != nil {
		return nil, err
	}
	redactor := workspace.NewRedactor(in.Secrets)
	cachePath := statCachePath(db.dir, in.Writer.ThreadID, root)
	cache := loadStatCache(cachePath, redactor.Fingerprint())

	c := &capture{db: db, root: root, redactor: redactor, batch: db.blobs.NewBatch()}
	defer c.batch.Close() // after the append: the batch pins its keys until then
	// A cached digest is only good while its blob is stored; pinned, it
	// stays stored until the append has committed. Every key the cache
	// holds is pinned and looked up while the tree is walked: the walk
	// waits on system calls, and pinning the keys of files deleted since
	// only keeps their blobs until this capture ends.
	type pinned struct {
		missing, stale []string
		err            error
	}
	pins := make(chan pinned, 1)
	go func() {
		missing, stale, err := c.batch.Lookup(ctx, cache.keys())
		pins <- pinned{missing, stale, err}
	}()
	started := time.Now()
	storeDir, _ := filepath.Abs(db.dir)
	tree, err := walkTree(ctx, root, storeDir, &in.Policy, in.AllowEscapingSymlinks)
	pin := <-pins
	if err == nil {
		err = pin.err
	}
	if err != nil {
		return nil, err
	}
	files := c.plan(tree, cache, pin.missing, pin.stale)
	if err := c.pinArtifacts(ctx, in.Artifacts); err != nil {
		return nil, err
	}
	stop := reportProgress(in.Progress, &c.progress)
	err = parallel(ctx, files, c.newHasher)
	stop()
	if err != nil {
		return nil, err
	}
	if err := db.point("capture.beforeCommit"); err != nil {
		return nil, err
	}
	cp, err := db.commitCapture(ctx, c.batch, &in, manifest(tree))
	if err != nil {
		return nil, err
	}
	c.stats.BytesNew = c.batch.Written()
	if c.stats.FilesRead > 0 || c.stats.Files != len(cache.entries) {
		newStatCache(started.UnixNano(), redactor.Fingerprint(), tree).save(cachePath)
	}
	return &CaptureResult{Checkpoint: cp, Stats: c.stats}, nil
}

// capture is the state of one Capture call.
type capture struct {
	db       *DB
	root     string
	redactor *workspace.Redactor
	batch    *cas.Batch
	progress progressCounters

	mu    sync.Mutex // guards stats while files are read
	stats CaptureStats
}

// plan takes the digests the stat cache can vouch for, unless their blobs
// are missing (keys the cache holds that the store does not), marks the
// stale ones it takes for refreshing, and returns the files that must be
// read.
func (c *capture) plan(tree []walked, cache *statCache, missing, stale []string) []*walked {
	var toRead, hits []*walked
	cursor := 0
	for i := range tree {
		w := &tree[i]
		switch w.kind {
		case chain.KindDir:
			c.stats.Dirs++
			continue
		case chain.KindSymlink:
			c.stats.Symlinks++
			continue
		}
		c.stats.Files++
		c.stats.Bytes += w.st.size
		if sum, key, ok := cache.lookup(&cursor, w.path, w.st); ok {
			w.sum, w.key, w.size = sum, key, w.st.size
			hits = append(hits, w)
			continue
		}
		toRead = append(toRead, w)
	}
	if len(missing) > 0 {
		gone := make(map[string]bool, len(missing))
		for _, k := range missing {
			gone[k] = true
		}
		for _, w := range hits {
			if gone[w.key] {
				toRead = append(toRead, w)
			}
		}
	}
	if len(stale) > 0 { // about once an hour, every key at once (cas.RefreshAfter)
		old := make(map[string]bool, len(stale))
		for _, k := range stale {
			old[k] = true
		}
		var used []string
		for _, w := range hits {
			if old[w.key] {
				used = append(used, w.key)
			}
		}
		c.batch.Refresh(used)
	}
	c.stats.Unchanged = c.stats.Files - len(toRead)
	for _, w := range toRead {
		c.progress.totalFiles.Add(1)
		c.progress.totalBytes.Add(w.st.size)
	}
	return toRead
}

// pinArtifacts pins the blobs of the artifacts the checkpoint will name,
// which PutArtifact stored earlier, and fails if one is gone.
func (c *capture) pinArtifacts(ctx context.Context, artifacts []chain.Artifact) error {
	if len(artifacts) == 0 {
		return nil
	}
	keys := make([]string, len(artifacts))
	for i, a := range artifacts {
		keys[i] = a.BlobKey
	}
	missing, err := c.batch.Pin(ctx, keys)
	if err == nil && len(missing) > 0 {
		err = chain.Errorf(chain.ErrMissingBlob, "artifact blob %s is not stored", missing[0])
	}
	return err
}

// newHasher returns one reading goroutine's function: it stores a file's
// (redacted) bytes and records their digest and size in the walked entry,
// which no other goroutine touches. Its buffer is reused from file to file.
func (c *capture) newHasher() func(context.Context, *walked) error {
	buf := make([]byte, 0, 64<<10)
	return func(ctx context.Context, w *walked) error {
		var err error
		buf, err = c.hashFile(ctx, w, buf)
		return err
	}
}

// hashFile stores one file's (redacted) bytes. buf is a reusable buffer,
// returned possibly grown.
func (c *capture) hashFile(ctx context.Context, w *walked, buf []byte) ([]byte, error) {
	if ctx.Err() != nil {
		return buf, ctx.Err()
	}
	f, err := vfs.Open(filepath.Join(c.root, filepath.FromSlash(w.path)))
	if err != nil {
		return buf, chain.Errorf(chain.ErrInvalidWorkspace, "reading %q: %v", w.path, err)
	}
	defer f.Close()
	var res cas.AddResult
	if w.st.size <= smallFile {
		buf, err = readAll(f, buf[:0], smallFile)
		if err == errTooBig { // it grew since the walk: stream it
			if _, err = f.Seek(0, io.SeekStart); err == nil {
				res, err = c.batch.AddReader(ctx, cas.Files, c.redactor.Reader(f))
			}
		} else if err == nil {
			c.redactor.Redact(buf)
			res, err = c.batch.Add(ctx, cas.Files, buf)
		}
	} else {
		res, err = c.batch.AddReader(ctx, cas.Files, c.redactor.Reader(f))
	}
	if err != nil {
		return buf, fmt.Errorf("capture %q: %w", w.path, err)
	}
	w.sum, w.key, w.size = res.Sum, res.Key, res.Size
	c.progress.files.Add(1)
	c.progress.bytes.Add(res.Size)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.FilesRead++
	c.stats.BytesRead += res.Size
	c.stats.Bytes += res.Size - w.st.size // what was read, if it changed since the walk
	if res.New {
		c.stats.BlobsNew++
	} else {
		c.stats.Deduplicated++
	}
	return buf, nil
}

// manifest builds the checkpoint's entries from the walk, every file's
// digest and size known.
func manifest(tree []walked) []chain.Entry {
	out := make([]chain.Entry, len(tree))
	for i := range tree {
		w := &tree[i]
		e := chain.Entry{Path: w.path, Kind: w.kind}
		switch w.kind {
		case chain.KindFile:
			e.BlobKey, e.Size, e.Executable = w.key, w.size, w.exec
		case chain.KindSymlink:
			e.Target = w.target
		}
		out[i] = e
	}
	return out
}

// commitCapture appends the captured checkpoint on the thread's current
// head in the transaction that indexes the batch's blobs, once their bytes
// are durable: the checkpoint and the blobs it names commit together, or
// nothing does.
func (db *DB) commitCapture(ctx context.Context, batch *cas.Batch, in *CaptureInput, files []chain.Entry) (*chain.Checkpoint, error) {
	head, err := db.Head(ctx, in.Writer.ThreadID)
	if err != nil {
		return nil, err
	}
	cp := &chain.Checkpoint{
		ID: in.ID, ThreadID: in.Writer.ThreadID, ParentID: head, CreatedAt: in.CreatedAt,
		Reason: in.Reason, Label: in.Label, SourceRunID: in.SourceRunID,
		Files: files, Conversation: in.Conversation, Artifacts: in.Artifacts,
	}
	if cp.ID == "" {
		cp.ID = lease.NewToken()
	}
	if cp.Reason == "" {
		cp.Reason = chain.ReasonAutomatic
	}
	if cp.CreatedAt == 0 {
		cp.CreatedAt = db.opts.nowMs()
	}
	app := chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: in.Writer}
	fn, err := db.appendTx(&app)
	if err != nil {
		return nil, err
	}
	if err := batch.CommitWith(ctx, fn); err != nil {
		if chain.Code(err) == "" {
			err = fmt.Errorf("capture: %w", err)
		}
		return nil, err
	}
	return cp.Clone(), nil
}

// errTooBig reports a file that grew past the in-memory limit.
var errTooBig = errors.New("file grew past the in-memory limit")

// readAll reads r to EOF into buf, or fails with errTooBig past limit bytes.
func readAll(r io.Reader, buf []byte, limit int) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return buf, errTooBig
			}
			buf = slices.Grow(buf, max(cap(buf), 4096))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if len(buf) > limit {
				return buf, errTooBig
			}
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// progressCounters are updated by the workers and read by the reporter.
type progressCounters struct {
	files, totalFiles atomic.Int64
	bytes, totalBytes atomic.Int64
}

func (p *progressCounters) snapshot(done bool) Progress {
	return Progress{Files: int(p.files.Load()), TotalFiles: int(p.totalFiles.Load()),
		Bytes: p.bytes.Load(), TotalBytes: p.totalBytes.Load(), Done: done}
}

// reportProgress calls fn every 100 ms from one goroutine until the
// returned stop is called, which makes the final report.
func reportProgress(fn func(Progress), p *progressCounters) (stop func()) {
	if fn == nil {
		return func() {}
	}
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fn(p.snapshot(false))
			case <-quit:
				fn(p.snapshot(true))
				return
			}
		}
	}()
	return func() { close(quit); <-exited }
}

// checkWriter fails unless w holds the live lease of its thread.
func (db *DB) checkWriter(w lease.Writer) error {
	return db.view(func(tx *bolt.Tx) error {
		return lease.Check(tx, w.ThreadID, w, db.opts.nowMs())
	})
}
