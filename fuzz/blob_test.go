package fuzz

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
)

// This file holds FuzzBlobFile and what the record, page, blob and restore
// targets share: a small store built once per process and kept in memory
// (blobFixture), copied into one directory per fuzz worker and reset
// before each exec by overwriting files rather than creating new
// directories; a time limit per exec; an allocation meter; and a check that
// no exec leaves the bbolt file lock behind.

var blobCtx = context.Background()

// blobNow is the fixed clock of every store the fuzz targets open, so that
// leases and upload times in the template never expire or drift.
var blobNow = time.UnixMilli(1_700_000_000_000)

// blobOptions are the engine options of every Open in these targets.
func blobOptions() *engine.Options {
	return &engine.Options{NoSync: true, Now: func() time.Time { return blobNow }, LockTimeout: 200 * time.Millisecond}
}

// The cas bucket names, documented in cas/format.go.
var (
	blobIndexBucket = []byte("cas_index")
	blobPacksBucket = []byte("cas_packs")
)

// blobFixture is the template store: a few checkpoints over three threads,
// small packed blobs (raw and zstd, several in one pack), an artifact, and
// two blobs over 4 MiB stored as large files (one zstd, one raw).
type blobFixture struct {
	files map[string][]byte // every file of the store directory, by slash path
	db    []byte            // files["sbx.db"]

	blobs     map[string][]byte // blob key → raw bytes
	keys      []string          // every blob key, sorted
	large     map[string]bool   // keys stored as large files
	fileOf    map[string]string // blob key → the file holding its frame
	keysIn    map[string][]string
	blobFiles []string // packs (by content) then large files (by path)
	packKeyOf map[string][]byte
	entries   map[string][]byte // cas_index values as stored

	// small file-namespace blobs for manifests: hello, text, random, empty.
	small []string

	cps      map[string]*chain.Checkpoint // every checkpoint ever appended
	cpIDs    []string                     // sorted
	records  map[string][]byte            // checkpoints bucket values of the stored ones
	threads  []string                     // every thread ever used, sorted
	heads    map[string]string
	folded   map[string]int64    // refs bucket as stored
	pending  map[string]int64    // refs_pending: the createdAt of each pending checkpoint, by id
	refKeys  map[string]bool     // every key any checkpoint ever named
	messages map[string][]string // transcripts saved, by thread
}

var blobFix struct {
	once sync.Once
	fx   *blobFixture
	err  error
}

// blobTemplate returns the process's template store, building it the
// first time.
func blobTemplate(tb testing.TB) *blobFixture {
	tb.Helper()
	blobFix.once.Do(func() { blobFix.fx, blobFix.err = blobBuild() })
	if blobFix.err != nil {
		tb.Fatalf("building the template store: %v", blobFix.err)
	}
	return blobFix.fx
}

