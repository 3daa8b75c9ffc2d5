package cas

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/internal/testkit/s3test"
)

// churn stores batches blobs of n small blobs each (one pack per batch)
// and deletes most of the blobs of every other batch, returning the live
// blobs by key.
func churn(t *testing.T, f *fixture, batches, n int) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	live := map[string][]byte{}
	for i := range batches {
		b := f.s.NewBatch()
		var keys []string
		for j := range n {
			d := text(2000+j*37, uint64(i*1000+j))
			if _, err := b.Add(ctx, Files, d); err != nil {
				t.Fatal(err)
			}
			live[keyOf(Files, d)] = d
			keys = append(keys, keyOf(Files, d))
		}
		if err := b.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		b.Close()
		if i%2 == 1 {
			gone := keys[:n*3/4]
			if del, err := f.s.DeleteUnused(ctx, gone, nil); err != nil || len(del) != len(gone) {
				t.Fatalf("DeleteUnused = %d, %v", len(del), err)
			}
			for _, k := range gone {
				delete(live, k)
			}
		}
	}
	return live
}

// readAll checks that s reads every blob of live byte for byte.
func readAll(t *testing.T, s *Store, live map[string][]byte) {
	t.Helper()
	for k, d := range live {
		got, err := s.Get(context.Background(), k)
		if err != nil || !bytes.Equal(got, d) {
			t.Fatalf("Get(%s) = %d bytes, %v; want %d bytes", k, len(got), err, len(d))
		}
	}
}

