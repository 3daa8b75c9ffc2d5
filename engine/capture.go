package engine

import (
	"context"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/boltcheck"
	"github.com/sbxdb/sbxdb/internal/capture"
	"github.com/sbxdb/sbxdb/internal/flock"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/lease"
)

// Capture records the workspace in.Dir as a new checkpoint on the head of
// in.Writer.ThreadID: see capture.Capture, which does the walking, reading
// and storing. The checkpoint and the blobs it names commit in one
// transaction, or nothing does. A read-only store refuses it first.
func (db *DB) Capture(ctx context.Context, in sbxdb.CaptureInput) (*sbxdb.CaptureResult, error) {
	if db.c == nil {
		return nil, sbxdb.ErrReadOnly
	}
	return capture.Capture(ctx, captureStore{db}, in)
}

// IsUnreadableEntry reports whether err is the ErrInvalidWorkspace error of
// an entry beneath the workspace root that could not be opened or read,
// which CaptureInput.SkipUnsupported would have left out. It recognizes the
// error also when rebuilt from a server's reply.
func IsUnreadableEntry(err error) bool { return capture.IsUnreadableEntry(err) }

// storeNames are the names a store keeps in its directory, its server's
// socket among them: a capture leaves them out of a workspace that is a
// store's directory.
var storeNames = capture.StoreNames{
	Entries: map[string]bool{
		DBFile: true, DBFile + compactSuffix: true, flock.StoreLockName: true, BlobDir: true, capture.StatCacheDir: true,
		SocketName: true, boltcheck.CleanCloseName: true,
	},
	Lock: flock.StoreLockName, DB: DBFile, Blobs: BlobDir,
}

// captureStore is what a capture needs of db (capture.Store); db is
// writable.
type captureStore struct{ db *DB }

func (s captureStore) Dir() string                { return s.db.dir }
func (s captureStore) Names() *capture.StoreNames { return &storeNames }
func (s captureStore) Blobs() *cas.Store          { return s.db.blobs }
func (s captureStore) NowMs() int64               { return s.db.opts.nowMs() }
func (s captureStore) Point(name string) error    { return s.db.point(name) }

func (s captureStore) Head(ctx context.Context, threadID string) (string, error) {
	return s.db.Head(ctx, threadID)
}

func (s captureStore) AppendTx(in *chain.AppendInput) (func(kv.Tx) error, error) {
	return s.db.appendTx(in)
}

// CheckWriter fails unless w holds the live lease of its thread.
func (s captureStore) CheckWriter(w lease.Writer) error {
	return s.db.view(func(tx kv.Tx) error {
		return meta.CheckLease(tx, w.ThreadID, w, s.db.opts.nowMs())
	})
}