func blobBuild() (fx *blobFixture, err error) {
	dir, err := os.MkdirTemp("", "sbxdb-fuzz-template-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	fx = &blobFixture{
		files: map[string][]byte{}, blobs: map[string][]byte{}, large: map[string]bool{},
		fileOf: map[string]string{}, keysIn: map[string][]string{}, packKeyOf: map[string][]byte{},
		entries: map[string][]byte{}, cps: map[string]*chain.Checkpoint{}, records: map[string][]byte{},
		heads: map[string]string{}, folded: map[string]int64{}, pending: map[string]int64{},
		refKeys: map[string]bool{}, messages: map[string][]string{},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var text, bigText bytes.Buffer
	for i := range 200 {
		fmt.Fprintf(&text, "line %d: the quick brown fox jumps over the lazy dog\n", i)
	}
	for i := 0; bigText.Len() <= cas.MaxPacked+100<<10; i++ {
		fmt.Fprintf(&bigText, "%08d %s\n", i, strings.Repeat("abcdefgh", i%7))
	}
	hello, empty, rnd := []byte("hello\n"), []byte{}, random(3000)
	bigRaw := random(cas.MaxPacked + 1)
	art := []byte("artifact bytes\n")

	db, err := engine.Open(dir, &engine.Options{NoSync: true, Now: func() time.Time { return blobNow }, RefFoldAfter: 2})
	if err != nil {
		return nil, err
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	// Four small blobs in one pack, then one pack each for the others.
	batch := db.Blobs().NewBatch()
	for _, b := range [][]byte{hello, text.Bytes(), rnd, empty} {
		res, err := batch.Add(blobCtx, cas.Files, b)
		if err != nil {
			batch.Close()
			return nil, err
		}
		fx.blobs[res.Key] = b
		fx.small = append(fx.small, res.Key)
	}
	err = batch.Commit(blobCtx)
	batch.Close()
	if err != nil {
		return nil, err
	}
	artKey := cas.Artifacts.Key(sha256.Sum256(art))
	fx.blobs[artKey] = art
	for _, kb := range []struct {
		key string
		b   []byte
	}{{artKey, art}, {testkit.FileKeyOf(bigText.Bytes()), bigText.Bytes()}, {testkit.FileKeyOf(bigRaw), bigRaw}} {
		key, b := kb.key, kb.b
		if err := db.Blobs().Put(blobCtx, key, b); err != nil {
			return nil, err
		}
		fx.blobs[key] = b
	}
	for k := range fx.blobs {
		fx.keys = append(fx.keys, k)
	}
	slices.Sort(fx.keys)

	file := func(path string, data []byte, exec bool) chain.Entry {
		return chain.Entry{Path: path, Kind: chain.KindFile, BlobKey: testkit.FileKeyOf(data), Size: int64(len(data)), Executable: exec}
	}
	msg := []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)}
	cps := []*chain.Checkpoint{
		{ID: "c1", ThreadID: "th-a", CreatedAt: 10, Reason: chain.ReasonAutomatic, SourceRunID: "run-1", Conversation: msg,
			Files: []chain.Entry{file("a.txt", hello, false), file("bin/run", rnd, true), {Path: "d", Kind: chain.KindDir},
				file("docs/text.md", text.Bytes(), false), {Path: "l", Kind: chain.KindSymlink, Target: "a.txt"}}},
		{ID: "c2", ThreadID: "th-a", ParentID: "c1", CreatedAt: 20, Reason: chain.ReasonNamed, Label: "two",
			Files:     []chain.Entry{file("a.txt", hello, false), file("big.txt", bigText.Bytes(), false)},
			Artifacts: []chain.Artifact{{ArtifactID: "art-1", Name: "report", MimeType: "text/plain", BlobKey: artKey, Size: int64(len(art)), CreatedAt: 15}}},
		{ID: "c3", ThreadID: "th-a", ParentID: "c2", CreatedAt: 20, Reason: chain.ReasonAutomatic,
			Files: []chain.Entry{{Path: "e", Kind: chain.KindDir}, file("empty", empty, false), file("raw.bin", bigRaw, false)}},
		{ID: "b1", ThreadID: "th-b", CreatedAt: 5, Reason: chain.ReasonAutomatic, Files: []chain.Entry{file("x", hello, false)}},
		{ID: "b2", ThreadID: "th-b", ParentID: "b1", CreatedAt: 6, Reason: chain.ReasonAutomatic, Files: []chain.Entry{file("y", rnd, false)}},
	}
	leases := map[string]chain.Writer{}
	for _, cp := range cps {
		w, ok := leases[cp.ThreadID]
		if !ok {
			l, err := db.AcquireWriter(blobCtx, cp.ThreadID)
			if err != nil {
				return nil, err
			}
			w, leases[cp.ThreadID] = l.Writer, l.Writer
		}
		if _, err := db.Append(blobCtx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: cp.ParentID, Writer: w}); err != nil {
			return nil, fmt.Errorf("append %s: %w", cp.ID, err)
		}
		fx.cps[cp.ID] = cp.Clone()
		fx.cpIDs = append(fx.cpIDs, cp.ID)
		for _, k := range cp.BlobKeys() {
			fx.refKeys[k] = true
		}
	}
	slices.Sort(fx.cpIDs)
	if err := db.DeleteHead(blobCtx, "th-b", "b2", leases["th-b"]); err != nil {
		return nil, err
	}
	fx.messages["th-a"] = []string{`{"role":"user"}`, `[1,2]`}
	fx.messages["th-c"] = nil
	for _, th := range []string{"th-a", "th-c"} {
		msgs := fx.messages[th]
		raw := []json.RawMessage{}
		for _, m := range msgs {
			raw = append(raw, json.RawMessage(m))
		}
		if err := db.SaveThread(blobCtx, th, raw); err != nil {
			return nil, err
		}
	}
	fx.threads = []string{"th-a", "th-b", "th-c"}
	err = db.Close()
	db = nil
	if err != nil {
		return nil, err
	}

	if err := blobNormalize(dir); err != nil {
		return nil, fmt.Errorf("normalizing the template: %w", err)
	}
	if err := blobReadTemplate(dir, fx); err != nil {
		return nil, err
	}
	return fx, nil
}

