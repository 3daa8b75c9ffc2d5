package cas

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	bolt "go.etcd.io/bbolt"
)

// packFiles returns the names in the pack directory.
func (f *fixture) packFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(f.dir, "blobs", "packs"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// fill stores n blobs in one batch (one pack) and returns their bytes by key.
func (f *fixture) fill(t *testing.T, n int, seed uint64) map[string][]byte {
	t.Helper()
	return f.fillSized(t, n, seed, 2000)
}

// fillSized is fill with blobs of size bytes and up: over blockMemberMax,
// each blob gets a frame of its own.
func (f *fixture) fillSized(t *testing.T, n int, seed uint64, size int) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	b := f.s.NewBatch()
	defer b.Close()
	blobs := map[string][]byte{}
	for i := range n {
		d := text(size+i*37, seed+uint64(i))
		res, err := b.Add(ctx, Files, d)
		if err != nil {
			t.Fatal(err)
		}
		blobs[res.Key] = d
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return blobs
}

func TestRepackReclaimsDeadBytes(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fill(t, 200, 1)
	before := f.packFiles(t)
	var deleted []string
	for k := range blobs {
		if len(deleted) < 100 {
			deleted = append(deleted, k)
		}
	}
	if got, err := f.s.DeleteUnused(ctx, deleted, nil); err != nil || len(got) != len(deleted) {
		t.Fatalf("DeleteUnused: %d, %v", len(got), err)
	}
	u, _ := f.s.Usage(ctx)
	if u.DeadBytes == 0 || u.Blobs != 100 {
		t.Fatalf("usage after delete = %+v", u)
	}

	// Readers go on while the packs are rewritten.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				for k, want := range blobs {
					select {
					case <-stop:
						return
					default:
					}
					if slices.Contains(deleted, k) {
						continue
					}
					got, err := f.s.Get(ctx, k)
					if err != nil || string(got) != string(want) {
						errs <- err
						return
					}
				}
			}
		})
	}
	st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold})
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a read during Repack failed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if st.Packs != 1 || st.Blobs != 100 || st.After >= st.Before || len(st.Damaged) != 0 {
		t.Fatalf("Repack = %+v", st)
	}
	after := f.packFiles(t)
	if len(after) != 1 || after[0] == before[0] {
		t.Fatalf("packs %v → %v, want one new pack", before, after)
	}
	if st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold}); err != nil || st.Packs != 0 {
		t.Fatalf("second Repack = %+v, %v; want nothing to do", st, err)
	}
	f.reopen(t) // the index survives and names only the new pack
	u, _ = f.s.Usage(ctx)
	if u.DeadBytes != 0 || u.Packs != 1 || u.Blobs != 100 {
		t.Fatalf("usage after repack = %+v", u)
	}
	// The survivors were gathered into new blocks, whose shares add up to
	// the new pack.
	var live []string
	for k := range blobs {
		if !slices.Contains(deleted, k) {
			live = append(live, k)
		}
	}
	var shares uint64
	frames := map[uint64]bool{}
	for _, e := range f.entries(t, live) {
		shares += e.footprint()
		frames[e.offset] = true
	}
	if len(frames) >= len(live)/4 {
		t.Errorf("%d blobs in %d frames after repack: not regathered into blocks", len(live), len(frames))
	}
	if shares != uint64(u.PackBytes) {
		t.Errorf("footprints add up to %d, the pack holds %d", shares, u.PackBytes)
	}
	for k, want := range blobs {
		got, err := f.s.Get(ctx, k)
		if slices.Contains(deleted, k) {
			if err == nil {
				t.Fatalf("deleted %s came back", k)
			}
			continue
		}
		if err != nil || string(got) != string(want) {
			t.Fatalf("Get(%s) after repack: %v", k, err)
		}
	}
}

