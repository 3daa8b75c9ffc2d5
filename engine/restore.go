package engine

import (
	"context"
	"io"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/restore"
	"github.com/sbxdb/sbxdb/vfs"
)

// Restore writes the tree of checkpoint id into dir, which must not exist or
// be an empty directory (SPEC §10 Q20) unless opts.Overwrite; with
// opts.Paths, only the entries
// they name: see restore.Checkpoint, which does the writing. The
// checkpoint is read first: an unknown id is
// SANDBOX_SNAPSHOT_CHECKPOINT_NOT_FOUND, before anything is checked or
// written.
func (db *DB) Restore(ctx context.Context, id, dir string, opts *sbxdb.RestoreOptions) (sbxdb.RestoreStats, error) {
	var o sbxdb.RestoreOptions
	if opts != nil {
		o = *opts
	}
	cp, err := db.Get(ctx, id)
	if err != nil {
		return sbxdb.RestoreStats{}, err
	}
	if cp == nil {
		return sbxdb.RestoreStats{}, chain.Errorf(chain.ErrCheckpointNotFound, "checkpoint %q not found", id)
	}
	return restore.Checkpoint(ctx, restoreStore{db}, cp, dir, &o)
}

// OpenEntry returns a reader of the verified bytes of the file entry e
// (streamed; see cas.Store.Open: the bytes are only known good once Read
// returns io.EOF). Every blob error, at open or while reading, is
// SANDBOX_SNAPSHOT_MISSING_BLOB or SANDBOX_SNAPSHOT_INVALID_BLOB naming the
// path and the key; a blob whose size is not the entry's is INVALID_BLOB.
func (db *DB) OpenEntry(ctx context.Context, e *chain.Entry) (io.ReadCloser, error) {
	return restore.OpenEntry(ctx, db.blobs, e)
}

// restoreStore is what a restore reads of db (restore.Store).
type restoreStore struct{ db *DB }

func (s restoreStore) Blobs() restore.Blobs    { return s.db.blobs }
func (s restoreStore) FS() vfs.FS              { return s.db.opts.FS }
func (s restoreStore) Point(name string) error { return s.db.point(name) }
