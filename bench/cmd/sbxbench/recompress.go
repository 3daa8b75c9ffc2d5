package main

import (
	"context"
	"path/filepath"

	"github.com/sbxdb/sbxdb/bench/peers"
	"github.com/sbxdb/sbxdb/engine"
)

// recompress, when set, repacks the store's packs written at the fast
// capture level at a better one (DB.Repack with Recompress) and returns
// the blob bytes before and after. It is nil while the engine has no such
// repack; the row "sbxdb blob bytes after gc recompression" then says
// "not available".
var recompress func(ctx context.Context, db *engine.DB) (before, after int64, err error)

// recompressStore runs recompress on the store in dir and returns the
// apparent size of its blobs/ afterwards.
func recompressStore(ctx context.Context, dir string) (int64, error) {
	db, err := engine.Open(dir, nil)
	if err != nil {
		return 0, err
	}
	if _, _, err := recompress(ctx, db); err != nil {
		db.Close()
		return 0, err
	}
	if err := db.Close(); err != nil {
		return 0, err
	}
	return peers.DirBytes(filepath.Join(dir, "blobs"))
}
