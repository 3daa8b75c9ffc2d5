package cas

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/internal/objstore/s3"
	"github.com/sbxdb/sbxdb/internal/testkit/s3test"
	bolt "go.etcd.io/bbolt"
)

// bothModes runs fn on a local store and on one whose blobs are in a real
// S3 server (versitygw; the remote run skips without it unless $CI is set).
func bothModes(t *testing.T, fn func(t *testing.T, f *fixture)) {
	t.Run("local", func(t *testing.T) { fn(t, open(t)) })
	t.Run("remote", func(t *testing.T) { fn(t, openRemote(t, s3test.Start(t))) })
}

// remoteConfig is the configuration of a fresh bucket on srv.
func remoteConfig(srv *s3test.Server) s3.Config {
	return s3.Config{
		Endpoint:  srv.Endpoint,
		AccessKey: srv.Access,
		SecretKey: srv.Secret,
		Bucket:    s3test.Bucket(),
		Prefix:    "blobs",
		// A stopped server fails a request at once, not after retries.
		MaxRetries:  1,
		DialTimeout: 2 * time.Second,
	}
}

func openBucket(t *testing.T, cfg s3.Config) *s3.Store {
	t.Helper()
	st, err := s3.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openRemote opens a store whose blobs are in a fresh bucket on srv.
func openRemote(t *testing.T, srv *s3test.Server) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), clock: time.UnixMilli(1_700_000_000_000), remote: openBucket(t, remoteConfig(srv))}
	f.reopen(t)
	return f
}

// server opens a second store ("another server": its own blob directory)
// on f's index and bucket.
func (f *fixture) server(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "blobs"), kv.BoltDB{DB: f.db}, Options{Now: func() time.Time { return f.clock }, NoSync: true, Remote: f.remote})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// objects counts the objects under prefix in f's bucket (0 for a local
// store).
func (f *fixture) objects(t *testing.T, prefix string) int {
	t.Helper()
	if f.remote == nil {
		return 0
	}
	n := 0
	if err := f.remote.List(context.Background(), prefix, func(objstore.Info) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// largeGone fails the test if the large blob's file, or any object of it,
// is left.
func (f *fixture) largeGone(t *testing.T, ns Namespace, sum [32]byte) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(f.dir, "blobs", largePath(ns, sum))); !os.IsNotExist(err) {
		t.Fatalf("large file of a deleted blob: %v", err)
	}
	if n := f.objects(t, filepath.ToSlash(largePath(ns, sum))); n != 0 {
		t.Fatalf("%d objects of a deleted large blob", n)
	}
}

// largeObjectOf returns the name of the object holding key's large blob.
func (f *fixture) largeObjectOf(t *testing.T, key string) string {
	t.Helper()
	e, err := f.s.entry(key)
	if err != nil || e.where != whereObject {
		t.Fatalf("entry of %s: where %d, %v; want a remote object", key, e.where, err)
	}
	ns, sum, _ := ParseKey(key)
	return largeObject(ns, sum, e.object)
}

func TestRemoteEntryRoundTrip(t *testing.T) {
	key := Files.Key(sha256.Sum256([]byte("x")))
	e := entry{where: whereObject, object: 0xfedcba9876543210, codec: codecZstd, raw: 9 << 20, stored: 1 << 20, uploaded: 1_700_000_000_000}
	got, err := decodeEntry(key, e.encode(key))
	if err != nil || got != e {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", e, got, err)
	}
	name := largeObject(Files, sha256.Sum256([]byte("x")), e.object)
	if k, sfx, ok := parseLargeObject(name); !ok || k != key || sfx != e.object {
		t.Fatalf("parseLargeObject(%q) = %q, %x, %v", name, k, sfx, ok)
	}
	if id, ok := parsePackObject(packObject(42)); !ok || id != 42 {
		t.Fatalf("parsePackObject = %d, %v", id, ok)
	}
}

// A store without Remote refuses an entry naming an object, saying why.
func TestLocalStoreRefusesRemoteEntries(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	data := text(MaxPacked+1, 9)
	key := keyOf(Files, data)
	e := entry{where: whereObject, object: 7, codec: codecRaw, raw: uint64(len(data)), stored: uint64(len(data))}
	if err := f.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIndex).Put([]byte(key), e.encode(key))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Get(ctx, key); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "object storage") {
		t.Fatalf("Get = %v; want ErrFormat naming object storage", err)
	}
}