// packObjects returns the pack ids in the bucket.
func packObjects(t *testing.T, f *fixture) []uint64 {
	t.Helper()
	var ids []uint64
	err := f.remote.List(context.Background(), "packs/", func(i objstore.Info) error {
		if id, ok := parsePackObject(i.Name); ok {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// indexedPacks returns the pack ids cas_packs lists.
func indexedPacks(t *testing.T, s *Store) []uint64 {
	t.Helper()
	var ids []uint64
	s.db.View(func(tx kv.Tx) error {
		return forEachPack(tx, func(id uint64, _ packStats, err error) error {
			ids = append(ids, id)
			return err
		})
	})
	slices.Sort(ids)
	return ids
}

// clean asserts a deep Check of s finds nothing.
func clean(t *testing.T, s *Store) {
	t.Helper()
	var found []string
	if err := s.Check(context.Background(), true, nil, func(key string, err error) {
		found = append(found, fmt.Sprintf("%s: %v", key, err))
	}); err != nil || len(found) > 0 {
		t.Fatalf("Check: %v, %v", found, err)
	}
}

// Two servers share the index and the bucket. One repacks; a blob the
// other deletes and stores again while the repack is uploading stays
// where the other put it; a reader that located a blob in an old pack
// before the swap still reads it; the old packs go only once retired for
// longer than the window, by the store's clock.
func TestRemoteRepackAcrossServers(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	live := churn(t, f, 6, 40)
	two := f.server(t)
	readAll(t, two, live) // two caches the old packs
	before := indexedPacks(t, f.s)
	plan, err := f.s.PlanRepack(ctx, RepackOptions{Threshold: DefaultRepackThreshold}, nil)
	if err != nil || plan.Stats.Packs != 3 {
		t.Fatalf("RepackPlan = %+v, %v; want the 3 churned packs", plan, err)
	}

	// A key in a pack being repacked: its entry before the swap, and its
	// deletion and new store by two while the new packs are uploaded.
	var moved, restored string
	for _, k := range slices.Sorted(maps.Keys(live)) {
		e, _ := f.s.entry(k)
		var ps packStats
		f.s.db.View(func(tx kv.Tx) error {
			ps, _ = decodePackStats(tx.Bucket(bucketPacks).Get(packKey(e.pack)))
			return nil
		})
		if ps.dead == 0 {
			continue // not repacked
		}
		if moved == "" {
			moved = k
		} else if restored == "" {
			restored = k
		}
	}
	oldEntry, _ := f.s.entry(moved)
	f.s.repackHook = func(step string) error {
		if step != stepRepackUploaded {
			return nil
		}
		if del, err := two.DeleteUnused(ctx, []string{restored}, nil); err != nil || len(del) != 1 {
			t.Errorf("DeleteUnused on two = %v, %v", del, err)
		}
		if err := two.Put(ctx, restored, live[restored]); err != nil {
			t.Error(err)
		}
		return nil
	}
	restoredEntry := func() entry { e, _ := f.s.entry(restored); return e }
	st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold})
	f.s.repackHook = nil
	if err != nil || st.Packs == 0 || st.After >= st.Before {
		t.Fatalf("Repack = %+v, %v", st, err)
	}
	after := restoredEntry()
	if wasRepacked := slices.Contains(before, after.pack); wasRepacked {
		t.Fatalf("the key two stored again names pack %x of before the repack", after.pack)
	}
	readAll(t, f.s, live)
	readAll(t, two, live)
	clean(t, f.s)
	clean(t, two)
	if u, err := f.s.Usage(ctx); err != nil || u.DeadBytes*20 > u.PackBytes {
		t.Fatalf("Usage after the repack = %+v, %v", u, err)
	}

	// The old packs are retired, not orphans: still readable, by the
	// entry located before the swap.
	ns, sum, _ := ParseKey(moved)
	if got, err := two.readPacked(moved, ns, sum, &oldEntry, nil, nil); err != nil || !bytes.Equal(got, live[moved]) {
		t.Fatalf("read through the old entry: %v", err)
	}
	if n, err := f.s.Orphans(ctx); err != nil || n != 0 {
		t.Fatalf("Orphans = %d, %v; want 0", n, err)
	}
	if n, err := two.RemoveOrphans(ctx, time.Minute); err != nil || n != 0 {
		t.Fatalf("RemoveOrphans within the window = %d, %v", n, err)
	}
	if got, want := len(packObjects(t, f)), len(indexedPacks(t, f.s))+st.Packs; got != want {
		t.Fatalf("%d pack objects within the window, want %d", got, want)
	}
	f.clock = f.clock.Add(RemoteOrphanMinAge + time.Minute)
	if n, err := two.RemoveOrphans(ctx, time.Minute); err != nil || n != st.Packs {
		t.Fatalf("RemoveOrphans after the window = %d, %v; want %d", n, err, st.Packs)
	}
	if got, want := packObjects(t, f), indexedPacks(t, f.s); !slices.Equal(got, want) {
		t.Fatalf("pack objects %x, indexed %x", got, want)
	}
	readAll(t, f.s, live)
	readAll(t, two, live)
	clean(t, two)
}

// A repack stopped at each of its steps, as a kill would stop it (nothing
// cleaned up), and the removal of retired packs likewise: the blobs all
// read back on another server and after a reopen, Check is clean, and the
// next runs past the window leave exactly the indexed packs in the bucket.
func TestRemoteRepackKillPoints(t *testing.T) {
	srv := s3test.Start(t)
	killed := errors.New("killed")
	for _, step := range []string{stepRepackWritten, stepRepackUploaded, stepRepackSwapped, stepRetiredDeleting, stepRetiredDeleted, stepRetiredForgot} {
		t.Run(step, func(t *testing.T) {
			f := openRemote(t, srv)
			ctx := context.Background()
			live := churn(t, f, 4, 30)
			f.s.repackHook = func(s string) error {
				if s == step {
					return killed
				}
				return nil
			}
			_, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold})
			if repackStep := step == stepRepackWritten || step == stepRepackUploaded || step == stepRepackSwapped; repackStep != errors.Is(err, killed) {
				t.Fatalf("Repack = %v", err)
			}
			if err == nil {
				f.clock = f.clock.Add(RemoteOrphanMinAge + time.Minute)
				if _, err := f.s.RemoveOrphans(ctx, 0); !errors.Is(err, killed) {
					t.Fatalf("RemoveOrphans = %v; want killed", err)
				}
			}
			// "Restart": another server reads, and the killed one reopens.
			readAll(t, f.server(t), live)
			f.reopen(t)
			readAll(t, f.s, live)
			clean(t, f.s)
			orphans, err := f.s.Orphans(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if step == stepRepackUploaded && orphans == 0 {
				t.Error("the uploaded, unindexed packs are not reported as orphans")
			} else if step != stepRepackUploaded && orphans != 0 {
				t.Errorf("Orphans = %d; want 0", orphans)
			}
			// No file left in the cache that the index does not name.
			ents, _ := os.ReadDir(filepath.Join(f.dir, "blobs", "packs"))
			indexed := indexedPacks(t, f.s)
			for _, e := range ents {
				var id uint64
				fmt.Sscanf(e.Name(), "%016x.pack", &id)
				if !slices.Contains(indexed, id) {
					t.Errorf("cached pack %s is not indexed", e.Name())
				}
			}
			// The next gc repacks what is left to repack; past the window,
			// everything but the indexed packs goes.
			if _, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold}); err != nil {
				t.Fatal(err)
			}
			f.clock = time.Now().Add(2*RemoteOrphanMinAge + time.Minute)
			if _, err := f.s.RemoveOrphans(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if got, want := packObjects(t, f), indexedPacks(t, f.s); !slices.Equal(got, want) {
				t.Fatalf("pack objects %x, indexed %x", got, want)
			}
			if rt, _ := f.s.retiredPacks(); len(rt) != 0 {
				t.Fatalf("retired records left: %v", rt)
			}
			readAll(t, f.server(t), live)
			clean(t, f.s)
		})
	}
}

