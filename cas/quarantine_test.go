package cas

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
)

// reopenWith reopens the fixture's store with opts (the clock and NoSync
// set as open sets them).
func (f *fixture) reopenWith(t *testing.T, opts Options) {
	t.Helper()
	f.s.Close()
	f.db.Close()
	db, err := bolt.Open(filepath.Join(f.dir, "index.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.Now, opts.NoSync = func() time.Time { return f.clock }, true
	s, err := Open(filepath.Join(f.dir, "blobs"), kv.BoltDB{DB: db}, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.db, f.s = db, s
	t.Cleanup(func() { s.Close(); db.Close() })
}

// frameOffsets returns, per key, the offset of the blob frame holding it
// in the pack file at path (blob frames only).
func frameOffsets(t *testing.T, path string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for off := 0; off+headerSize <= len(b); {
		h, err := decodeHeader(b[off : off+headerSize])
		if err != nil {
			t.Fatalf("%s: frame at %d: %v", path, off, err)
		}
		if h.version == blobFrame {
			out[h.ns.Key(h.sum)] = int64(off)
		}
		off += headerSize + int(h.stored)
	}
	return out
}

func (f *fixture) mustGet(t *testing.T, blobs map[string][]byte) {
	t.Helper()
	for k, want := range blobs {
		if got, err := f.s.Get(context.Background(), k); err != nil || !bytes.Equal(got, want) {
			t.Errorf("Get %s: %d bytes, %v", k, len(got), err)
		}
	}
}

// An index that lost its newest transaction (a copy of the bbolt file put
// back, as a meta-page fallback does) names the packs a repack removed and
// not the pack it wrote. Open must see that a pack the index relies on is
// gone and quarantine the unlisted pack instead of removing it; dropping
// the entries that name the lost pack and re-indexing the quarantine then
// makes every live blob readable again.
func TestOpenQuarantinesUnlistedPackWhenIndexedPackIsGone(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fill(t, 40, 1)
	var dead []string
	for k := range blobs {
		if len(dead) < 10 {
			dead = append(dead, k)
		}
	}
	if _, err := f.s.DeleteUnused(ctx, dead, nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range dead {
		delete(blobs, k)
	}
	f.s.Close()
	f.db.Close()
	older, err := os.ReadFile(filepath.Join(f.dir, "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	f.reopenWith(t, Options{})
	if st, err := f.s.Repack(ctx, RepackOptions{Threshold: 0.01}); err != nil || st.Packs != 1 {
		t.Fatalf("repack: %+v, %v", st, err)
	}
	newPack := f.packFiles(t)
	f.s.Close()
	f.db.Close()
	if err := os.WriteFile(filepath.Join(f.dir, "index.db"), older, 0o644); err != nil {
		t.Fatal(err)
	}

	f.reopenWith(t, Options{})
	if got := f.s.QuarantinedAtOpen(); !slices.Equal(got, []string{filepath.Join(quarantineDir, newPack[0])}) {
		t.Fatalf("QuarantinedAtOpen = %v, want %v", got, newPack)
	}
	q, err := f.s.Quarantined(ctx)
	if err != nil || len(q) != 1 || q[0].Blobs != len(blobs) || q[0].Unindexed != 0 || q[0].Damaged != 0 {
		t.Fatalf("Quarantined = %+v, %v; want one file of %d indexed blobs", q, err, len(blobs))
	}
	var damaged []string
	f.s.Check(ctx, false, nil, func(key string, err error) {
		if key != "" {
			damaged = append(damaged, key)
		}
	})
	if len(damaged) != len(blobs) {
		t.Fatalf("check reports %d blobs in the lost pack, want %d", len(damaged), len(blobs))
	}
	ds, err := f.s.DropDamaged(ctx, damaged)
	if err != nil || len(ds.Dropped) != len(blobs) || len(ds.Packs) != 1 {
		t.Fatalf("DropDamaged = %+v, %v", ds, err)
	}
	rs, err := f.s.Reindex(ctx)
	if err != nil || rs.Blobs != len(blobs) || rs.Files != 1 || rs.Damaged != 0 {
		t.Fatalf("Reindex = %+v, %v", rs, err)
	}
	f.mustGet(t, blobs)
	f.s.Check(ctx, true, nil, func(key string, err error) { t.Errorf("check after healing: %s: %v", key, err) })
	if q, err := f.s.Quarantined(ctx); err != nil || len(q) != 0 {
		t.Errorf("quarantine after Reindex: %v, %v", q, err)
	}
}

// With the index possibly older than the files, RemoveOrphans moves an
// unindexed large file into quarantine rather than removing it, and
// Reindex stores it again.
func TestRemoveOrphansQuarantinesWhenIndexMayBeOlder(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	large := bytes.Repeat([]byte("a large blob of its own "), 250_000)
	key := keyOf(Files, large)
	if err := f.s.Put(ctx, key, large); err != nil {
		t.Fatal(err)
	}
	// The index loses the entry; the file stays.
	f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketIndex).Delete([]byte(key)) })
	f.reopenWith(t, Options{IndexMayBeOlder: true})
	if n, err := f.s.RemoveOrphans(ctx, 0); err != nil || n != 1 {
		t.Fatalf("RemoveOrphans = %d, %v", n, err)
	}
	q, err := f.s.Quarantined(ctx)
	if err != nil || len(q) != 1 || q[0].Blobs != 1 || q[0].Unindexed != 1 {
		t.Fatalf("Quarantined = %+v, %v; want the large file, unindexed", q, err)
	}
	rs, err := f.s.Reindex(ctx)
	if err != nil || rs.Blobs != 1 || rs.Files != 1 {
		t.Fatalf("Reindex = %+v, %v", rs, err)
	}
	f.mustGet(t, map[string][]byte{key: large})

	// Without the sign, an orphan is a crash leftover and goes.
	f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketIndex).Delete([]byte(key)) })
	f.reopenWith(t, Options{})
	if n, err := f.s.RemoveOrphans(ctx, 0); err != nil || n != 1 {
		t.Fatalf("RemoveOrphans = %d, %v", n, err)
	}
	if q, err := f.s.Quarantined(ctx); err != nil || len(q) != 0 {
		t.Errorf("quarantined %v, want nothing", q)
	}
}

