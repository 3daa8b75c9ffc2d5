package cas

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/objstore/s3"
	bolt "go.etcd.io/bbolt"
)

type fixture struct {
	dir   string
	db    *bolt.DB
	s     *Store
	clock time.Time
	// remote, when set, holds the blobs (remote_test.go); the store is
	// opened with it as Options.Remote.
	remote *s3.Store
}

func open(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), clock: time.UnixMilli(1_700_000_000_000)}
	f.reopen(t)
	return f
}

func (f *fixture) reopen(t *testing.T) {
	t.Helper()
	if f.s != nil {
		f.s.Close()
		f.db.Close()
	}
	db, err := bolt.Open(filepath.Join(f.dir, "index.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Now: func() time.Time { return f.clock }, NoSync: true}
	if f.remote != nil {
		opts.Remote = f.remote
	}
	s, err := Open(filepath.Join(f.dir, "blobs"), kv.BoltDB{DB: db}, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.db, f.s = db, s
	t.Cleanup(func() { s.Close(); db.Close() })
}

func keyOf(ns Namespace, b []byte) string { return ns.Key(sha256.Sum256(b)) }

func text(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"func ", "return ", "if err != nil ", "{\n", "}\n", "x := ", "ctx, ", "// comment\n", "package main\n"}
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.Bytes()[:n]
}

func noise(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestKnownKey(t *testing.T) {
	// The check value of SPEC §6.1.
	if got := keyOf(Files, []byte("hello")); got != "sandbox-files/sha256/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
		t.Fatal(got)
	}
}

func TestPutGetRoundTrip(t *testing.T) { bothModes(t, testPutGetRoundTrip) }

func testPutGetRoundTrip(t *testing.T, f *fixture) {
	ctx := context.Background()
	cases := map[string][]byte{
		"empty":        {},
		"tiny":         []byte("hello"),
		"text":         text(20_000, 1),
		"noise":        noise(10_000, 2),
		"packed-max":   text(MaxPacked, 3),
		"large-text":   text(MaxPacked+1, 4),
		"large-noise":  noise(3<<20, 5),
		"large-mixed":  append(noise(1<<20, 6), text(2<<20, 7)...),
		"artifact-ish": []byte(`{"report":true}`),
	}
	for name, data := range cases {
		for _, ns := range []Namespace{Files, Artifacts} {
			key := keyOf(ns, data)
			if err := f.s.Put(ctx, key, data); err != nil {
				t.Fatalf("%s: Put: %v", name, err)
			}
			got, err := f.s.Get(ctx, key)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: Get = %d bytes, %v; want %d bytes", name, len(got), err, len(data))
			}
			info, err := f.s.Head(ctx, key)
			if err != nil || info.Size != int64(len(data)) || !info.Uploaded.Equal(f.clock) {
				t.Fatalf("%s: Head = %+v, %v", name, info, err)
			}
		}
	}
	// Compressible bytes are stored compressed, noise raw.
	if info, _ := f.s.Head(ctx, keyOf(Files, cases["text"])); info.Stored >= info.Size/2 {
		t.Errorf("text stored in %d of %d bytes", info.Stored, info.Size)
	}
	if info, _ := f.s.Head(ctx, keyOf(Files, cases["noise"])); info.Stored != info.Size {
		t.Errorf("noise stored in %d of %d bytes, want raw", info.Stored, info.Size)
	}
	// Everything survives a reopen.
	f.reopen(t)
	for name, data := range cases {
		if got, err := f.s.Get(ctx, keyOf(Artifacts, data)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s after reopen: %v", name, err)
		}
	}
}

func TestPutRefusesBadKeys(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	good := keyOf(Files, []byte("a"))
	for _, key := range []string{"", "sandbox-files/sha256/", "sandbox-files/sha256/" + string(bytes.Repeat([]byte("A"), 64)),
		"other/sha256/" + good[len(chain.FilePrefix):], good + "0", "sandbox-files/sha1/" + good[len(chain.FilePrefix):]} {
		if err := f.s.Put(ctx, key, []byte("a")); !errors.Is(err, sbxdb.ErrInvalidBlobKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	err := f.s.Put(ctx, good, []byte("b"))
	var e *sbxdb.BlobError
	if !errors.Is(err, sbxdb.ErrBlobKeyMismatch) || !errors.As(err, &e) || e.Key != good {
		t.Fatalf("mismatched bytes: %v", err)
	}
	if _, err := f.s.Head(ctx, good); !errors.Is(err, sbxdb.ErrBlobNotFound) {
		t.Fatalf("a refused Put stored something: %v", err)
	}
	if list, _ := f.s.List(ctx, ""); len(list) != 0 {
		t.Fatalf("store not empty: %v", list)
	}
}

func packBytes(t *testing.T, f *fixture) int64 {
	t.Helper()
	var n int64
	ents, _ := os.ReadDir(filepath.Join(f.dir, "blobs", "packs"))
	for _, e := range ents {
		st, _ := e.Info()
		n += st.Size()
	}
	return n
}

func TestPutExistingRefreshesUploadTimeOnly(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	data := text(5000, 9)
	key := keyOf(Files, data)
	if err := f.s.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	before := packBytes(t, f)
	f.clock = f.clock.Add(time.Hour)
	if err := f.s.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	if after := packBytes(t, f); after != before {
		t.Fatalf("second Put wrote %d bytes", after-before)
	}
	info, _ := f.s.Head(ctx, key)
	if !info.Uploaded.Equal(f.clock) {
		t.Fatalf("upload time %v, want %v", info.Uploaded, f.clock)
	}
}

func TestListAndDelete(t *testing.T) { bothModes(t, testListAndDelete) }

func testListAndDelete(t *testing.T, f *fixture) {
	ctx := context.Background()
	var fileKeys []string
	for i := range 20 {
		data := []byte(fmt.Sprint("blob ", i))
		k := keyOf(Files, data)
		fileKeys = append(fileKeys, k)
		f.s.Put(ctx, k, data)
		f.s.Put(ctx, keyOf(Artifacts, data), data)
	}
	big := text(MaxPacked+100, 11)
	bigKey := keyOf(Files, big)
	f.s.Put(ctx, bigKey, big)
	fileKeys = append(fileKeys, bigKey)
	slices.Sort(fileKeys)
	list, err := f.s.List(ctx, chain.FilePrefix)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range list {
		got = append(got, i.Key)
	}
	if !slices.Equal(got, fileKeys) {
		t.Fatalf("List(files) = %d keys, want %d sorted", len(got), len(fileKeys))
	}
	if all, _ := f.s.List(ctx, ""); len(all) != 41 {
		t.Fatalf("List(\"\") = %d", len(all))
	}
	for _, k := range fileKeys {
		if err := f.s.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.Get(ctx, k); !errors.Is(err, sbxdb.ErrBlobNotFound) {
			t.Fatalf("Get after Delete: %v", err)
		}
	}
	if err := f.s.Delete(ctx, fileKeys[0]); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	f.largeGone(t, Files, sha256.Sum256(big))
	if rest, _ := f.s.List(ctx, ""); len(rest) != 20 {
		t.Fatalf("%d left, want the 20 artifacts", len(rest))
	}
	// The dead bytes are accounted to their pack.
	var dead uint64
	f.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPacks).ForEach(func(k, v []byte) error {
			st, err := decodePackStats(v)
			dead += st.dead
			return err
		})
	})
	if dead == 0 {
		t.Fatal("no dead bytes recorded")
	}
}

