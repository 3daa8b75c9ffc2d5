package main

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// threads reads the thread index, not the checkpoint records: with c2's
// record damaged, where List fails, it still counts main's checkpoints and
// dates the newest, embedded and served alike.
func TestThreadsReadsNoRecord(t *testing.T) {
	dir := newStore(t)
	b, err := bolt.Open(filepath.Join(dir, engine.DBFile), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(meta.BucketCheckpoints)
		v := append([]byte(nil), bk.Get([]byte("c2"))...)
		v[len(v)-1] ^= 0xff
		return bk.Put([]byte("c2"), v)
	})
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open(dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.List(t.Context(), "main")
	db.Close()
	if !errors.Is(err, chain.ErrCorrupt) {
		t.Fatalf("List of main with c2's record damaged: %v", err)
	}

	rs := rows(ok(t, "threads", "--db", dir))
	if len(rs) != 5 {
		t.Fatalf("want header and 4 threads: %q", rs)
	}
	wantFields(t, rs[3], "main", "c3", "3", "2023-11-14T22:13:22Z", "none")
}