// blobNormalize makes the closed template's bbolt file the same in every
// process, so that a crasher's file offset means the same page in the
// next run: packs get fixed ids (files renamed, cas_packs keys and the
// index entries naming them rewritten, their checksums redone), and the
// file is compacted into a fresh one in one transaction (page allocation
// from the map freelist follows map order). Lease tokens stay random, at a
// fixed length.
func blobNormalize(dir string) error {
	packDir := filepath.Join(dir, "blobs", "packs")
	ents, err := os.ReadDir(packDir)
	if err != nil {
		return err
	}
	var names []string
	content := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(packDir, e.Name()))
		if err != nil {
			return err
		}
		names, content[e.Name()] = append(names, e.Name()), b
	}
	slices.SortFunc(names, func(a, b string) int { return bytes.Compare(content[a], content[b]) })
	newID := map[uint64]uint64{}
	for i, name := range names {
		var old uint64
		if _, err := fmt.Sscanf(name, "%016x.pack", &old); err != nil {
			return err
		}
		newID[old] = 0x1000000000000001 + uint64(i)
		if err := os.Rename(filepath.Join(packDir, name), filepath.Join(packDir, fmt.Sprintf("%016x.pack", newID[old]))); err != nil {
			return err
		}
	}
	path := filepath.Join(dir, engine.DBFile)
	bdb, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: time.Second, NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		packs := tx.Bucket(blobPacksBucket)
		stats := map[uint64][]byte{}
		packs.ForEach(func(k, v []byte) error {
			stats[binary.BigEndian.Uint64(k)] = bytes.Clone(v)
			return nil
		})
		for old, v := range stats {
			if err := packs.Delete(binary.BigEndian.AppendUint64(nil, old)); err != nil {
				return err
			}
			if err := packs.Put(binary.BigEndian.AppendUint64(nil, newID[old]), v); err != nil {
				return err
			}
		}
		index := tx.Bucket(blobIndexBucket)
		entries := map[string][]byte{}
		index.ForEach(func(k, v []byte) error {
			entries[string(k)] = bytes.Clone(v)
			return nil
		})
		for key, v := range entries {
			if v[0] == 1 { // a large blob: no pack id
				continue
			}
			old, n := binary.Uvarint(v[1:]) // a blob frame's or a block member's
			body := binary.AppendUvarint([]byte{v[0]}, newID[old])
			body = append(body, v[1+n:len(v)-8]...)
			if err := index.Put([]byte(key), append(body, blobEntrySum(key, body)...)); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	src, err := bolt.Open(path, 0o644, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := bolt.Open(path+".compact", 0o644, &bolt.Options{Timeout: time.Second, NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	err = bolt.Compact(dst, src, 0)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(path+".compact", path)
}

// blobFrameKeys returns the keys of the blobs the frame at the start of b
// holds (cas/format.go: one for a blob frame, the member table's for a
// block frame) and its stored size.
func blobFrameKeys(b []byte) (keys []string, stored uint64, err error) {
	version, codec, ns := b[4], b[5], cas.Namespace(b[6])
	raw, stored := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	if version == 1 {
		return []string{ns.Prefix() + hex.EncodeToString(b[24:56])}, stored, nil
	}
	payload := b[64 : 64+stored]
	if codec == 1 {
		d, _ := zstd.NewReader(nil)
		defer d.Close()
		if payload, err = d.DecodeAll(payload, nil); err != nil {
			return nil, stored, err
		}
	}
	if uint64(len(payload)) != raw {
		return nil, stored, fmt.Errorf("block of %d bytes, header says %d", len(payload), raw)
	}
	for range binary.LittleEndian.Uint32(b[24:]) {
		keys = append(keys, ns.Prefix()+hex.EncodeToString(payload[:32]))
		_, n := binary.Uvarint(payload[32:])
		payload = payload[32+n:]
	}
	return keys, stored, nil
}

// blobReadTemplate loads the closed template store into fx: its files, its
// raw bucket contents, and which frames each blob file holds.
func blobReadTemplate(dir string, fx *blobFixture) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "sbx.lock" || strings.HasPrefix(rel, "blobs/tmp/") {
			return nil
		}
		b, err := os.ReadFile(p)
		fx.files[rel] = b
		return err
	})
	if err != nil {
		return err
	}
	fx.db = fx.files[engine.DBFile]
	var packs, larges []string
	for name, b := range fx.files {
		switch {
		case strings.HasPrefix(name, "blobs/packs/"):
			packs = append(packs, name)
			for off := 0; off+64 <= len(b); {
				keys, stored, err := blobFrameKeys(b[off:])
				for _, key := range keys {
					if fx.blobs[key] == nil {
						err = fmt.Errorf("blob %s is not the template's", key)
					}
					fx.fileOf[key] = name
					fx.keysIn[name] = append(fx.keysIn[name], key)
				}
				if err != nil {
					return fmt.Errorf("pack %s: unexpected frame at %d: %v", name, off, err)
				}
				off += 64 + int(stored)
			}
		case strings.HasPrefix(name, "blobs/large/"):
			larges = append(larges, name)
			h := name[strings.LastIndexByte(name, '/')+1:]
			key := chain.FilePrefix + h
			if strings.HasPrefix(name, "blobs/large/artifacts/") {
				key = chain.ArtifactPrefix + h
			}
			fx.fileOf[key] = name
			fx.large[key] = true
			fx.keysIn[name] = []string{key}
		}
	}
	// Pack names are random; order them by content so that a seed picks
	// the same pack in every process.
	slices.SortFunc(packs, func(a, b string) int { return bytes.Compare(fx.files[a], fx.files[b]) })
	slices.Sort(larges)
	fx.blobFiles = append(packs, larges...)
	for _, k := range fx.keys {
		if fx.fileOf[k] == "" {
			return fmt.Errorf("blob %s is in no file", k)
		}
	}

	bdb, err := bolt.Open(filepath.Join(dir, engine.DBFile), 0o644, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer bdb.Close()
	return bdb.View(func(tx *bolt.Tx) error {
		tx.Bucket(blobIndexBucket).ForEach(func(k, v []byte) error {
			fx.entries[string(k)] = bytes.Clone(v)
			return nil
		})
		tx.Bucket(blobPacksBucket).ForEach(func(k, _ []byte) error {
			fx.packKeyOf[fmt.Sprintf("blobs/packs/%016x.pack", binary.BigEndian.Uint64(k))] = bytes.Clone(k)
			return nil
		})
		tx.Bucket(meta.BucketCheckpoints).ForEach(func(k, v []byte) error {
			fx.records[string(k)] = bytes.Clone(v)
			return nil
		})
		tx.Bucket(meta.BucketPendingRefs).ForEach(func(k, _ []byte) error {
			fx.pending[string(k[8:])] = int64(binary.BigEndian.Uint64(k) ^ 1<<63) // meta.PendingKey's layout
			return nil
		})
		if err := tx.Bucket(meta.BucketRefs).ForEach(func(k, v []byte) error {
			p, err := meta.Unseal(meta.BucketRefs, k, v)
			if err != nil {
				return err
			}
			n, _ := binary.Uvarint(p)
			fx.folded[string(k)] = int64(n)
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(meta.BucketHeads).ForEach(func(k, v []byte) error {
			p, err := meta.Unseal(meta.BucketHeads, k, v)
			fx.heads[string(k)] = string(p)
			return err
		})
	})
}

// blobStage writes every template file into dir (a worker's store).
func blobStage(tb testing.TB, fx *blobFixture, dir string) {
	tb.Helper()
	for name, b := range fx.files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// blobReset puts a worker's store back to db (the template's bbolt file or
// a damaged copy) over the template's blob files: sbx.db is rewritten,
// the file dirty (if any) and every blob file that is missing or has
// another size are rewritten from the template. Nothing is deleted, so the
// directory is reused for the whole run.
func blobReset(tb testing.TB, fx *blobFixture, dir string, db []byte, dirty string) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(dir, engine.DBFile), db, 0o644); err != nil {
		tb.Fatal(err)
	}
	for _, name := range fx.blobFiles {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if st, err := os.Stat(p); name != dirty && err == nil && st.Size() == int64(len(fx.files[name])) {
			continue
		}
		if err := os.WriteFile(p, fx.files[name], 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// blobRawUpdate runs fn in a write transaction on the closed store's bbolt
// file, opened as the engine opens it.
func blobRawUpdate(tb testing.TB, dir string, fn func(tx *bolt.Tx) error) {
	tb.Helper()
	bdb, err := bolt.Open(filepath.Join(dir, engine.DBFile), 0o644, &bolt.Options{
		Timeout: time.Second, NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		tb.Fatal(err)
	}
	err = bdb.Update(fn)
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		tb.Fatal(err)
	}
}

// blobLimit bounds the wall time of one exec.
const blobLimit = 5 * time.Second

// blobWithin runs fn. A panic in fn fails the test with its stack (and
// lets the other seeds run: fn must close what it opened with defer); an
// fn that takes longer than blobLimit crashes the process after printing
// every goroutine's stack: a hung exec must not go on holding the store
// while later execs, or the fuzzer's minimization, run in the same process,
// and a crash makes the fuzzer keep the input.
func blobWithin(t *testing.T, fn func()) {
	t.Helper()
	timer := time.AfterFunc(blobLimit, func() {
		buf := make([]byte, 4<<20)
		fmt.Fprintf(os.Stderr, "%s: exec took more than %v\n%s\n", t.Name(), blobLimit, buf[:runtime.Stack(buf, true)])
		panic(fmt.Sprintf("%s: exec took more than %v", t.Name(), blobLimit))
	})
	defer timer.Stop()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	fn()
}

// blobAllocs returns the bytes allocated on the heap while fn ran (the
// whole process, so it is an upper bound on fn's own).
func blobAllocs(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// blobLockFree reports whether nothing holds the bbolt file lock of the
// store in dir: an Open that failed or a Close must not leave it taken, or
// the store cannot be opened again until the process exits.
func blobLockFree(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, engine.DBFile))
	if err != nil {
		return
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("the store's file lock is still held after Close or a failed Open: %v", err)
		return
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// blobOpen opens the worker's store; an error that is not refusal of a
// damaged store (a lock left held by an earlier exec, say) fails.
func blobOpen(t *testing.T, dir string) (*engine.DB, error) {
	t.Helper()
	db, err := engine.Open(dir, blobOptions())
	if errors.Is(err, sbxdb.ErrLocked) {
		t.Errorf("Open: %v (a handle leaked by an earlier Open or Close?)", err)
	}
	return db, err
}

// blobCheckErr checks an error about key from the blob store: it must be
// a *sbxdb.BlobError naming key, matching ErrCorrupt or ErrNotFound.
func blobCheckErr(t *testing.T, what, key string, err error) {
	t.Helper()
	ce, ok := errors.AsType[*sbxdb.BlobError](err)
	switch {
	case !ok:
		t.Errorf("%s %s: error %v (%T) is not a *sbxdb.BlobError", what, key, err, err)
	case ce.Key != key:
		t.Errorf("%s %s: error names key %q: %v", what, key, ce.Key, err)
	case !errors.Is(err, sbxdb.ErrBlobCorrupt) && !errors.Is(err, sbxdb.ErrBlobNotFound):
		t.Errorf("%s %s: error is neither ErrCorrupt nor ErrNotFound: %v", what, key, err)
	case !strings.Contains(err.Error(), key):
		t.Errorf("%s %s: message does not name the key: %v", what, key, err)
	}
}

// blobRead reads key through Get and through Open+ReadAll and checks that
// each gives the exact bytes or a blob error naming the key. mustRead says
// the damage did not touch key: then both must succeed.
func blobRead(t *testing.T, db *engine.DB, key string, want []byte, mustRead bool) {
	t.Helper()
	got, err := db.Blobs().Get(blobCtx, key)
	switch {
	case err != nil && mustRead:
		t.Errorf("Get %s, which the damage did not touch: %v", key, err)
	case err != nil:
		blobCheckErr(t, "Get", key, err)
	case !bytes.Equal(got, want):
		t.Errorf("Get %s returned %d wrong bytes (want %d)", key, len(got), len(want))
	}
	r, err := db.Blobs().Open(blobCtx, key)
	if err == nil {
		got, err = io.ReadAll(r)
		r.Close()
	}
	switch {
	case err != nil && mustRead:
		t.Errorf("Open+ReadAll %s, which the damage did not touch: %v", key, err)
	case err != nil:
		blobCheckErr(t, "Open+ReadAll", key, err)
	case !bytes.Equal(got, want):
		t.Errorf("Open+ReadAll %s returned %d wrong bytes (want %d)", key, len(got), len(want))
	}
}

// blobEntrySum is the trailing xxhash64 of an index entry (cas/format.go):
// of the key, a zero byte and the entry's other bytes.
func blobEntrySum(key string, body []byte) []byte {
	d := xxhash.New()
	d.WriteString(key)
	d.Write([]byte{0})
	d.Write(body)
	return binary.LittleEndian.AppendUint64(nil, d.Sum64())
}

// blobMaxAlloc bounds the heap bytes one exec's reads may allocate: the
// largest blob is 4.1 MiB, read twice, and a zstd window is at most 64 MiB.
const blobMaxAlloc = 256 << 20

// FuzzBlobFile damages the blob store of a store holding packed blobs
// (raw and zstd, several frames in one pack), an artifact and two blobs
// over cas.MaxPacked stored as large files (one zstd, one raw), and reads
// every blob back with Blobs().Get and Blobs().Open + io.ReadAll.
//
// The damage (sel picks the target, op the kind): a pack or large file
// overwritten with data at off, truncated at off, removed, or extended by
// data; a cas_index value replaced by data, by data under a valid entry
// checksum (so the entry decoder runs on it), by the real entry with data
// spliced in at off and the checksum redone, or deleted; a cas_packs value
// replaced by data, or deleted (Open then removes the pack as an orphan).
//
// It proves that every read returns either the blob's exact bytes or a
// *sbxdb.BlobError naming the key that matches sbxdb.ErrBlobCorrupt or sbxdb.ErrBlobNotFound
// (never other bytes, never a panic), that blobs the damage did not touch
// still read back exactly, that an exec takes under 5 s and allocates
// under 256 MiB (a forged size cannot make a read allocate without bound),
// and that Open and Close leave no file lock behind. db.Check must run to
// the end whatever the damage (it is the tool that reports damage) and
// must not call a store clean whose files, index entries or pack records
// were removed or cut short; Head and List must not panic.
func FuzzBlobFile(f *testing.F) {
	fx := blobTemplate(f)
	dir := f.TempDir()
	blobStage(f, fx, dir)
	nFiles, nKeys := len(fx.blobFiles), len(fx.keys)
	ntargets := nFiles + nKeys + len(fx.packKeyOf)
	// Seeds: each kind of damage on each target.
	for sel := range ntargets {
		for op := range 4 {
			f.Add(uint8(sel), uint8(op), uint64(70), []byte{0xff, 0x00, 0x13})
		}
	}
	f.Add(uint8(0), uint8(0), uint64(8), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) // raw size in the first frame header
	f.Add(uint8(0), uint8(1), uint64(64), []byte{})                                              // cut after the first header
	// An index entry, sealed, claiming 2^60 raw bytes in a pack.
	f.Add(uint8(nFiles), uint8(1), uint64(0), binary.AppendUvarint(append(binary.AppendUvarint(binary.AppendUvarint([]byte{0}, 1), 0), 1), 1<<60))

	var dirty string // the blob file the last exec damaged
	f.Fuzz(func(t *testing.T, sel, op uint8, off uint64, data []byte) {
		blobReset(t, fx, dir, fx.db, dirty)
		dirty = ""
		target := int(sel) % ntargets
		touched := map[string]bool{}
		var what string
		gone := false // bytes or index records removed: Check must see it
		switch {
		case target < nFiles:
			name := fx.blobFiles[target]
			for _, k := range fx.keysIn[name] {
				touched[k] = true
			}
			p := filepath.Join(dir, filepath.FromSlash(name))
			size := uint64(len(fx.files[name]))
			dirty = name
			var err error
			switch op % 4 {
			case 0:
				what = fmt.Sprintf("%s overwritten at %d with %d bytes", name, off%(size+1), len(data))
				err = blobWriteAt(p, int64(off%(size+1)), data)
			case 1:
				what = fmt.Sprintf("%s truncated to %d", name, off%(size+1))
				err = os.Truncate(p, int64(off%(size+1)))
				gone = off%(size+1) < size
			case 2:
				what, gone = name+" removed", true
				err = os.Remove(p)
			case 3:
				what = fmt.Sprintf("%s extended by %d bytes", name, len(data))
				err = blobWriteAt(p, int64(size), data)
			}
			if err != nil {
				t.Fatal(err)
			}
		case target < nFiles+nKeys:
			key := fx.keys[target-nFiles]
			touched[key] = true
			var v []byte // nil: delete
			switch op % 4 {
			case 0:
				what, v = "index entry of "+key+" replaced", data
			case 1:
				what, v = "index entry of "+key+" replaced, checksum redone", append(bytes.Clone(data), blobEntrySum(key, data)...)
			case 2:
				what, gone = "index entry of "+key+" deleted", true
			case 3:
				real := fx.entries[key]
				body := bytes.Clone(real[:len(real)-8])
				at := int(off % uint64(len(body)+1))
				body = append(body[:at], append(bytes.Clone(data), body[min(at+len(data), len(body)):]...)...)
				what, v = fmt.Sprintf("index entry of %s spliced at %d, checksum redone", key, at), append(body, blobEntrySum(key, body)...)
			}
			blobRawUpdate(t, dir, func(tx *bolt.Tx) error {
				if v == nil {
					return tx.Bucket(blobIndexBucket).Delete([]byte(key))
				}
				return tx.Bucket(blobIndexBucket).Put([]byte(key), v)
			})
		default:
			name := fx.blobFiles[target-nFiles-nKeys] // packs come first
			pk := fx.packKeyOf[name]
			for _, k := range fx.keysIn[name] {
				touched[k] = true
			}
			dirty = name // a deleted stats record makes Open remove the pack
			if op%2 == 0 {
				what = "pack stats of " + name + " replaced"
			} else {
				what, gone = "pack stats of "+name+" deleted", true
			}
			blobRawUpdate(t, dir, func(tx *bolt.Tx) error {
				if op%2 == 0 {
					return tx.Bucket(blobPacksBucket).Put(pk, data)
				}
				return tx.Bucket(blobPacksBucket).Delete(pk)
			})
		}
		t.Log(what)

		blobWithin(t, func() {
			db, err := blobOpen(t, dir)
			if err != nil {
				t.Errorf("Open after damage to the blob store only: %v", err)
				return
			}
			defer func() {
				if err := db.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				blobLockFree(t, dir)
			}()
			n := blobAllocs(func() {
				for _, key := range fx.keys {
					if fx.large[key] && !touched[key] {
						// Reading 8 MiB each exec would be most of its cost;
						// the index entry must still be intact.
						if info, err := db.Blobs().Head(blobCtx, key); err != nil || info.Size != int64(len(fx.blobs[key])) {
							t.Errorf("Head %s, which the damage did not touch: %+v, %v", key, info, err)
						}
						continue
					}
					blobRead(t, db, key, fx.blobs[key], !touched[key])
				}
			})
			if n > blobMaxAlloc {
				t.Errorf("reading every blob allocated %d MiB", n>>20)
			}
			for _, key := range fx.keys {
				if _, err := db.Blobs().Head(blobCtx, key); err != nil {
					blobCheckErr(t, "Head", key, err)
				}
			}
			db.Blobs().List(blobCtx, "")
			// Check runs, whatever the damage, and reports what is gone.
			report, err := db.Check(blobCtx, sbxdb.CheckStoreOptions{})
			switch {
			case err != nil:
				recKnown(t, "check-aborts", "Check failed instead of reporting the damage (%s): %v", what, err)
			case gone && report.Clean():
				t.Errorf("Check found nothing wrong after %s: %+v", what, report)
			}
		})
	})
}

// blobWriteAt writes data at off in the existing file p.
func blobWriteAt(p string, off int64, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