// Reindex verifies every blob of a quarantined file: a damaged one is
// counted and not stored; an intact one replaces an indexed copy that no
// longer reads back intact; one whose indexed copy is intact is left.
func TestReindexVerifiesAndReplacesDamagedCopies(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fillSized(t, 3, 7, 70<<10) // a blob frame each
	pack := filepath.Join(f.dir, "blobs", "packs", f.packFiles(t)[0])
	q := filepath.Join(f.dir, "blobs", quarantineDir)
	os.MkdirAll(q, 0o755)
	copyPath := filepath.Join(q, "00000000000000aa.pack")
	b, _ := os.ReadFile(pack)
	os.WriteFile(copyPath, b, 0o644)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range blobs {
			if !yield(k) {
				return
			}
		}
	})
	offs := frameOffsets(t, pack)
	testkit.FlipByte(t, pack, offs[keys[0]]+headerSize+100)     // the indexed copy of keys[0]
	testkit.FlipByte(t, copyPath, offs[keys[1]]+headerSize+100) // the quarantined copy of keys[1]
	rs, err := f.s.Reindex(ctx)
	if err != nil || rs.Blobs != 1 || rs.Damaged != 1 || rs.Files != 1 {
		t.Fatalf("Reindex = %+v, %v; want keys[0] stored again, keys[1] damaged", rs, err)
	}
	f.mustGet(t, blobs)
	u, _ := f.s.Usage(ctx)
	if u.DeadBytes == 0 {
		t.Errorf("the replaced copy's bytes are not counted dead: %+v", u)
	}
}

