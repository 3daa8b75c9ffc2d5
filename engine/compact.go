package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sbxdb/sbxdb"
	bolt "go.etcd.io/bbolt"
)

// compactTxSize bounds each transaction of the copy, so compacting a large
// file does not hold all of it in dirty pages at once.
const compactTxSize = 64 << 20

// compactSuffix ends the name of the file a compaction writes next to the
// store's database file before it replaces it.
const compactSuffix = ".compact"

// Compact rewrites the store's bbolt file without its free pages and
// returns its size before and after. bbolt never shrinks a file: pages
// freed by deletes are reused, never returned. The store must not be open
// elsewhere; Compact opens it as Open does (waiting opts.LockTimeout for
// another holder), copies every bucket, key and sequence into a new file,
// makes that durable, and renames it over the old one, so a crash at any
// point leaves either the old file or the new one, whole. It holds the
// store lock throughout (internal/flock/storelock.go), so an Open waiting for the store
// opens the new file, never the one renamed away.
func Compact(ctx context.Context, dir string, opts *Options) (before, after int64, err error) {
	if opts != nil && opts.ReadOnly {
		return 0, 0, sbxdb.ErrReadOnly
	}
	if opts != nil && opts.Metadata != "" {
		return 0, 0, ErrNotFileMetadata
	}
	// Every page verified, whatever a record of a clean close says: the
	// copy reads every page, through bbolt, which trusts them.
	db, err := open(dir, opts, true)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}()
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	path := filepath.Join(dir, DBFile)
	st, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	before = st.Size()
	// The new file is written beside the old one and renamed over it. Until
	// the rename, it is only a temporary: any failure removes it (a crash
	// leaves it for the next Compact, which removes it first).
	tmp := path + compactSuffix
	os.Remove(tmp)
	renamed := false
	defer func() {
		if !renamed {
			os.Remove(tmp)
		}
	}()
	if err := compactInto(ctx, db, tmp); err != nil {
		return before, 0, fmt.Errorf("compacting %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return before, 0, err
	}
	renamed = true
	if !db.opts.NoSync {
		if err := syncFile(dir); err != nil {
			return before, 0, err
		}
	}
	if st, err = os.Stat(path); err != nil {
		return before, 0, err
	}
	return before, st.Size(), nil
}

// compactInto copies db's every bucket, key and sequence into a new bbolt
// file at tmp and makes it durable.
func compactInto(ctx context.Context, db *DB, tmp string) error {
	dst, err := bolt.Open(tmp, 0o644, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType, NoSync: db.opts.NoSync})
	if err != nil {
		return err
	}
	err = bolt.Compact(dst, db.bolt, compactTxSize)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil && !db.opts.NoSync {
		err = syncFile(tmp)
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// syncFile fsyncs a file or directory by name.
func syncFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
