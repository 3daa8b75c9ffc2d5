package engine

import (
	"context"
	"github.com/sbxdb/sbxdb/internal/kv"
	"os"
	"path/filepath"

	"github.com/sbxdb/sbxdb/internal/meta"
)

// StoreStats describes what a store holds and what it costs on disk
// (sbxdb stats).
type StoreStats struct {
	Threads     int `json:"threads"`
	Checkpoints int `json:"checkpoints"`
	Chunks      int `json:"chunks"`
	// LogicalMetadataBytes is what the checkpoints' records would take
	// stored whole, each with its full manifest and conversation (as
	// format 1 stored them); PhysicalMetadataBytes is what their records
	// and shared chunks take. SharingRatio is logical / physical.
	LogicalMetadataBytes  int64   `json:"logicalMetadataBytes"`
	PhysicalMetadataBytes int64   `json:"physicalMetadataBytes"`
	SharingRatio          float64 `json:"sharingRatio"`
	// Blobs counts stored blobs; BlobLogicalBytes is their uncompressed
	// size, each counted once however many checkpoints use it;
	// BlobPhysicalBytes is what the pack and large files take.
	Blobs             int   `json:"blobs"`
	BlobLogicalBytes  int64 `json:"blobLogicalBytes"`
	BlobPhysicalBytes int64 `json:"blobPhysicalBytes"`
	// DBFileBytes is the size of the bbolt file; FreePages of its pages
	// hold nothing (reused by later writes; sbxdb compact gives them back).
	DBFileBytes int64 `json:"dbFileBytes"`
	PageSize    int   `json:"pageSize"`
	FreePages   int   `json:"freePages"`
	// Metadata is the database holding the metadata (its URL without a
	// password) instead of the bbolt file, whose three fields are then 0.
	Metadata string `json:"metadata,omitempty"`
}

// Stats reads the store's sizes in one read transaction (the blob sums in
// another). It reads every record's header and every chunk's size, not
// the chunks themselves.
func (db *DB) Stats(ctx context.Context) (*StoreStats, error) {
	s := &StoreStats{}
	err := db.view(func(tx kv.Tx) error {
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
	if db.shared != nil {
		s.Metadata = db.path // no file: the database server keeps the metadata
		return s, nil
	}
	st, err := os.Stat(filepath.Join(db.dir, DBFile))
	if err != nil {
		return nil, err
	}
	s.DBFileBytes = st.Size()
	if err := db.view(func(tx kv.Tx) error {
		bs := db.bolt.Stats()
		s.PageSize, s.FreePages = db.bolt.Info().PageSize, bs.FreePageN+bs.PendingPageN
		return nil
	}); err != nil {
		return nil, err
	}
	return s, nil
}
