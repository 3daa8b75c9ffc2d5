package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/kv/pgkv"
	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/internal/objstore/s3"
)

// Shared metadata. With Options.Metadata naming a PostgreSQL database, the
// buckets of internal/meta/schema.go and the blob index of cas/format.go
// live in that database (internal/kv/pgkv) instead of sbx.db, and every
// transaction of the engine runs there: the same code, the same checks in
// the same order. pgkv runs one write transaction at a time across every
// process sharing the database, as bbolt does within one file, so that an
// append's head compare-and-swap, a lease's fence check and a sweep's
// re-check of a key are decided against everything every server committed.
//
// What differs from the bbolt file:
//   - a commit that fails (a lost connection) does not poison the handle:
//     no transaction builds on another's pages in memory, so the next one
//     starts from what the database holds, whatever the outcome was. Blob
//     files a batch wrote for it stay, as after a failed bbolt commit;
//   - the blobs may be in an S3 bucket (Options.Blobs) rather than the
//     blob directory, so that servers on different machines share them:
//     the bucket then holds every server's blobs and this database their
//     index (cas/remote.go);
//   - there is no page structure to walk at Open or in Check, no record of
//     a clean close, no compaction and no migration from older formats (a
//     database starts at FormatVersion).

// ErrNotFileMetadata is the error of what only the bbolt file has
// (compaction, migration from an older format) asked of a store whose
// metadata is in a database.
var ErrNotFileMetadata = errors.New("sbxdb: the store's metadata is in a database, not in sbx.db")

// sharedMeta is a metadata backend other than the bbolt file.
type sharedMeta interface {
	View(ctx context.Context, fn func(kv.Tx) error) error
	Update(ctx context.Context, fn func(kv.Tx) error) error
	Close()
}

// IsSharedMetadata says whether s, an Options.Metadata value, names a
// database rather than the bbolt file beside the blobs.
func IsSharedMetadata(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// checkMetadata validates Options.Metadata.
func checkMetadata(s string) error {
	if s == "" || IsSharedMetadata(s) {
		return nil
	}
	return fmt.Errorf("%w: Metadata %q: want a postgres:// or postgresql:// URL, or empty for the file beside the blobs", ErrInvalidOptions, redactURL(s))
}

// checkBlobs validates Options.Blobs against Options.Metadata. Blobs in a
// bucket with the index in sbx.db would let two servers index one bucket
// separately, each taking the other's objects for orphans: refused.
func checkBlobs(blobs, metadata string) error {
	if blobs == "" {
		return nil
	}
	if _, _, err := s3.ParseURL(blobs); err != nil {
		return fmt.Errorf("%w: Blobs: %v", ErrInvalidOptions, err)
	}
	if !IsSharedMetadata(metadata) {
		return fmt.Errorf("%w: Blobs %q needs shared metadata (Metadata postgres://…): servers sharing a bucket must share its index", ErrInvalidOptions, blobs)
	}
	return nil
}

// openBlobs opens the bucket of Options.Blobs.
func openBlobs(ctx context.Context, blobs string) (*s3.Store, error) {
	cfg, err := s3.ConfigFromEnv(blobs)
	if err != nil {
		return nil, fmt.Errorf("sbxdb: blobs at %s: %w", blobs, err)
	}
	st, err := s3.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sbxdb: blobs at %s: %w", blobs, err)
	}
	return st, nil
}

// withBlobs is the shared metadata of a store whose blobs are in a
// bucket: closing it closes the bucket's client too, after the blob
// store (DB.Close closes db.blobs first).
type withBlobs struct {
	sharedMeta
	blobs objstore.Store
}

func (w withBlobs) Close() {
	w.sharedMeta.Close()
	w.blobs.Close()
}

// redactURL hides a password in a connection URL, for messages.
func redactURL(s string) string {
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		if i := strings.Index(s, "://"); i >= 0 && i+3 < at {
			if colon := strings.IndexByte(s[i+3:at], ':'); colon >= 0 {
				return s[:i+3+colon+1] + "xxxxx" + s[at:]
			}
		}
	}
	return s
}

// openShared is Open for a store whose metadata is in a database: dir
// holds the blob directory (and the lock that keeps it to one process).
func openShared(dir string, o Options) (db *DB, err error) {
	if !o.ReadOnly {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w at %s", ErrNoStore, dir)
	}
	lock, err := lockStore(dir, o.ReadOnly, o.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.release()
		}
	}()
	ctx := context.Background()
	pg, err := pgkv.Open(ctx, o.Metadata, pgkv.Options{})
	if err != nil {
		return nil, sharedError(o.Metadata, err)
	}
	var shared sharedMeta = pg
	var remote objstore.Store
	if o.Blobs != "" {
		st, err := openBlobs(ctx, o.Blobs)
		if err != nil {
			pg.Close()
			return nil, err
		}
		remote, shared = st, withBlobs{pg, st}
	}
	db = &DB{dir: dir, path: redactURL(o.Metadata), opts: o, shared: shared, lock: lock, verified: true}
	err = db.view(func(tx kv.Tx) error { return initLayout(tx, nil) })
	switch {
	case errors.Is(err, errNoLayout) && o.ReadOnly:
		err = fmt.Errorf("%w at %s", ErrNoStore, db.path)
	case errors.Is(err, errNoLayout):
		// An empty database: create the layout. initLayout checks again
		// inside the write transaction, so of two servers starting at
		// once, one creates it and the other finds it.
		err = db.tx(true, func(tx kv.Tx) error { return initLayout(tx, func() error { return nil }) })
	}
	if err != nil {
		shared.Close()
		return nil, sharedError(o.Metadata, err)
	}
	if !o.ReadOnly {
		db.c = newCommitter(db)
	}
	db.blobs, err = cas.Open(filepath.Join(dir, BlobDir), blobIndex{db}, cas.Options{Now: o.Now, ReadOnly: o.ReadOnly, NoSync: o.NoSync, FS: o.FS, Remote: remote})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("opening the blob store: %w", err)
	}
	return db, nil
}

// sharedError names the database (without its password) in err.
func sharedError(url string, err error) error {
	if errors.Is(err, pgkv.ErrNewerSchema) {
		return fmt.Errorf("%w: %s: %v", ErrFormat, redactURL(url), err)
	}
	return fmt.Errorf("sbxdb: metadata at %s: %w", redactURL(url), err)
}
