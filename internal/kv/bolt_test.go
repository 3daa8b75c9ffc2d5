package kv_test

import (
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/kv/kvtest"
)

// openBolt returns a store in a new bbolt file. Its initial mmap is large
// enough that no commit remaps it: a commit that remaps waits for open
// read transactions, and the snapshot case commits while one is open.
func openBolt(t *testing.T) (view, update kvtest.Func) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "kv.db"), 0o600, &bolt.Options{InitialMmapSize: 1 << 28})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	view = func(fn func(kv.Tx) error) error {
		return db.View(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) })
	}
	update = func(fn func(kv.Tx) error) error {
		return db.Update(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) })
	}
	return view, update
}

func TestBoltConformance(t *testing.T) { kvtest.Run(t, openBolt) }
