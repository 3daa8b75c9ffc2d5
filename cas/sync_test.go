package cas

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/vfs/faultfs"
	bolt "go.etcd.io/bbolt"
)

// A Store whose DB has no Gate of its own refuses every write after a
// failed sync of a pack or a directory, reads on, and writes again once
// opened anew.
func TestSyncFailureRefusesWrites(t *testing.T) {
	for _, op := range []faultfs.Op{faultfs.Sync, faultfs.SyncDir} {
		t.Run(op.String(), func(t *testing.T) {
			dir := t.TempDir()
			ffs := faultfs.New(vfs.OS)
			var db *bolt.DB
			var s *Store
			open := func() {
				var err error
				if db, err = bolt.Open(filepath.Join(dir, "index.db"), 0o644, nil); err != nil {
					t.Fatal(err)
				}
				if s, err = Open(filepath.Join(dir, "blobs"), kv.BoltDB{DB: db}, Options{FS: ffs}); err != nil { // fsync on
					t.Fatal(err)
				}
			}
			open()
			defer func() { s.Close(); db.Close() }()
			ctx := context.Background()
			old, fresh, other := []byte("stored before"), []byte("its sync fails"), []byte("refused")
			if err := s.Put(ctx, keyOf(Files, old), old); err != nil {
				t.Fatal(err)
			}

			ffs.Reset()
			ffs.FailNth(op, 1, syscall.EIO)
			if err := s.Put(ctx, keyOf(Files, fresh), fresh); !errors.Is(err, ErrSyncFailed) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("Put whose %v failed: %v; want ErrSyncFailed and EIO", op, err)
			}
			ffs.Reset()
			writes := map[string]func() error{
				"put":    func() error { return s.Put(ctx, keyOf(Files, other), other) },
				"delete": func() error { _, err := s.DeleteUnused(ctx, []string{keyOf(Files, old)}, nil); return err },
				"repack": func() error { _, err := s.Repack(ctx, RepackOptions{Threshold: 0.01}); return err },
				"batch": func() error {
					b := s.NewBatch()
					defer b.Close()
					_, err := b.Add(ctx, Artifacts, other)
					return err
				},
			}
			for name, w := range writes {
				if err := w(); !errors.Is(err, ErrSyncFailed) {
					t.Errorf("%s after a failed sync: %v; want the refusal (ErrSyncFailed)", name, err)
				}
			}
			if ev := ffs.Events(); len(ev) != 0 {
				t.Errorf("the refused writes did %v", ev)
			}
			if got, err := s.Get(ctx, keyOf(Files, old)); err != nil || string(got) != string(old) {
				t.Errorf("Get after a failed sync: %q, %v", got, err)
			}
			if _, err := s.Get(ctx, keyOf(Files, fresh)); !errors.Is(err, sbxdb.ErrBlobNotFound) {
				t.Errorf("the blob whose sync failed: %v; want ErrNotFound", err)
			}

			s.Close()
			db.Close()
			open()
			if err := s.Put(ctx, keyOf(Files, other), other); err != nil {
				t.Fatalf("Put after reopening: %v", err)
			}
			if got, err := s.Get(ctx, keyOf(Files, other)); err != nil || string(got) != string(other) {
				t.Errorf("Get after reopening: %q, %v", got, err)
			}
		})
	}
}
