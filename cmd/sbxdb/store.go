package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/workspace"
)

// store is what the commands do with a store: every method a command
// calls, and nothing else. Two implementations: localStore, the store's
// files opened by this process (engine.DB), and remoteStore, a running
// sbxdb serve of the store (client.Client). A command is written once
// against store; its output and exit status do not depend on which one
// it got.
//
// Capture and restore of a directory take the command line's terms (globs,
// secret values: client.CaptureRequest and client.RestoreRequest), which a
// server takes as they are and localStore turns into a workspace.Policy.
// Their Dir is absolute, so that a server, whose working directory is not
// the command's, finds the same directory.
type store interface {
	Get(ctx context.Context, id string) (*chain.Checkpoint, error)
	List(ctx context.Context, threadID string) ([]*chain.Checkpoint, error)
	Head(ctx context.Context, threadID string) (string, error)
	// ThreadSummary returns the number of the thread's checkpoints and
	// their newest createdAt from the thread index, as
	// engine.DB.ThreadSummary does, without reading a checkpoint.
	ThreadSummary(ctx context.Context, threadID string) (sbxdb.ThreadSummary, error)
	// ResolveCheckpoint returns the id of the checkpoint ref names (an
	// exact id, THREAD@, THREAD@~N or a unique id prefix), as
	// engine.DB.ResolveCheckpoint does; a prefix of several ids matches
	// sbxdb.ErrAmbiguousRef either way.
	ResolveCheckpoint(ctx context.Context, ref string) (string, error)
	// DeleteThread removes the thread's checkpoints, head, transcript,
	// writer lease and artifact records, as engine.DB.DeleteThread does.
	DeleteThread(ctx context.Context, threadID string, force bool) (sbxdb.DeleteThreadResult, error)
	Fork(ctx context.Context, in chain.ForkInput) (*chain.Checkpoint, error)
	BlobReferences(ctx context.Context) ([]chain.BlobRef, error)
	Threads(ctx context.Context) ([]string, error)
	Writers(ctx context.Context) (map[string]lease.State, error)
	Unlock(ctx context.Context, threadID string) (lease.State, error)
	Stats(ctx context.Context) (*sbxdb.StoreStats, error)
	GC(ctx context.Context, opts sbxdb.GCOptions) (*sbxdb.GCResult, error)
	// PlanGC returns what GC with opts would do, changing nothing, as
	// engine.DB.PlanGC does.
	PlanGC(ctx context.Context, opts sbxdb.GCOptions) (*sbxdb.GCPlan, error)
	Check(ctx context.Context, opts sbxdb.CheckStoreOptions) (*sbxdb.CheckReport, error)
	leaser
	Capture(ctx context.Context, in client.CaptureRequest) (*sbxdb.CaptureResult, error)
	Restore(ctx context.Context, in client.RestoreRequest) (sbxdb.RestoreStats, error)
	// OpenEntry returns a reader of the verified bytes of the file entry
	// e, as engine.DB.OpenEntry does: the bytes are only known good once
	// Read returns io.EOF, and every blob failure is
	// SANDBOX_SNAPSHOT_MISSING_BLOB or SANDBOX_SNAPSHOT_INVALID_BLOB naming
	// the path and the key.
	OpenEntry(ctx context.Context, e *chain.Entry) (io.ReadCloser, error)
	Close() error
}

// leaser takes writer leases; the returned Lease renews and releases
// through the same store.
type leaser interface {
	AcquireWriterWith(ctx context.Context, threadID string, opts lease.AcquireOptions) (*lease.Lease, error)
}

var (
	_ store = localStore{}
	_ store = remoteStore{}
)

// localStore is a store this process opened. Its Capture and Restore take
// the command line's globs in place of engine.DB's workspace.Policy. A
// store opened for writing serves the other processes of this machine
// while the command runs (server.ServeLocal): stopServing stops that, and
// Close calls it before it closes the store.
type localStore struct {
	*engine.DB
	stopServing func()
}

// Close stops serving the store, if it was, then closes it.
func (s localStore) Close() error {
	if s.stopServing != nil {
		s.stopServing()
	}
	return s.DB.Close()
}

func (s localStore) Capture(ctx context.Context, in client.CaptureRequest) (*sbxdb.CaptureResult, error) {
	pol, err := workspace.GlobPolicy(in.NoDefaultExcludes, in.Excludes, in.Includes)
	if err != nil {
		return nil, err
	}
	return s.DB.Capture(ctx, sbxdb.CaptureInput{
		Writer: in.Writer, Dir: in.Dir, ID: in.ID, Reason: in.Reason, Label: in.Label,
		SourceRunID: in.SourceRunID, CreatedAt: in.CreatedAt, Conversation: in.Conversation,
		Artifacts: in.Artifacts, Policy: pol, Secrets: in.Secrets,
		AllowEscapingSymlinks: in.AllowEscapingSymlinks, FailOnChange: in.FailOnChange,
		Rehash: in.Rehash, SkipUnsupported: in.SkipUnsupported, RequireFiles: in.RequireFiles,
		Progress: in.Progress,
	})
}