// Recompression in the bucket judges coldness by the objects' upload
// times and rewrites cold packs at RecompressLevel.
func TestRemoteRepackRecompress(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	live := churn(t, f, 2, 30)
	opts := RepackOptions{Threshold: DefaultRepackThreshold, Recompress: true, ColdBefore: time.Now().Add(-time.Hour)}
	if p, err := f.s.PlanRepack(ctx, opts, nil); err != nil || p.Stats.Recompressed != 0 {
		t.Fatalf("PlanRepack of fresh packs = %+v, %v; want none recompressed", p, err)
	}
	opts.ColdBefore = time.Now().Add(time.Hour)
	st, err := f.s.Repack(ctx, opts)
	if err != nil || st.Recompressed == 0 {
		t.Fatalf("Repack = %+v, %v; want recompressed packs", st, err)
	}
	f.s.db.View(func(tx kv.Tx) error {
		return forEachPack(tx, func(id uint64, ps packStats, err error) error {
			if ps.at() != RecompressLevel {
				t.Errorf("pack %x at %v after recompression", id, ps.at())
			}
			return err
		})
	})
	readAll(t, f.server(t), live)
	clean(t, f.s)
}

// The pack cache stays within its bound: reading three times its size of
// packs through it works, and afterwards (and after a reopen) it holds no
// more than the bound. A reopen keeps the cached packs it can.
func TestRemoteCacheBound(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	const packs, perPack = 6, 4
	// Incompressible blobs, one pack each batch of about 1 MiB.
	live := map[string][]byte{}
	for i := range packs {
		b := f.s.NewBatch()
		for j := range perPack {
			d := noise(256<<10, uint64(i*100+j))
			if _, err := b.Add(ctx, Files, d); err != nil {
				t.Fatal(err)
			}
			live[keyOf(Files, d)] = d
		}
		if err := b.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	bound := int64(2 << 20) // a pack (just over 1 MiB): the reads below pass 3x through it
	open := func() *Store {
		s, err := Open(filepath.Join(t.TempDir(), "blobs"), kv.BoltDB{DB: f.db}, Options{Now: func() time.Time { return f.clock }, NoSync: true, Remote: f.remote, CacheSize: bound})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open()
	dirBytes := func() int64 {
		var n int64
		ents, _ := os.ReadDir(filepath.Join(s.dir, "packs"))
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	for range 2 {
		readAll(t, s, live)
	}
	if n, cached := s.CacheUsage(); n > bound || n != dirBytes() || cached == 0 {
		t.Fatalf("cache holds %d bytes in %d packs (directory %d); bound %d", n, cached, dirBytes(), bound)
	}
	// Reopened on the same directory: the cache is rebuilt from it.
	dir := s.dir
	s.Close()
	s2, err := Open(dir, kv.BoltDB{DB: f.db}, Options{Now: func() time.Time { return f.clock }, NoSync: true, Remote: f.remote, CacheSize: 3 << 19})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if n, cached := s2.CacheUsage(); n > 3<<19 || cached == 0 {
		t.Fatalf("reopened with a smaller bound: %d bytes in %d packs", n, cached)
	}
	before := f.remote.Requests()
	for k, d := range live {
		e, _ := s2.entry(k)
		if _, ok := s2.cache.packs[e.pack]; !ok {
			continue
		}
		if got, err := s2.Get(ctx, k); err != nil || !bytes.Equal(got, d) {
			t.Fatalf("Get of a cached blob: %v", err)
		}
	}
	if r := f.remote.Requests().Sub(before); r.Gets != 0 {
		t.Errorf("reading the packs cached before the reopen made %d GETs", r.Gets)
	}
	readAll(t, s2, live)
}

// A pack being read is never evicted under its reader: a reference keeps
// it, and the eviction its release runs brings the cache back within the
// bound.
func TestCacheKeepsReferencedPacks(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "packs"), 0o755)
	c := newPackCache(dir, 100, os.Remove)
	write := func(id uint64) *os.File {
		p := filepath.Join(dir, packPath(id))
		if err := os.WriteFile(p, make([]byte, 60), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a := c.add(1, write(1), 60, 1)
	b := c.add(2, write(2), 60, 1) // over the bound; both referenced
	if n, _ := c.usage(); n != 120 {
		t.Fatalf("cache holds %d bytes; want both packs kept while read", n)
	}
	var buf [10]byte
	if _, err := a.f.ReadAt(buf[:], 0); err != nil {
		t.Fatalf("reading a referenced pack: %v", err)
	}
	c.release(a) // now the least recently used, unreferenced: evicted
	if n, k := c.usage(); n != 60 || c.packs[2] == nil {
		t.Fatalf("after release: %d bytes, %d packs", n, k)
	}
	if _, err := os.Stat(filepath.Join(dir, packPath(1))); !os.IsNotExist(err) {
		t.Fatalf("evicted pack's file: %v", err)
	}
	c.drop(2) // referenced: removed on release
	if _, err := b.f.ReadAt(buf[:], 0); err != nil {
		t.Fatalf("reading a dropped but referenced pack: %v", err)
	}
	c.release(b)
	if n, k := c.usage(); n != 0 || k != 0 {
		t.Fatalf("after the last release: %d bytes, %d packs", n, k)
	}
}