// The index says where the blobs are: an open without the bucket of an
// index of remote blobs is refused, and so is an open with a bucket of an
// index of local ones; an empty index takes either.
func TestRemoteIndexMark(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	if err := f.s.Put(ctx, keyOf(Files, []byte("x")), []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := Open(filepath.Join(t.TempDir(), "blobs"), kv.BoltDB{DB: f.db}, Options{ReadOnly: ro})
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "object storage") {
			t.Errorf("Open (read-only %v) without Remote of a remote index = %v; want ErrFormat", ro, err)
		}
	}

	local := open(t)
	dir, err := objstore.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	blobs := filepath.Join(t.TempDir(), "blobs")
	if _, err := Open(blobs, kv.BoltDB{DB: local.db}, Options{Remote: dir}); err != nil {
		t.Fatalf("Open with Remote of an empty index: %v", err)
	}
	other := open(t)
	if err := other.s.Put(ctx, keyOf(Files, []byte("x")), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(blobs, kv.BoltDB{DB: other.db}, Options{Remote: dir}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "local") {
		t.Errorf("Open with Remote of an index of local blobs = %v; want ErrFormat", err)
	}
}

func TestRemoteLayout(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	if f.s.opts.PackSize != DefaultRemotePackSize {
		t.Errorf("pack size %d, want %d", f.s.opts.PackSize, DefaultRemotePackSize)
	}
	small, large := text(5000, 1), text(MaxPacked*2, 2)
	b := f.s.NewBatch()
	b.Add(ctx, Files, small)
	b.AddReader(ctx, Files, bytes.NewReader(large))
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if n := f.objects(t, "packs/"); n != 1 {
		t.Errorf("%d pack objects, want 1", n)
	}
	name := f.largeObjectOf(t, keyOf(Files, large))
	info, err := f.remote.Stat(ctx, name)
	if e, _ := f.s.entry(keyOf(Files, large)); err != nil || info.Size != headerSize+int64(e.stored) {
		t.Fatalf("Stat(%s) = %+v, %v", name, info, err)
	}
	// Nothing large stays on the local disk; the pack stays as the cache.
	for _, sub := range []string{"large", "tmp"} {
		var files int
		filepath.WalkDir(filepath.Join(f.dir, "blobs", sub), func(_ string, d os.DirEntry, _ error) error {
			if d != nil && !d.IsDir() {
				files++
			}
			return nil
		})
		if files != 0 {
			t.Errorf("%s holds %d files", sub, files)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(f.dir, "blobs", "packs")); len(ents) != 1 {
		t.Errorf("%d cached packs, want 1", len(ents))
	}
	// Nothing dead: a repack in the bucket has nothing to do.
	if p, err := f.s.PlanRepack(ctx, RepackOptions{Threshold: 0.5}, nil); err != nil || p.Stats.Packs != 0 {
		t.Errorf("PlanRepack = %+v, %v; want nothing", p, err)
	}
	if st, err := f.s.Repack(ctx, RepackOptions{Threshold: 0.5}); err != nil || st.Packs != 0 {
		t.Errorf("Repack = %+v, %v; want nothing", st, err)
	}
}

// A second server, with its own (empty) blob directory, reads what the
// first wrote: packs are downloaded into its cache once, large blobs
// streamed; and a reopen never deletes objects.
func TestRemoteSecondServerReads(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	var keys []string
	var datas [][]byte
	b := f.s.NewBatch()
	for i := range 50 {
		d := text(3000+i, uint64(i))
		res, err := b.Add(ctx, Files, d)
		if err != nil {
			t.Fatal(err)
		}
		keys, datas = append(keys, res.Key), append(datas, d)
	}
	large := noise(MaxPacked+5, 3)
	res, err := b.AddReader(ctx, Artifacts, bytes.NewReader(large))
	if err != nil {
		t.Fatal(err)
	}
	keys, datas = append(keys, res.Key), append(datas, large)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	objects := f.objects(t, "")

	other := f.server(t)
	before := f.remote.Requests()
	for i, k := range keys {
		got, err := other.Get(ctx, k)
		if err != nil || !bytes.Equal(got, datas[i]) {
			t.Fatalf("second server Get(%s) = %d bytes, %v", k, len(got), err)
		}
	}
	reqs := f.remote.Requests().Sub(before)
	// One download of the pack, one stream of the large object.
	if reqs.Gets != 2 {
		t.Errorf("second server's reads made %d GETs (%+v), want 2", reqs.Gets, reqs)
	}
	if ents, _ := os.ReadDir(filepath.Join(other.Dir(), "packs")); len(ents) != 1 {
		t.Errorf("second server caches %d packs, want 1", len(ents))
	}
	// A reopen of either removes no object.
	f.reopen(t)
	f.server(t)
	if n := f.objects(t, ""); n != objects {
		t.Fatalf("%d objects after reopening, want %d", n, objects)
	}
	// ReadEach and a deep Check read everything from a third, cold cache.
	third := f.server(t)
	var n atomic.Int64 // fn runs on several goroutines
	if err := third.ReadEach(ctx, keys, 4, func(key string, r *Reader) error {
		n.Add(1)
		_, err := io.Copy(io.Discard, r)
		return err
	}); err != nil || n.Load() != int64(len(keys)) {
		t.Fatalf("ReadEach: %d of %d, %v", n.Load(), len(keys), err)
	}
	var problems []string
	if err := third.Check(ctx, true, nil, func(key string, err error) { problems = append(problems, err.Error()) }); err != nil || len(problems) != 0 {
		t.Fatalf("Check = %v, %v", problems, err)
	}
}

// A batch whose upload fails indexes nothing, and the next one, once the
// server is back, works.
func TestRemoteUploadFailure(t *testing.T) {
	srv := s3test.Start(t)
	f := openRemote(t, srv)
	ctx := context.Background()
	small, large := text(5000, 1), noise(MaxPacked+1, 2)
	b := f.s.NewBatch()
	if _, err := b.Add(ctx, Files, small); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddReader(ctx, Files, bytes.NewReader(large)); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	err := b.Commit(ctx)
	b.Close()
	if !errors.Is(err, sbxdb.ErrBlobsUnavailable) {
		t.Fatalf("Commit with the server stopped = %v; want ErrUnavailable", err)
	}
	if list, _ := f.s.List(ctx, ""); len(list) != 0 {
		t.Fatalf("%d blobs indexed by a failed batch", len(list))
	}
	for _, sub := range []string{"packs", "tmp"} {
		if ents, _ := os.ReadDir(filepath.Join(f.dir, "blobs", sub)); len(ents) != 0 {
			t.Fatalf("%s holds %d files after a failed upload", sub, len(ents))
		}
	}
	srv.Start()
	b = f.s.NewBatch()
	defer b.Close()
	b.Add(ctx, Files, small)
	b.AddReader(ctx, Files, bytes.NewReader(large))
	if err := b.Commit(ctx); err != nil {
		t.Fatalf("Commit after the server restarted: %v", err)
	}
	for _, d := range [][]byte{small, large} {
		if got, err := f.server(t).Get(ctx, keyOf(Files, d)); err != nil || !bytes.Equal(got, d) {
			t.Fatalf("Get after restart: %v", err)
		}
	}
}

// A sweep deletes the large blob's object; RemoveOrphans leaves a young
// unindexed object alone and deletes an old one.
func TestRemoteSweepAndOrphans(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	large := text(MaxPacked+1, 4)
	key := keyOf(Files, large)
	if err := f.s.Put(ctx, key, large); err != nil {
		t.Fatal(err)
	}
	name := f.largeObjectOf(t, key)
	if del, err := f.s.DeleteUnused(ctx, []string{key}, nil); err != nil || len(del) != 1 {
		t.Fatalf("DeleteUnused = %v, %v", del, err)
	}
	if _, err := f.remote.Stat(ctx, name); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("object of a swept blob: %v", err)
	}

	// Objects no entry names: a large one and a pack, as a batch on
	// another server leaves them between its upload and its commit.
	f.clock = time.Now()
	ns, sum, _ := ParseKey(key)
	stray := largeObject(ns, sum, 99)
	strayPack := packObject(12345)
	for _, n := range []string{stray, strayPack} {
		if err := f.remote.Put(ctx, n, bytes.NewReader([]byte("x")), 1, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A live pack and a live large object, which must stay.
	if err := f.s.Put(ctx, key, large); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Put(ctx, keyOf(Files, []byte("small")), []byte("small")); err != nil {
		t.Fatal(err)
	}
	live := f.objects(t, "")
	if n, err := f.s.Orphans(ctx); err != nil || n != 2 {
		t.Fatalf("Orphans = %d, %v; want 2", n, err)
	}
	if n, err := f.s.RemoveOrphans(ctx, 0); err != nil || n != 0 {
		t.Fatalf("RemoveOrphans of fresh objects = %d, %v; want 0", n, err)
	}
	if n := f.objects(t, ""); n != live {
		t.Fatalf("%d objects, want %d", n, live)
	}
	f.clock = time.Now().Add(RemoteOrphanMinAge + time.Minute)
	if n, err := f.s.RemoveOrphans(ctx, time.Minute); err != nil || n != 2 {
		t.Fatalf("RemoveOrphans of old objects = %d, %v; want 2", n, err)
	}
	for _, n := range []string{stray, strayPack} {
		if _, err := f.remote.Stat(ctx, n); !errors.Is(err, objstore.ErrNotExist) {
			t.Fatalf("orphan %s left: %v", n, err)
		}
	}
	if n := f.objects(t, ""); n != live-2 {
		t.Fatalf("%d objects left, want the %d live ones", n, live-2)
	}
	for _, k := range []string{key, keyOf(Files, []byte("small"))} {
		if _, err := f.server(t).Get(ctx, k); err != nil {
			t.Fatalf("live blob after RemoveOrphans: %v", err)
		}
	}
}

// Check lists the bucket: a deleted object is reported by the keys it
// held; damaged bytes fail a read with ErrCorrupt.
func TestRemoteCheckAndDamage(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	small, large := text(5000, 1), text(MaxPacked+1, 2)
	for _, d := range [][]byte{small, large} {
		if err := f.s.Put(ctx, keyOf(Files, d), d); err != nil {
			t.Fatal(err)
		}
	}
	check := func(s *Store, deep bool) map[string]error {
		t.Helper()
		got := map[string]error{}
		if err := s.Check(ctx, deep, nil, func(key string, err error) {
			if _, seen := got[key]; !seen {
				got[key] = err
			}
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := check(f.s, true); len(got) != 0 {
		t.Fatalf("Check of a sound store: %v", got)
	}
	before := f.remote.Requests()
	check(f.s, false)
	if r := f.remote.Requests().Sub(before); r.Heads != 0 || r.Gets != 0 || r.Lists != 2 {
		t.Errorf("shallow Check made %+v; want two listings and nothing else", r)
	}

	// Damage: the large object's bytes flipped, read back by the store.
	name := f.largeObjectOf(t, keyOf(Files, large))
	rc, err := f.remote.Open(ctx, name, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := io.ReadAll(rc)
	rc.Close()
	obj[len(obj)-10] ^= 0xff
	if err := f.remote.Put(ctx, name, bytes.NewReader(obj), int64(len(obj)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Get(ctx, keyOf(Files, large)); !errors.Is(err, sbxdb.ErrBlobCorrupt) {
		t.Fatalf("Get of a damaged object = %v; want ErrCorrupt", err)
	}
	// Damage to a pack, read by a server that has no cached copy.
	var packName string
	f.remote.List(ctx, "packs/", func(i objstore.Info) error { packName = i.Name; return nil })
	rc, _ = f.remote.Open(ctx, packName, 0, -1)
	pack, _ := io.ReadAll(rc)
	rc.Close()
	pack[len(pack)-3] ^= 0xff
	f.remote.Put(ctx, packName, bytes.NewReader(pack), int64(len(pack)), objstore.PutOptions{})
	if _, err := f.server(t).Get(ctx, keyOf(Files, small)); !errors.Is(err, sbxdb.ErrBlobCorrupt) {
		t.Fatalf("Get from a damaged pack = %v; want ErrCorrupt", err)
	}

	// Missing: both objects deleted behind the store's back.
	f.remote.Delete(ctx, name)
	f.remote.Delete(ctx, packName)
	got := check(f.s, false)
	for _, k := range []string{keyOf(Files, small), keyOf(Files, large)} {
		if err := got[k]; !errors.Is(err, sbxdb.ErrBlobCorrupt) {
			t.Errorf("Check of %s: %v; want ErrCorrupt", k, err)
		}
	}
	if err := got[""]; err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Check of the pack: %v; want it missing", err)
	}
	if _, err := f.s.Open(ctx, keyOf(Files, large)); !errors.Is(err, sbxdb.ErrBlobCorrupt) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Open of a missing object = %v; want ErrCorrupt, missing", err)
	}
}

// The requests a batch of small files costs, and a cold read of them all:
// packs make both a small fraction of a request per file.
func TestRemoteRequestsPerFile(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	const files = 2000
	var keys []string
	b := f.s.NewBatch()
	var bytes int
	for i := range files {
		d := noise(1000+(i*7)%8000, uint64(i)) // incompressible: 10 MB, two packs
		bytes += len(d)
		res, err := b.Add(ctx, Files, d)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, res.Key)
	}
	before := f.remote.Requests()
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	put := f.remote.Requests().Sub(before)
	other := f.server(t)
	before = f.remote.Requests()
	if err := other.ReadEach(ctx, keys, 4, func(_ string, r *Reader) error {
		_, err := io.Copy(io.Discard, r)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	get := f.remote.Requests().Sub(before)
	t.Logf("batch of %d small files (%d bytes): %d requests (%+v), %.4f per file; a cold read of them all: %d requests (%+v), %.4f per file",
		files, bytes, put.Total(), put, float64(put.Total())/files, get.Total(), get, float64(get.Total())/files)
	if put.Total() > files/100 || get.Total() > files/100 {
		t.Errorf("more than one request per 100 small files")
	}
}

// A read-only store with remote blobs creates no cache: it reads packs by
// ranged requests.
func TestRemoteReadOnly(t *testing.T) {
	srv := s3test.Start(t)
	f := openRemote(t, srv)
	ctx := context.Background()
	small, large := text(5000, 1), text(MaxPacked+1, 2)
	for _, d := range [][]byte{small, large} {
		if err := f.s.Put(ctx, keyOf(Files, d), d); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "blobs")
	ro, err := Open(dir, kv.BoltDB{DB: f.db}, Options{ReadOnly: true, Remote: f.remote})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for _, d := range [][]byte{small, large} {
		if got, err := ro.Get(ctx, keyOf(Files, d)); err != nil || !bytes.Equal(got, d) {
			t.Fatalf("read-only Get: %v", err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a read-only store created %s: %v", dir, err)
	}
	// A server that does not answer is not damage; a missing pack is.
	srv.Stop()
	if _, err := ro.Get(ctx, keyOf(Files, small)); err == nil || errors.Is(err, sbxdb.ErrBlobCorrupt) {
		t.Errorf("Get with the server stopped = %v; want an error that is not ErrCorrupt", err)
	}
	srv.Start()
	f.remote.List(ctx, "packs/", func(i objstore.Info) error { return f.remote.Delete(ctx, i.Name) })
	if _, err := ro.Get(ctx, keyOf(Files, small)); !errors.Is(err, sbxdb.ErrBlobCorrupt) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Get from a deleted pack = %v; want ErrCorrupt, missing", err)
	}
}

// Concurrent readers of one pack on a cold cache download it once.
func TestRemoteConcurrentReadersDownloadOnce(t *testing.T) {
	f := openRemote(t, s3test.Start(t))
	ctx := context.Background()
	var keys []string
	var datas [][]byte
	b := f.s.NewBatch()
	for i := range 64 {
		d := noise(2000, uint64(i))
		if _, err := b.Add(ctx, Files, d); err != nil {
			t.Fatal(err)
		}
		keys, datas = append(keys, keyOf(Files, d)), append(datas, d)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if n := f.objects(t, "packs/"); n != 1 {
		t.Fatalf("%d packs, want 1", n)
	}
	other := f.server(t)
	before := f.remote.Requests()
	errs := make(chan error, len(keys))
	for i := range keys {
		go func() {
			got, err := other.Get(ctx, keys[i])
			if err == nil && !bytes.Equal(got, datas[i]) {
				err = errors.New("wrong bytes")
			}
			errs <- err
		}()
	}
	for range keys {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if r := f.remote.Requests().Sub(before); r.Gets != 1 {
		t.Fatalf("%d concurrent readers of one pack made %d GETs, want 1", len(keys), r.Gets)
	}
}