func TestRepackDropsAPackWithNothingLive(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fill(t, 20, 7)
	keep := f.fill(t, 5, 100)
	var all []string
	for k := range blobs {
		all = append(all, k)
	}
	f.s.DeleteUnused(ctx, all, nil)
	st, err := f.s.Repack(ctx, RepackOptions{Threshold: 1})
	if err != nil || st.Packs != 1 || st.Blobs != 0 || st.After != 0 {
		t.Fatalf("Repack = %+v, %v", st, err)
	}
	if n := len(f.packFiles(t)); n != 1 {
		t.Fatalf("%d pack files, want the live one", n)
	}
	for k := range keep {
		if _, err := f.s.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRepackLeavesADamagedPack(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fillSized(t, 10, 3, blockMemberMax+1) // a frame each: the damage hits one
	var keys []string
	for k := range blobs {
		keys = append(keys, k)
	}
	f.s.DeleteUnused(ctx, keys[:5], nil)
	name := f.packFiles(t)[0]
	path := filepath.Join(f.dir, "blobs", "packs", name)
	var live entry
	f.db.View(func(tx *bolt.Tx) (err error) { live, _, err = lookup(kv.Bolt(tx), keys[7]); return err })
	data, _ := os.ReadFile(path)
	data[live.offset+headerSize+live.stored/2] ^= 0xff // inside a live frame's payload
	os.WriteFile(path, data, 0o644)
	st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold})
	if err != nil {
		t.Fatal(err)
	}
	if st.Packs != 0 || len(st.Damaged) != 1 {
		t.Fatalf("Repack of a damaged pack = %+v", st)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the damaged pack was removed: %v", err)
	}
	if _, err := f.s.Get(ctx, keys[7]); !errors.Is(err, sbxdb.ErrBlobCorrupt) {
		t.Fatalf("Get of the damaged blob = %v", err)
	}
	good := 0
	for _, k := range keys[5:] {
		if got, err := f.s.Get(ctx, k); err == nil && string(got) == string(blobs[k]) {
			good++
		}
	}
	if good != 4 {
		t.Fatalf("%d of the 4 intact live blobs readable after a refused repack", good)
	}
}

func TestOpenRemovesOrphanPacks(t *testing.T) {
	f := open(t)
	f.fill(t, 3, 9)
	orphan := filepath.Join(f.dir, "blobs", "packs", "00000000000000ab.pack")
	os.WriteFile(orphan, []byte("left by a crash"), 0o644)
	f.reopen(t)
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan pack survived Open: %v", err)
	}
	if n := len(f.packFiles(t)); n != 1 {
		t.Fatalf("%d packs after Open, want the registered one", n)
	}
}

// hookedDB runs after, once, when an index update returns.
type hookedDB struct {
	kv.BoltDB
	after func()
}

func (h *hookedDB) Update(fn func(kv.Tx) error) error {
	err := h.BoltDB.Update(fn)
	if f := h.after; f != nil {
		h.after = nil
		f()
	}
	return err
}

// A large blob is swept while a capture stores the same bytes again: the
// capture must not have its new file removed by the sweep's late cleanup
// (found in review: the sweep removed files by path after unmarking them).
func TestSweepOfALargeBlobSparesItsNewCopy(t *testing.T) {
	dir := t.TempDir()
	bdb, err := bolt.Open(filepath.Join(dir, "index.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	h := &hookedDB{BoltDB: kv.BoltDB{DB: bdb}}
	s, err := Open(filepath.Join(dir, "blobs"), h, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	large := bytes.Repeat([]byte("large, swept and stored again "), 200_000)
	key := keyOf(Files, large)
	if err := s.Put(ctx, key, large); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	h.after = func() {
		// The sweep's transaction has committed; its file is not removed
		// yet. A capture stores the same bytes now.
		go func() {
			b := s.NewBatch()
			defer b.Close()
			if _, err := b.AddReader(ctx, Files, bytes.NewReader(large)); err != nil {
				done <- err
				return
			}
			done <- b.Commit(ctx)
		}()
		time.Sleep(100 * time.Millisecond) // let it reach its pin before the file goes
	}
	if del, err := s.DeleteUnused(ctx, []string{key}, nil); err != nil || len(del) != 1 {
		t.Fatalf("DeleteUnused = %v, %v", del, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, key)
	if err != nil || !bytes.Equal(got, large) {
		t.Fatalf("Get after the sweep and the new copy: %d bytes, %v", len(got), err)
	}
}
