package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/sbxdb/sbxdb/bench/peers"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
)

// recompressStore repacks the store in dir as `sbxdb gc` does to cold
// data, recompressing what was written at the capture level (DB.Repack
// with Recompress, whatever its age), and returns the apparent size of its
// blobs/ and of its sbx.db afterwards.
func recompressStore(ctx context.Context, dir string) (blobs, dbBytes int64, err error) {
	db, err := engine.Open(dir, nil)
	if err != nil {
		return 0, 0, err
	}
	if _, err := db.Repack(ctx, cas.RepackOptions{Threshold: cas.DefaultRepackThreshold, Recompress: true}); err != nil {
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
