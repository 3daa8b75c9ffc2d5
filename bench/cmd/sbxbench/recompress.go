package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/sbxdb/sbxdb/bench/peers"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
)

// recompress repacks the store's packs and large files written at the
// fast capture level at a better one (DB.Repack with Recompress, whatever
// their age), as `sbxdb gc` does to cold ones, and returns the bytes of
// what it rewrote before and after.
func recompress(ctx context.Context, db *engine.DB) (before, after int64, err error) {
	st, err := db.Repack(ctx, cas.RepackOptions{Threshold: cas.DefaultRepackThreshold, Recompress: true})
	return st.Before, st.After, err
}

// recompressStore runs recompress on the store in dir and returns the
// apparent size of its blobs/ and of its sbx.db afterwards.
func recompressStore(ctx context.Context, dir string) (blobs, dbBytes int64, err error) {
	db, err := engine.Open(dir, nil)
	if err != nil {
		return 0, 0, err
	}
	if _, _, err := recompress(ctx, db); err != nil {
		db.Close()
		return 0, 0, err
	}
	if err := db.Close(); err != nil {
		return 0, 0, err
	}
	if blobs, err = peers.DirBytes(filepath.Join(dir, "blobs")); err != nil {
		return 0, 0, err
	}
	st, err := os.Stat(filepath.Join(dir, engine.DBFile))
	if err != nil {
		return 0, 0, err
	}
	return blobs, st.Size(), nil
}
