package engine

import (
	"context"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/internal/meta"
)

// Stats reads the store's sizes in one read transaction (the blob sums in
// another). It reads every record's header and every chunk's size, not
// the chunks themselves.
func (db *DB) Stats(ctx context.Context) (*sbxdb.StoreStats, error) {
	s := &sbxdb.StoreStats{}
	err := db.viewCtx(ctx, func(tx kv.Tx) error {
		threads, err := meta.Threads(tx)
		if err != nil {
			return err
		}
		s.Threads = len(threads)
		s.Checkpoints, s.Chunks, s.LogicalMetadataBytes, s.PhysicalMetadataBytes, err = meta.MetadataUsage(tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.PhysicalMetadataBytes > 0 {
		s.SharingRatio = float64(s.LogicalMetadataBytes) / float64(s.PhysicalMetadataBytes)
	}
	u, err := db.blobs.Usage(ctx)
	if err != nil {
		return nil, err
	}
	s.Blobs, s.BlobLogicalBytes, s.BlobPhysicalBytes = u.Blobs, u.RawBytes, u.PackBytes+u.LargeBytes
	s.Packs, s.BlobDeadBytes = u.Packs, u.DeadBytes
	if err := db.meta.fileStats(s); err != nil {
		return nil, err
	}
	return s, nil
}