// PlanGC returns the printable part of engine.DB.PlanGC's plan.
func (s localStore) PlanGC(ctx context.Context, opts sbxdb.GCOptions) (*sbxdb.GCPlan, error) {
	p, err := s.DB.PlanGC(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &p.GCPlan, nil
}

func (s localStore) Restore(ctx context.Context, in client.RestoreRequest) (sbxdb.RestoreStats, error) {
	pol, err := workspace.GlobPolicy(in.NoDefaultExcludes, in.Excludes, in.Includes)
	if err != nil {
		return sbxdb.RestoreStats{}, err
	}
	return s.DB.Restore(ctx, in.CheckpointID, in.Dir, &sbxdb.RestoreOptions{
		Policy: pol, AllowEscapingSymlinks: in.AllowEscapingSymlinks, Paths: in.Paths, Progress: in.Progress,
		Overwrite: in.Overwrite, Delete: in.Delete, KeepGoing: in.KeepGoing,
	})
}

// remoteStore is a store served by sbxdb serve. The server reads and
// writes the directories of Capture and Restore itself, so file bytes do
// not cross the connection; leases renew through the API (lease.Lease's
// backend is the client).
type remoteStore struct{ *client.Client }

// OpenEntry streams the entry's blob from the server and verifies it here
// too: its size before the first byte, its sha256 against the key at the
// end. A server cuts a body off when its own verification fails; either
// way the error is the one engine.DB.OpenEntry gives.
func (s remoteStore) OpenEntry(ctx context.Context, e *chain.Entry) (io.ReadCloser, error) {
	if e.Kind != chain.KindFile {
		return nil, fmt.Errorf("%q is a %s, not a file", e.Path, e.Kind)
	}
	r, info, err := s.OpenObject(ctx, e.BlobKey, 0, -1)
	if err != nil {
		return nil, remoteBlobError(e, err)
	}
	if info.Size != e.Size {
		r.Close()
		return nil, chain.Errorf(chain.ErrInvalidBlob, "%q: blob %s has %d bytes, the manifest says %d", e.Path, e.BlobKey, info.Size, e.Size)
	}
	return &remoteEntry{r: r, e: e, h: sha256.New(), left: e.Size}, nil
}

// remoteEntry reads a blob's body, checking its length and digest.
type remoteEntry struct {
	r    io.ReadCloser
	e    *chain.Entry
	h    hash.Hash
	left int64 // bytes still to come
	err  error // sticky: the first failure
}

func (re *remoteEntry) Read(p []byte) (int, error) {
	if re.err != nil {
		return 0, re.err
	}
	n, err := re.r.Read(p)
	if int64(n) > re.left {
		n = int(re.left)
		err = errTooLong
	}
	re.h.Write(p[:n])
	re.left -= int64(n)
	switch {
	case err == io.EOF && re.left > 0:
		err = io.ErrUnexpectedEOF
	case err == io.EOF:
		if want, ok := strings.CutPrefix(re.e.BlobKey, chain.FilePrefix); ok && hex.EncodeToString(re.h.Sum(nil)) != want {
			err = errDigest
		}
	}
	if err != nil && err != io.EOF {
		err = remoteBlobError(re.e, err)
		re.err = err
	}
	return n, err
}

func (re *remoteEntry) Close() error { return re.r.Close() }

var (
	errTooLong = errors.New("the server sent more bytes than the blob has")
	errDigest  = fmt.Errorf("%w: sha256 of the bytes does not match the key", sbxdb.ErrBlobCorrupt)
)

// remoteBlobError words a failure to read an entry's blob from a server
// as engine.DB.OpenEntry words it, with the contract's code. A body cut
// off is a blob the server found damaged as it sent it (docs/API.md,
// Errors), or the connection lost; either way the bytes are not good.
func remoteBlobError(e *chain.Entry, err error) error {
	missing := func() error {
		return chain.Errorf(chain.ErrMissingBlob, "%q: blob %s is missing", e.Path, e.BlobKey)
	}
	why := err.Error()
	// A server's error matches the sentinel of its code (internal/wire's
	// table): SBXDB_NOT_FOUND sbxdb.ErrBlobNotFound, SBXDB_CORRUPT
	// chain.ErrCorrupt, a contract code chain's.
	var ce *client.Error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrUnreachable):
		return err
	case errors.Is(err, sbxdb.ErrBlobNotFound), errors.Is(err, chain.ErrMissingBlob):
		return missing()
	case errors.As(err, &ce) && (errors.Is(ce, chain.ErrInvalidBlob) || errors.Is(ce, chain.ErrCorrupt)):
		why = strings.TrimPrefix(strings.TrimPrefix(ce.Message, "sbxdb: "), ce.Code+": ")
		why = strings.TrimPrefix(why, "cas: "+e.BlobKey+": ") // as sbxdb.BlobError words it
	case errors.As(err, &ce):
		return err // the server's own failure: unavailable, unauthorized, …
	case errors.Is(err, io.ErrUnexpectedEOF):
		why = "the server cut the body off before its end"
	}
	return chain.Errorf(chain.ErrInvalidBlob, "%q: blob %s is damaged: %s", e.Path, e.BlobKey, why)
}