// corruptions damage the one stored copy of a blob in different ways; each
// must make Get fail with an error naming the key, never return bytes.
func TestCorruptionIsDetected(t *testing.T) {
	ctx := context.Background()
	type damage func(t *testing.T, f *fixture, key string)
	onlyFile := func(t *testing.T, f *fixture, sub string) string {
		var path string
		filepath.WalkDir(filepath.Join(f.dir, "blobs", sub), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				path = p
			}
			return nil
		})
		if path == "" {
			t.Fatal("no file under", sub)
		}
		return path
	}
	flip := func(sub string, at func(size int64) int64) damage {
		return func(t *testing.T, f *fixture, key string) {
			p := onlyFile(t, f, sub)
			b, _ := os.ReadFile(p)
			b[at(int64(len(b)))] ^= 0x20
			os.WriteFile(p, b, 0o644)
		}
	}
	truncate := func(sub string) damage {
		return func(t *testing.T, f *fixture, key string) {
			p := onlyFile(t, f, sub)
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-1)
		}
	}
	remove := func(sub string) damage {
		return func(t *testing.T, f *fixture, key string) { os.Remove(onlyFile(t, f, sub)) }
	}
	for _, tc := range []struct {
		name string
		data []byte
		dmg  damage
		want error
	}{
		{"pack payload zstd", text(30_000, 1), flip("packs", func(n int64) int64 { return n - 10 }), sbxdb.ErrBlobCorrupt},
		{"pack payload raw", noise(3000, 2), flip("packs", func(n int64) int64 { return n - 10 }), sbxdb.ErrBlobCorrupt},
		{"pack header size", noise(3000, 3), flip("packs", func(int64) int64 { return 9 }), sbxdb.ErrBlobCorrupt},
		{"pack header digest", noise(3000, 3), flip("packs", func(int64) int64 { return 30 }), sbxdb.ErrBlobCorrupt},
		{"pack truncated", text(3000, 4), truncate("packs"), sbxdb.ErrBlobCorrupt},
		{"pack removed", text(3000, 5), remove("packs"), sbxdb.ErrBlobCorrupt},
		{"large payload zstd", text(MaxPacked*2, 6), flip("large", func(n int64) int64 { return n / 2 }), sbxdb.ErrBlobCorrupt},
		{"large payload raw", noise(MaxPacked*2, 7), flip("large", func(n int64) int64 { return n - 1 }), sbxdb.ErrBlobCorrupt},
		{"large truncated", noise(MaxPacked*2, 8), truncate("large"), sbxdb.ErrBlobCorrupt},
		{"large removed", text(MaxPacked*2, 9), remove("large"), sbxdb.ErrBlobCorrupt},
		{"index entry", text(3000, 10), func(t *testing.T, f *fixture, key string) {
			f.db.Update(func(tx *bolt.Tx) error {
				v := slices.Clone(tx.Bucket(bucketIndex).Get([]byte(key)))
				v[2] ^= 1
				return tx.Bucket(bucketIndex).Put([]byte(key), v)
			})
		}, sbxdb.ErrBlobCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := open(t)
			key := keyOf(Files, tc.data)
			if err := f.s.Put(ctx, key, tc.data); err != nil {
				t.Fatal(err)
			}
			f.s.Close() // drop cached pack handles so damage is seen
			tc.dmg(t, f, key)
			got, err := f.s.Get(ctx, key)
			var e *sbxdb.BlobError
			if !errors.Is(err, tc.want) || !errors.As(err, &e) || e.Key != key || got != nil {
				t.Fatalf("Get = %d bytes, %v; want %v naming %s", len(got), err, tc.want, key)
			}
		})
	}
}