// DropDamaged drops the entries of blobs that do not read back intact, and
// only those, counting their bytes dead in their pack; a damaged key a
// write in progress has pinned is left and reported busy.
func TestDropDamaged(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	small := f.fill(t, 10, 3)           // one block
	own := f.fillSized(t, 2, 9, 70<<10) // a frame each, in a second pack
	var smallKeys []string
	for k := range small {
		smallKeys = append(smallKeys, k)
	}
	slices.Sort(smallKeys)
	var e entry
	f.db.View(func(tx *bolt.Tx) (err error) { e, _, err = lookup(kv.Bolt(tx), smallKeys[0]); return err })
	testkit.FlipByte(t, filepath.Join(f.dir, "blobs", packPath(e.pack)), int64(e.offset)+headerSize+50)
	before, _ := f.s.Usage(ctx)

	pin := f.s.NewBatch()
	defer pin.Close()
	if _, err := pin.Pin(ctx, smallKeys[:1]); err != nil {
		t.Fatal(err)
	}
	all := slices.Concat(smallKeys, slices.Collect(func(yield func(string) bool) {
		for k := range own {
			yield(k)
		}
	}))
	ds, err := f.s.DropDamaged(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ds.Dropped, smallKeys[1:]) || !slices.Equal(ds.Busy, smallKeys[:1]) {
		t.Fatalf("DropDamaged = %+v; want %v dropped, %v busy", ds, smallKeys[1:], smallKeys[:1])
	}
	missing, _ := f.s.Missing(ctx, slices.Clone(all))
	if !slices.Equal(missing, smallKeys[1:]) {
		t.Errorf("missing after the drop %v", missing)
	}
	after, _ := f.s.Usage(ctx)
	if after.DeadBytes <= before.DeadBytes || after.Blobs != before.Blobs-len(ds.Dropped) {
		t.Errorf("usage before %+v, after %+v: the dropped blobs' bytes are not dead", before, after)
	}
	pin.Close()
	if ds, err := f.s.DropDamaged(ctx, all); err != nil || !slices.Equal(ds.Dropped, smallKeys[:1]) {
		t.Errorf("DropDamaged once unpinned = %+v, %v", ds, err)
	}
	// The same bytes stored again read back.
	for _, k := range smallKeys {
		if err := f.s.Put(ctx, k, small[k]); err != nil {
			t.Fatal(err)
		}
	}
	f.mustGet(t, small)
	f.mustGet(t, own)
}

// A damaged copy of a large blob quarantined after an intact copy of the
// same blob must not replace it: the intact one may be the only good copy,
// and Reindex must store it again.
func TestQuarantineNeverReplacesAQuarantinedCopy(t *testing.T) {
	ctx := context.Background()
	f := open(t)
	data := noise(5<<20, 1)
	key := keyOf(Files, data)
	if err := f.s.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	ns, sum, _ := ParseKey(key)
	large := filepath.Join(f.s.Dir(), largePath(ns, sum))
	intact, err := os.ReadFile(large)
	if err != nil {
		t.Fatal(err)
	}
	// An intact copy in quarantine, as a gc after a meta-page fallback
	// leaves one; then the indexed copy rots.
	qdir := filepath.Join(f.s.Dir(), quarantineDir)
	if err := os.MkdirAll(qdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(qdir, filepath.Base(large)+"."+ns.dir()), intact, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.FlipByte(t, large, int64(len(intact)/2))

	st, err := f.s.DropDamaged(ctx, []string{key})
	if err != nil {
		t.Fatalf("DropDamaged: %v", err)
	}
	if len(st.Dropped) != 1 {
		t.Fatalf("DropDamaged dropped %v, want %s", st.Dropped, key)
	}
	if _, err := f.s.Reindex(ctx); err != nil {
		t.Fatalf("Reindex: %v", err)
	}
	got, err := f.s.Get(ctx, key)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after a repair the blob reads %d bytes, %v: the intact quarantined copy was lost", len(got), err)
	}
}
