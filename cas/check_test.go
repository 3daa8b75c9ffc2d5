package cas

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	bolt "go.etcd.io/bbolt"
)

func TestCheckFindsDamage(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fill(t, 20, 11)
	large := bytes.Repeat([]byte("a large blob of its own "), 250_000) // over MaxPacked: a file
	f.s.Put(ctx, keyOf(Files, large), large)
	check := func(deep bool) map[string]error {
		found := map[string]error{}
		if err := f.s.Check(ctx, deep, nil, func(key string, err error) {
			if !errors.Is(err, sbxdb.ErrBlobCorrupt) {
				t.Errorf("%s: %v does not match ErrCorrupt", key, err)
			}
			found[key] = err
		}); err != nil {
			t.Fatal(err)
		}
		return found
	}
	if got := check(true); len(got) != 0 {
		t.Fatalf("a sound store: %v", got)
	}

	var keys []string
	for k := range blobs {
		keys = append(keys, k)
	}
	// A damaged index entry, a large file gone, a flipped packed byte: the
	// small blobs share a block, so the byte damages every one of them.
	var e entry
	f.db.View(func(tx *bolt.Tx) (err error) { e, _, err = lookup(kv.Bolt(tx), keys[1]); return err })
	inBlock := map[string]bool{}
	for _, k := range keys[1:] {
		f.db.View(func(tx *bolt.Tx) error {
			if o, _, _ := lookup(kv.Bolt(tx), k); o.where == whereBlock && o.pack == e.pack && o.offset == e.offset {
				inBlock[k] = true
			}
			return nil
		})
	}
	if len(inBlock) < 2 {
		t.Fatalf("%d blobs in keys[1]'s block, want several", len(inBlock))
	}
	f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketIndex).Put([]byte(keys[0]), []byte("garbage!!")) })
	ns, sum, _ := ParseKey(keyOf(Files, large))
	os.Remove(filepath.Join(f.dir, "blobs", largePath(ns, sum)))
	pack := filepath.Join(f.dir, "blobs", packPath(e.pack))
	data, _ := os.ReadFile(pack)
	data[e.offset+headerSize] ^= 0xff
	os.WriteFile(pack, data, 0o644)

	shallow := check(false)
	if len(shallow) != 2 || shallow[keys[0]] == nil || shallow[keyOf(Files, large)] == nil {
		t.Fatalf("shallow check found %v; want the damaged entry and the missing file", shallow)
	}
	deep := check(true)
	for k := range inBlock {
		if deep[k] == nil {
			t.Errorf("deep check missed %s, in the damaged block", k)
		}
	}
	if len(deep) != 2+len(inBlock) {
		t.Fatalf("deep check found %d: %v; want the %d in the damaged block too", len(deep), deep, len(inBlock))
	}

	// A truncated pack is seen without reading blobs.
	os.Truncate(pack, int64(e.offset))
	if got := check(false); got[""] == nil {
		t.Fatalf("truncated pack not reported: %v", got)
	}
}

func TestRemoveOrphans(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	large := bytes.Repeat([]byte("an orphan once its entry is gone "), 200_000)
	key := keyOf(Files, large)
	f.s.Put(ctx, key, large)
	// A crash between a delete's commit and its file's removal.
	f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketIndex).Delete([]byte(key)) })
	if n, err := f.s.Orphans(ctx); n != 1 || err != nil {
		t.Fatalf("Orphans = %d, %v", n, err)
	}
	if n, _ := f.s.RemoveOrphans(ctx, time.Hour); n != 0 {
		t.Fatal("a fresh orphan was removed inside the window")
	}
	b := f.s.NewBatch() // a batch relying on the key pins it
	b.Pin(ctx, []string{key})
	if n, _ := f.s.RemoveOrphans(ctx, 0); n != 0 {
		t.Fatal("a pinned orphan was removed")
	}
	b.Close()
	if n, err := f.s.RemoveOrphans(ctx, 0); n != 1 || err != nil {
		t.Fatalf("RemoveOrphans = %d, %v", n, err)
	}
	if n, _ := f.s.Orphans(ctx); n != 0 {
		t.Fatalf("%d orphans left", n)
	}
	// Stored again, it is whole.
	if err := f.s.Put(ctx, key, large); err != nil {
		t.Fatal(err)
	}
	if got, err := f.s.Get(ctx, key); err != nil || !bytes.Equal(got, large) {
		t.Fatalf("Get: %v", err)
	}
}