func TestBatchDeduplicatesAndCommitsOnce(t *testing.T) {
	bothModes(t, testBatchDeduplicatesAndCommitsOnce)
}

func testBatchDeduplicatesAndCommitsOnce(t *testing.T, f *fixture) {
	ctx := context.Background()
	b := f.s.NewBatch()
	var wg sync.WaitGroup
	var mu sync.Mutex
	newCount := 0
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := text(2000+i%10, uint64(i%10)) // 10 distinct contents
			res, err := b.Add(ctx, Files, data)
			if err != nil {
				t.Error(err)
			}
			if res.New {
				mu.Lock()
				newCount++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if newCount != 10 {
		t.Fatalf("%d new, want 10", newCount)
	}
	if list, _ := f.s.List(ctx, ""); len(list) != 0 {
		t.Fatal("blobs visible before Commit")
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if list, _ := f.s.List(ctx, ""); len(list) != 10 {
		t.Fatalf("%d blobs after commit", len(list))
	}
	if _, err := b.Add(ctx, Files, []byte("late")); err == nil {
		t.Fatal("Add after Commit succeeded")
	}
}

func TestCloseWithoutCommitLeavesNothing(t *testing.T) {
	bothModes(t, testCloseWithoutCommitLeavesNothing)
}

func testCloseWithoutCommitLeavesNothing(t *testing.T, f *fixture) {
	ctx := context.Background()
	b := f.s.NewBatch()
	b.Add(ctx, Files, text(5000, 1))
	b.AddReader(ctx, Files, bytes.NewReader(text(MaxPacked*2, 2)))
	b.Close()
	for _, sub := range []string{"packs", "tmp"} {
		if ents, _ := os.ReadDir(filepath.Join(f.dir, "blobs", sub)); len(ents) != 0 {
			t.Fatalf("%s holds %d files after Close", sub, len(ents))
		}
	}
	if list, _ := f.s.List(ctx, ""); len(list) != 0 {
		t.Fatal("aborted blobs listed")
	}
	if n := f.objects(t, ""); n != 0 {
		t.Fatalf("%d objects after Close", n)
	}
}

func TestBatchPinsKeysUntilClose(t *testing.T) { bothModes(t, testBatchPinsKeysUntilClose) }

func testBatchPinsKeysUntilClose(t *testing.T, f *fixture) {
	ctx := context.Background()
	old, cached, gone := []byte("old content"), []byte("a cached file"), []byte("deleted before the pin")
	for _, d := range [][]byte{old, cached, gone} {
		f.s.Put(ctx, keyOf(Files, d), d)
	}
	f.s.Delete(ctx, keyOf(Files, gone))
	b := f.s.NewBatch()
	if res, _ := b.Add(ctx, Files, old); res.New {
		t.Fatal("existing key reported new")
	}
	missing, err := b.Pin(ctx, []string{keyOf(Files, gone), keyOf(Files, cached)})
	if err != nil || !cmp.Equal(missing, []string{keyOf(Files, gone)}) {
		t.Fatalf("Pin = %v, %v; want the deleted key missing", missing, err)
	}
	if _, err := b.Add(ctx, Files, []byte("new content")); err != nil {
		t.Fatal(err)
	}
	// A sweep meanwhile: every key the batch added or found is pinned.
	for _, d := range [][]byte{old, cached, []byte("new content")} {
		if err := f.s.Delete(ctx, keyOf(Files, d)); !errors.Is(err, ErrPinned) {
			t.Fatalf("Delete of a pinned key = %v, want ErrPinned", err)
		}
	}
	if del, err := f.s.DeleteUnused(ctx, []string{keyOf(Files, old), keyOf(Files, cached)}, nil); err != nil || len(del) != 0 {
		t.Fatalf("DeleteUnused of pinned keys = %v, %v", del, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Delete(ctx, keyOf(Files, cached)); !errors.Is(err, ErrPinned) {
		t.Fatalf("Delete after Commit, before Close = %v, want ErrPinned", err)
	}
	b.Close()
	if del, err := f.s.DeleteUnused(ctx, []string{keyOf(Files, old), keyOf(Files, cached)}, nil); err != nil || len(del) != 2 {
		t.Fatalf("DeleteUnused after Close = %v, %v; want both deleted", del, err)
	}
}

func TestDeleteUnusedAsksInUse(t *testing.T) { bothModes(t, testDeleteUnusedAsksInUse) }

func testDeleteUnusedAsksInUse(t *testing.T, f *fixture) {
	ctx := context.Background()
	small, large := []byte("small"), bytes.Repeat([]byte("large blob "), 200_000)
	f.s.Put(ctx, keyOf(Files, small), small)
	f.s.Put(ctx, keyOf(Files, large), large)
	keep := keyOf(Files, small)
	listed, err := f.s.List(ctx, "")
	if err != nil || len(listed) != 2 {
		t.Fatal(listed, err)
	}
	want := map[string]time.Time{}
	for _, info := range listed {
		want[info.Key] = info.Uploaded
	}
	calls := 0
	asked := map[string]time.Time{}
	inUse := func(tx kv.Tx) (func(string, time.Time) (bool, error), error) {
		calls++
		return func(k string, uploaded time.Time) (bool, error) {
			asked[k] = uploaded
			return k == keep, nil
		}, nil
	}
	keys := []string{keyOf(Files, large), "junk", keyOf(Files, []byte("never stored")), keep, keyOf(Files, large)}
	del, err := f.s.DeleteUnused(ctx, keys, inUse)
	if err != nil || !cmp.Equal(del, []string{keyOf(Files, large)}) || calls != 1 {
		t.Fatalf("DeleteUnused = %v, %v (%d calls); want only the large key, one transaction", del, err, calls)
	}
	// The test is asked about stored keys only, each with its entry's
	// upload time.
	if !cmp.Equal(asked, want) {
		t.Fatalf("inUse was asked %v; want the stored keys with their upload times %v", asked, want)
	}
	ns, sum, _ := ParseKey(keyOf(Files, large))
	f.largeGone(t, ns, sum)
	if _, err := f.s.Get(ctx, keep); err != nil {
		t.Fatal(err)
	}
	failing := func(kv.Tx) (func(string, time.Time) (bool, error), error) {
		return func(string, time.Time) (bool, error) { return false, errors.New("boom") }, nil
	}
	if _, err := f.s.DeleteUnused(ctx, []string{keep}, failing); err == nil {
		t.Fatal("an inUse error was ignored")
	}
	if _, err := f.s.Get(ctx, keep); err != nil {
		t.Fatalf("a failed DeleteUnused deleted: %v", err)
	}
}

// A large blob streams: reading it back through Open gives the bytes and
// verifies at EOF.
func TestOpenStreamsLargeBlob(t *testing.T) { bothModes(t, testOpenStreamsLargeBlob) }

func testOpenStreamsLargeBlob(t *testing.T, f *fixture) {
	ctx := context.Background()
	data := text(9<<20, 3)
	b := f.s.NewBatch()
	res, err := b.AddReader(ctx, Files, bytes.NewReader(data))
	if err != nil || !res.New || res.Key != keyOf(Files, data) {
		t.Fatal(res, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := f.s.Open(ctx, res.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, r, make([]byte, 4096))
	if err != nil || n != int64(len(data)) || r.Size() != n {
		t.Fatal(n, err)
	}
}

func TestReadOnlyRefusesWrites(t *testing.T) {
	f := open(t)
	ro, err := Open(filepath.Join(f.dir, "blobs"), kv.BoltDB{DB: f.db}, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Put(context.Background(), keyOf(Files, []byte("x")), []byte("x")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Put on read-only = %v", err)
	}
}

// Missing walks the index with one cursor, stepping or seeking; it must
// agree with a Head per key whatever the gaps between the keys asked.
func TestMissingAgreesWithHead(t *testing.T) { bothModes(t, testMissingAgreesWithHead) }

func testMissingAgreesWithHead(t *testing.T, f *fixture) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	var all []string
	for i := range 400 {
		data := []byte(fmt.Sprint("blob ", i))
		key := keyOf(Files, data)
		all = append(all, key)
		if r.IntN(3) > 0 { // two in three are stored
			if err := f.s.Put(ctx, key, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := range 50 {
		var ask, want []string
		for _, k := range all {
			if r.IntN(100) < round*2+1 { // sparse to dense asks
				ask = append(ask, k)
				if r.IntN(10) == 0 {
					ask = append(ask, k) // duplicates are reported once
				}
			}
		}
		for _, k := range ask {
			if _, err := f.s.Head(ctx, k); errors.Is(err, sbxdb.ErrBlobNotFound) && !slices.Contains(want, k) {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		got, err := f.s.Missing(ctx, ask)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("round %d: Missing = %d keys, %v; want %d", round, len(got), err, len(want))
		}
	}
}

// An empty batch commits no transaction: a capture of an unchanged tree
// must not pay for an index commit.
func TestEmptyBatchCommitsNothing(t *testing.T) {
	f := open(t)
	txid := func() (id int) {
		f.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
		return id
	}
	before := txid()
	if err := f.s.NewBatch().Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := txid(); after != before {
		t.Fatalf("empty batch committed %d transactions", after-before)
	}
	b := f.s.NewBatch()
	b.Add(context.Background(), Files, []byte("x"))
	b.Commit(context.Background())
	if after := txid(); after != before+1 {
		t.Fatalf("a batch of one blob committed %d transactions, want 1", after-before)
	}
}

func TestHeadRefreshesAnOldUploadTime(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	data := []byte("headed, not put again")
	key := keyOf(Files, data)
	f.s.Put(ctx, key, data)
	uploaded := f.clock
	f.clock = f.clock.Add(RefreshAfter / 2)
	if info, _ := f.s.Head(ctx, key); !info.Uploaded.Equal(uploaded) {
		t.Fatalf("a recent upload time was rewritten: %v", info.Uploaded)
	}
	f.clock = f.clock.Add(RefreshAfter)
	if info, _ := f.s.Head(ctx, key); !info.Uploaded.Equal(f.clock) {
		t.Fatalf("Head of an old blob: uploaded %v, want refreshed to %v", info.Uploaded, f.clock)
	}
	if infos, _ := f.s.List(ctx, key); len(infos) != 1 || !infos[0].Uploaded.Equal(f.clock) {
		t.Fatalf("the refresh was not stored: %v", infos)
	}
}

// TestLookupCountsADamagedEntryMissing: a key whose index entry is damaged
// is missing to Lookup (and Pin), not stale: its bytes must be stored
// again, and the batch that does so replaces the entry. Refreshing it
// instead failed the commit, and every capture after it.
func TestLookupCountsADamagedEntryMissing(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	d := text(3000, 7)
	key := keyOf(Files, d)
	if err := f.s.Put(ctx, key, d); err != nil {
		t.Fatal(err)
	}
	f.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIndex)
		v := bytes.Clone(b.Get([]byte(key)))
		v[len(v)-1] ^= 0x80 // the entry's checksum
		return b.Put([]byte(key), v)
	})
	if missing, err := f.s.Missing(ctx, []string{key}); err != nil || len(missing) != 0 {
		t.Fatalf("Missing = %v, %v: the key is there, damaged", missing, err)
	}
	b := f.s.NewBatch()
	defer b.Close()
	missing, stale, err := b.Lookup(ctx, []string{key})
	if err != nil || !slices.Equal(missing, []string{key}) || len(stale) != 0 {
		t.Fatalf("Lookup = %v, %v, %v; want the key missing", missing, stale, err)
	}
	if res, err := b.Add(ctx, Files, d); err != nil || !res.New {
		t.Fatalf("Add of the bytes again = %+v, %v; want them stored", res, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := f.s.Get(ctx, key); err != nil || !bytes.Equal(got, d) {
		t.Fatalf("Get after the entry was replaced: %v", err)
	}
}

// TestLookupLeavesRefreshingToTheCaller: Lookup reports stale keys without
// refreshing them; Pin and Refresh refresh what they are given.
func TestLookupLeavesRefreshingToTheCaller(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	a, b2 := text(100, 1), text(100, 2)
	for _, d := range [][]byte{a, b2} {
		if err := f.s.Put(ctx, keyOf(Files, d), d); err != nil {
			t.Fatal(err)
		}
	}
	start := f.clock
	f.clock = f.clock.Add(RefreshAfter + time.Minute)
	keys := []string{keyOf(Files, a), keyOf(Files, b2)}
	b := f.s.NewBatch()
	_, stale, err := b.Lookup(ctx, keys)
	if err != nil || len(stale) != 2 {
		t.Fatalf("Lookup: stale %v, %v", stale, err)
	}
	b.Refresh(keys[:1])
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	var up [2]int64
	f.db.View(func(tx *bolt.Tx) error {
		for i, k := range keys {
			e, _, _ := lookup(kv.Bolt(tx), k)
			up[i] = e.uploaded
		}
		return nil
	})
	if up[0] != f.clock.UnixMilli() || up[1] != start.UnixMilli() {
		t.Fatalf("upload times %v; want the refreshed key at %d and the other left at %d", up, f.clock.UnixMilli(), start.UnixMilli())
	}
}

func TestAddDeferredLooksUpInBatches(t *testing.T) { bothModes(t, testAddDeferredLooksUpInBatches) }

// testAddDeferredLooksUpInBatches: blobs added deferred, some stored
// before, some repeated, more than one lookup's worth of keys, are stored
// once each by Commit; NewBlobs counts those the store lacked, and the
// stored ones have their upload time refreshed.
func testAddDeferredLooksUpInBatches(t *testing.T, f *fixture) {
	ctx := context.Background()
	blob := func(i int) []byte { return []byte(fmt.Sprintf("deferred blob %d", i)) }
	for i := 0; i < 20; i++ { // stored before
		if err := f.s.Put(ctx, keyOf(Files, blob(i)), blob(i)); err != nil {
			t.Fatal(err)
		}
	}
	f.clock = f.clock.Add(2 * RefreshAfter)
	n := deferMaxKeys + 100
	b := f.s.NewBatch()
	defer b.Close()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				for range 1 + i%2 { // odd ones twice
					res, err := b.AddDeferred(ctx, Files, blob(i))
					if err != nil || res.Key != keyOf(Files, blob(i)) || res.Size != int64(len(blob(i))) {
						t.Errorf("AddDeferred %d: %+v, %v", i, res, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.NewBlobs(); got != n-20 {
		t.Fatalf("NewBlobs = %d, want %d", got, n-20)
	}
	list, err := f.s.List(ctx, "")
	if err != nil || len(list) != n {
		t.Fatalf("%d blobs after commit (%v), want %d", len(list), err, n)
	}
	for _, i := range []int{0, 19, 20, n - 1} {
		got, err := f.s.Get(ctx, keyOf(Files, blob(i)))
		if err != nil || !bytes.Equal(got, blob(i)) {
			t.Fatalf("blob %d: %q, %v", i, got, err)
		}
		info, err := f.s.Head(ctx, keyOf(Files, blob(i)))
		if err != nil || !info.Uploaded.Equal(f.clock) {
			t.Fatalf("blob %d uploaded %v (%v), want %v", i, info.Uploaded, err, f.clock)
		}
	}
	if _, err := b.AddDeferred(ctx, Files, []byte("late")); err == nil {
		t.Fatal("AddDeferred after Commit succeeded")
	}
}
