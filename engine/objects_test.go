package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
)

// bigBody is a body past cas.MaxPacked, which is streamed into a file of
// its own; seed makes bodies differ.
func bigBody(seed byte) []byte {
	b := make([]byte, cas.MaxPacked+4096)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

// objectState is everything a failed object call must leave as it was:
// every listed object and blob, with upload times, and every file of the
// blob store.
type objectState struct {
	Objects []sbxdb.ObjectInfo
	Blobs   []cas.Info
	Files   []string
}

func objectsOf(t *testing.T, db *engine.DB) []sbxdb.ObjectInfo {
	t.Helper()
	var all []sbxdb.ObjectInfo
	cursor := ""
	for {
		page, next, err := db.ListObjects(context.Background(), "", cursor, sbxdb.MaxListObjects)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

func stateOf(t *testing.T, db *engine.DB) objectState {
	t.Helper()
	st := objectState{Objects: objectsOf(t, db)}
	var err error
	if st.Blobs, err = db.Blobs().List(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(db.Dir(), engine.BlobDir)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			st.Files = append(st.Files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// unchanged fails the test unless db's state is before.
func unchanged(t *testing.T, db *engine.DB, before objectState, when string) {
	t.Helper()
	if diff := cmp.Diff(before, stateOf(t, db)); diff != "" {
		t.Errorf("%s changed the store (-before +after):\n%s", when, diff)
	}
}

func readObject(t *testing.T, db *engine.DB, key string) ([]byte, sbxdb.ObjectInfo) {
	t.Helper()
	r, info, err := db.OpenObject(context.Background(), key)
	if err != nil {
		t.Fatalf("OpenObject(%q): %v", key, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return data, info
}

func putObject(t *testing.T, db *engine.DB, key string, data []byte, opts sbxdb.PutObjectOptions) sbxdb.ObjectInfo {
	t.Helper()
	if opts.Size == 0 && len(data) > 0 {
		opts.Size = int64(len(data))
	}
	info, err := db.PutObject(context.Background(), key, bytes.NewReader(data), opts)
	if err != nil {
		t.Fatalf("PutObject(%q): %v", key, err)
	}
	return info
}

func TestObjectKeys(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	before := stateOf(t, f.db)
	bad := map[string]bool{ // key → also a sbxdb.ErrInvalidBlobKey
		"": false, "/a": false, "a/": false, "a//b": false, ".": false, "..": false,
		"a/./b": false, "a/../b": false, "a\x00b": false, "\xff": false, "x/\xed\xa0\x80": false,
		strings.Repeat("k", sbxdb.MaxObjectKeyBytes+1):   false,
		chain.FilePrefix + "abc":                         true,
		chain.ArtifactPrefix + strings.Repeat("A", 64):   true,
		chain.FilePrefix + strings.Repeat("0", 64) + "/": true,
	}
	for key, blobShaped := range bad {
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, sbxdb.ErrInvalidObject) || errors.Is(err, sbxdb.ErrInvalidBlobKey) != blobShaped {
				t.Errorf("%s(%q) = %v; want ErrInvalidObject (and sbxdb.ErrInvalidBlobKey: %v)", op, key, err, blobShaped)
			}
		}
		_, err := f.db.PutObject(ctx, key, strings.NewReader("x"), sbxdb.PutObjectOptions{Size: -1})
		check("PutObject", err)
		_, _, err = f.db.OpenObject(ctx, key)
		check("OpenObject", err)
		_, err = f.db.StatObject(ctx, key)
		check("StatObject", err)
		check("DeleteObject", f.db.DeleteObject(ctx, key))
	}
	unchanged(t, f.db, before, "refused keys")

	// The edges that are plain keys.
	for _, key := range []string{strings.Repeat("k", sbxdb.MaxObjectKeyBytes), "sandbox-files/sha256", "sandbox-files/other",
		"é/😀", "a/.b/..c", "x"} {
		putObject(t, f.db, key, []byte(key), sbxdb.PutObjectOptions{})
		if got, _ := readObject(t, f.db, key); string(got) != key {
			t.Errorf("%q read back %q", key, got)
		}
	}
}

func TestPutObjectAttributes(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	before := stateOf(t, f.db)
	for _, opts := range []sbxdb.PutObjectOptions{
		{Size: -2},
		{Size: -1, ContentType: "text/plain\r\nX-Evil: 1"},
		{Size: -1, ContentType: " text/plain"},
		{Size: -1, ContentType: "text/\xff"},
		{Size: -1, ContentType: strings.Repeat("t", sbxdb.MaxObjectMetaBytes+1)},
		{Size: -1, CustomMetadata: map[string]string{"name\xff": "v"}},
		{Size: -1, CustomMetadata: map[string]string{"k": "value\xff"}},
		{Size: -1, CustomMetadata: map[string]string{"a": strings.Repeat("v", sbxdb.MaxObjectMetaBytes/2), "b": strings.Repeat("v", sbxdb.MaxObjectMetaBytes/2)}},
	} {
		if _, err := f.db.PutObject(ctx, "docs/x", strings.NewReader("body"), opts); !errors.Is(err, sbxdb.ErrInvalidObject) {
			t.Errorf("PutObject with %+.80v: %v; want ErrInvalidObject", opts, err)
		}
	}
	unchanged(t, f.db, before, "refused attributes")
	// Metadata names and values are any UTF-8 strings, kept as given.
	md := map[string]string{"runId": "r1", "": "nameless", "a b": " spaced\n", "nul\x00": "\x00", "ünï": "✓"}
	putObject(t, f.db, "docs/md", []byte("m"), sbxdb.PutObjectOptions{CustomMetadata: md})
	if _, i := readObject(t, f.db, "docs/md"); !maps.Equal(i.CustomMetadata, md) {
		t.Errorf("metadata read back %q; want %q", i.CustomMetadata, md)
	}
	// A content-addressed key keeps neither: they are not checked.
	info := putObject(t, f.db, testkit.ArtifactKeyOf([]byte("ca")), []byte("ca"), sbxdb.PutObjectOptions{ContentType: " x", CustomMetadata: map[string]string{"A": "\n"}})
	if info.ContentType != "" || info.CustomMetadata != nil {
		t.Errorf("a blob kept attributes: %+v", info)
	}
}

func TestPutObjectBlob(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{{"packed", []byte("small blob bytes")}, {"large", bigBody(1)}, {"empty", []byte{}}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newGCFixture(t)
			ctx := context.Background()
			key := testkit.FileKeyOf(tc.data)
			sum := sha256.Sum256(tc.data)

			// Refused bodies store nothing: another body, and the right
			// one with a wrong declared size (longer and shorter).
			before := stateOf(t, f.db)
			wrong := append(slices.Clone(tc.data), '!')
			for _, c := range []struct {
				body []byte
				size int64
			}{{wrong, -1}, {wrong, int64(len(wrong))}, {tc.data, int64(len(tc.data)) + 1}, {tc.data, max(int64(len(tc.data))-1, 0)}} {
				if c.size == int64(len(tc.data)) && bytes.Equal(c.body, tc.data) {
					continue // the empty body's "shorter" size is its own
				}
				_, err := f.db.PutObject(ctx, key, bytes.NewReader(c.body), sbxdb.PutObjectOptions{Size: c.size})
				if !errors.Is(err, sbxdb.ErrBlobKeyMismatch) {
					t.Errorf("PutObject of %d bytes declared %d under another key: %v; want ErrKeyMismatch", len(c.body), c.size, err)
				}
			}
			unchanged(t, f.db, before, "refused bodies")

			info := putObject(t, f.db, key, tc.data, sbxdb.PutObjectOptions{Size: int64(len(tc.data))})
			want := sbxdb.ObjectInfo{Key: key, Size: int64(len(tc.data)), Uploaded: f.clock.Load(), SHA256: hex.EncodeToString(sum[:])}
			if !cmp.Equal(info, want) {
				t.Errorf("PutObject = %+v, want %+v", info, want)
			}
			got, rinfo := readObject(t, f.db, key)
			if !bytes.Equal(got, tc.data) || !cmp.Equal(rinfo, want) {
				t.Errorf("OpenObject = %d bytes, %+v; want %d bytes, %+v", len(got), rinfo, len(tc.data), want)
			}
			// Again, chunked: nothing written, the upload time refreshed.
			files := stateOf(t, f.db).Files
			f.advance(time.Minute)
			info = putObject(t, f.db, key, tc.data, sbxdb.PutObjectOptions{Size: -1})
			if want.Uploaded = f.clock.Load(); !cmp.Equal(info, want) {
				t.Errorf("PutObject again = %+v, want %+v", info, want)
			}
			if after := stateOf(t, f.db).Files; !slices.Equal(files, after) {
				t.Errorf("a put of stored bytes wrote files: %v, then %v", files, after)
			}
			checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after blob puts")
		})
	}
}

// failingReader gives n bytes of a body and then fails.
type failingReader struct{ n int }

var errCut = errors.New("connection lost")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errCut
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = byte(r.n - i)
	}
	r.n -= k
	return k, nil
}

func TestPutObjectBodyCutShort(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	putObject(t, f.db, "kept", []byte("kept bytes"), sbxdb.PutObjectOptions{})
	before := stateOf(t, f.db)
	for _, n := range []int{0, 1000, cas.MaxPacked + 1, cas.MaxPacked + 300_000} {
		for _, key := range []string{"kept", "new/object", testkit.FileKeyOf([]byte("whatever"))} {
			_, err := f.db.PutObject(ctx, key, &failingReader{n: n}, sbxdb.PutObjectOptions{Size: -1})
			if !errors.Is(err, errCut) {
				t.Errorf("PutObject(%q) of a body cut after %d bytes: %v; want the reader's error", key, n, err)
			}
		}
	}
	unchanged(t, f.db, before, "bodies cut short")
	// A cancelled context stops a body too.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.db.PutObject(cctx, "new/object", bytes.NewReader(bigBody(2)), sbxdb.PutObjectOptions{Size: -1}); !errors.Is(err, context.Canceled) {
		t.Errorf("PutObject with a cancelled context: %v", err)
	}
	unchanged(t, f.db, before, "a cancelled put")
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after cut bodies")
}

func TestPlainObjects(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	md := map[string]string{"owner": "agent 7", "purpose": "résumé ✓"}
	v1 := []byte("# readme\n")
	info := putObject(t, f.db, "docs/readme.md", v1, sbxdb.PutObjectOptions{ContentType: "text/markdown; charset=utf-8", CustomMetadata: md})
	sum := sha256.Sum256(v1)
	want := sbxdb.ObjectInfo{Key: "docs/readme.md", Size: int64(len(v1)), Uploaded: f.clock.Load(), SHA256: hex.EncodeToString(sum[:]),
		ContentType: "text/markdown; charset=utf-8", CustomMetadata: maps.Clone(md)}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("PutObject (-want +got):\n%s", diff)
	}
	md["owner"] = "changed by the caller" // the store kept its own copy
	info.CustomMetadata["purpose"] = "changed"
	for _, get := range []func() sbxdb.ObjectInfo{
		func() sbxdb.ObjectInfo { _, i := readObject(t, f.db, "docs/readme.md"); return i },
		func() sbxdb.ObjectInfo {
			i, err := f.db.StatObject(ctx, "docs/readme.md")
			if err != nil {
				t.Fatal(err)
			}
			return i
		},
	} {
		if diff := cmp.Diff(want, get()); diff != "" {
			t.Errorf("read back (-want +got):\n%s", diff)
		}
	}
	// The bytes are a blob of their own, listed beside the object.
	if keys := keysOf(objectsOf(t, f.db)); !slices.Equal(keys, []string{"docs/readme.md", testkit.ArtifactKeyOf(v1)}) {
		t.Errorf("listing = %v", keys)
	}

	// A size other than declared is refused, for a plain key too.
	before := stateOf(t, f.db)
	if _, err := f.db.PutObject(ctx, "docs/readme.md", strings.NewReader("other"), sbxdb.PutObjectOptions{Size: 4}); !errors.Is(err, sbxdb.ErrBlobKeyMismatch) {
		t.Errorf("plain put of 5 bytes declared 4: %v", err)
	}
	unchanged(t, f.db, before, "a plain put of the wrong size")

	// Overwrite: the old bytes lose their holder; a second object of the
	// same bytes shares one blob.
	v2 := bigBody(3)
	putObject(t, f.db, "docs/readme.md", v2, sbxdb.PutObjectOptions{})
	putObject(t, f.db, "copy", v2, sbxdb.PutObjectOptions{})
	if got, i := readObject(t, f.db, "docs/readme.md"); !bytes.Equal(got, v2) || i.ContentType != "" || i.CustomMetadata != nil {
		t.Errorf("after the overwrite: %d bytes, %+v", len(got), i)
	}
	f.advance(time.Millisecond) // an immediate sweep takes blobs uploaded before now
	res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true})
	if err != nil || !slices.Equal(res.Deleted, []string{testkit.ArtifactKeyOf(v1)}) {
		t.Errorf("sweep after the overwrite deleted %v (%v); want the first bytes only", res.Deleted, err)
	}
	if err := f.db.DeleteObject(ctx, "docs/readme.md"); err != nil {
		t.Fatal(err)
	}
	if err := f.db.DeleteObject(ctx, "docs/readme.md"); err != nil {
		t.Errorf("deleting a missing object: %v", err)
	}
	if _, _, err := f.db.OpenObject(ctx, "docs/readme.md"); !errors.Is(err, sbxdb.ErrBlobNotFound) {
		t.Errorf("OpenObject of a deleted object: %v", err)
	}
	if res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil || len(res.Deleted) != 0 {
		t.Errorf("sweep while a copy holds the bytes deleted %v (%v)", res.Deleted, err)
	}
	if err := f.db.DeleteObject(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	f.advance(time.Millisecond)
	if res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil || !slices.Equal(res.Deleted, []string{testkit.ArtifactKeyOf(v2)}) {
		t.Errorf("sweep once nothing holds the bytes deleted %v (%v)", res.Deleted, err)
	}
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after plain objects")
}

func keysOf(infos []sbxdb.ObjectInfo) []string {
	out := []string{}
	for _, i := range infos {
		out = append(out, i.Key)
	}
	return out
}

// appendNaming appends to thread a checkpoint naming key as an artifact.
func appendNaming(t *testing.T, db *engine.DB, thread, id, key string) lease.Writer {
	t.Helper()
	ctx := context.Background()
	l, err := db.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	cp := &chain.Checkpoint{ID: id, ThreadID: thread, CreatedAt: 1, Reason: chain.ReasonAutomatic,
		Artifacts: []chain.Artifact{{ArtifactID: "a", Name: "a", MimeType: "text/plain", BlobKey: key, CreatedAt: 1}}}
	if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	return l.Writer
}

func TestDeleteBlobInUse(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	byCheckpoint, byObject, byRecord, free := []byte("cp"), []byte("object"), []byte("record"), []byte("free")
	for _, b := range [][]byte{byCheckpoint, byRecord, free} {
		putObject(t, f.db, testkit.ArtifactKeyOf(b), b, sbxdb.PutObjectOptions{})
	}
	w := appendNaming(t, f.db, "t", "c1", testkit.ArtifactKeyOf(byCheckpoint))
	putObject(t, f.db, "o", byObject, sbxdb.PutObjectOptions{})
	rec := sbxdb.ArtifactRecord{ArtifactID: "r", RunID: "run", ThreadID: "t2", BlobKey: testkit.ArtifactKeyOf(byRecord), Name: "r", MimeType: "text/plain", Size: 6}
	if err := f.db.ArtifactRecords().Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, f.db)
	for _, b := range [][]byte{byCheckpoint, byObject, byRecord} {
		if err := f.db.DeleteObject(ctx, testkit.ArtifactKeyOf(b)); !errors.Is(err, sbxdb.ErrBlobInUse) || errors.Is(err, cas.ErrPinned) {
			t.Errorf("DeleteObject of a blob %s holds: %v; want ErrBlobInUse", b, err)
		}
	}
	// A pin (a capture in flight) holds a blob too.
	batch := f.db.Blobs().NewBatch()
	if _, err := batch.Pin(ctx, []string{testkit.ArtifactKeyOf(free)}); err != nil {
		t.Fatal(err)
	}
	if err := f.db.DeleteObject(ctx, testkit.ArtifactKeyOf(free)); !errors.Is(err, sbxdb.ErrBlobInUse) || !errors.Is(err, cas.ErrPinned) {
		t.Errorf("DeleteObject of a pinned blob: %v; want ErrBlobInUse and cas.ErrPinned", err)
	}
	batch.Close()
	unchanged(t, f.db, before, "refused deletes")

	// Once nothing holds them, they go; a missing key is no error.
	if err := f.db.DeleteObject(ctx, testkit.ArtifactKeyOf(free)); err != nil {
		t.Fatal(err)
	}
	if err := f.db.DeleteHead(ctx, "t", "c1", w); err != nil {
		t.Fatal(err)
	}
	if err := f.db.DeleteObject(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	if err := f.db.ArtifactRecords().Delete(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{byCheckpoint, byObject, byRecord, free} {
		if err := f.db.DeleteObject(ctx, testkit.ArtifactKeyOf(b)); err != nil {
			t.Errorf("DeleteObject of %s once unused: %v", b, err)
		}
	}
	if st := stateOf(t, f.db); len(st.Objects) != 0 || len(st.Blobs) != 0 {
		t.Errorf("left after deleting everything: %+v", st)
	}
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after deletes")
}

// TestSweepKeepsHeldBlobs: a sweep with no window never deletes the bytes
// of a live object or artifact record; once they are gone, the next sweep
// deletes the bytes. The contract's references list neither.
func TestSweepKeepsHeldBlobs(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	obj, art := bigBody(4), []byte("artifact bytes")
	putObject(t, f.db, "out/report.bin", obj, sbxdb.PutObjectOptions{})
	putObject(t, f.db, testkit.ArtifactKeyOf(art), art, sbxdb.PutObjectOptions{})
	recs := f.db.ArtifactRecords()
	for _, id := range []string{"a1", "a2"} {
		if err := recs.Save(ctx, sbxdb.ArtifactRecord{ArtifactID: id, RunID: "run", ThreadID: "t", BlobKey: testkit.ArtifactKeyOf(art), Name: id, MimeType: "text/plain", Size: int64(len(art))}); err != nil {
			t.Fatal(err)
		}
	}
	f.advance(48 * time.Hour)
	sweep := func(want ...string) {
		t.Helper()
		res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Sort(want); !slices.Equal(res.Deleted, want) {
			t.Errorf("sweep deleted %v, want %v", res.Deleted, want)
		}
	}
	sweep()
	if refs, err := f.db.BlobReferences(ctx); err != nil || len(refs) != 0 {
		t.Errorf("BlobReferences = %v, %v; want none (objects and records are not checkpoints)", refs, err)
	}
	if got, _ := readObject(t, f.db, "out/report.bin"); !bytes.Equal(got, obj) {
		t.Error("the object's bytes changed")
	}
	if err := recs.Delete(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	sweep() // a2 still holds them
	if _, err := recs.DeleteForRun(ctx, "run"); err != nil {
		t.Fatal(err)
	}
	if err := f.db.DeleteObject(ctx, "out/report.bin"); err != nil {
		t.Fatal(err)
	}
	sweep(testkit.ArtifactKeyOf(art), testkit.ArtifactKeyOf(obj))
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after the sweeps")
}

// TestStatObjectRefreshes: a StatObject counts as an upload for the sweep's
// window, also when it comes after the sweep listed the blob as old.
func TestStatObjectRefreshes(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	data := []byte("present: the host skips its upload")
	key := testkit.FileKeyOf(data)
	putObject(t, f.db, key, data, sbxdb.PutObjectOptions{})
	f.advance(2 * time.Hour)
	info, err := f.db.StatObject(ctx, key)
	if err != nil || info.Uploaded != f.clock.Load() {
		t.Fatalf("StatObject = %+v, %v; want uploaded now (%d)", info, err, f.clock.Load())
	}
	f.advance(30 * time.Minute)
	if res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{OlderThan: time.Hour}); err != nil || len(res.Deleted) != 0 {
		t.Fatalf("sweep within the window of the stat deleted %v (%v)", res.Deleted, err)
	}

	// The sweep lists the blob as old; the stat then comes before the
	// deleting transaction, which sees it and keeps the blob.
	f.advance(2 * time.Hour)
	remove := f.db.OnPoint("sweep.marked", func() error {
		_, err := f.db.StatObject(ctx, key)
		return err
	})
	res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{OlderThan: time.Hour})
	remove()
	if err != nil || len(res.Deleted) != 0 {
		t.Fatalf("sweep with a stat after its listing deleted %v (%v)", res.Deleted, err)
	}
	if _, err := f.db.StatObject(ctx, testkit.FileKeyOf([]byte("never stored"))); !errors.Is(err, sbxdb.ErrBlobNotFound) {
		t.Errorf("StatObject of a missing blob: %v", err)
	}
	f.advance(2 * time.Hour)
	if res, err := f.db.Sweep(ctx, sbxdb.SweepOptions{OlderThan: time.Hour}); err != nil || !slices.Equal(res.Deleted, []string{key}) {
		t.Fatalf("sweep past the window deleted %v (%v)", res.Deleted, err)
	}
	if _, err := f.db.StatObject(ctx, key); !errors.Is(err, sbxdb.ErrBlobNotFound) {
		t.Errorf("StatObject of a swept blob: %v", err)
	}
}

func TestListObjects(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	var want []string
	for i := range 6 {
		b := []byte{byte('a' + i)}
		putObject(t, f.db, testkit.FileKeyOf(b), b, sbxdb.PutObjectOptions{})
		want = append(want, testkit.FileKeyOf(b))
	}
	for _, key := range []string{"a", "b/c", "b/d", "sandbox-files/z", "sandbox-artifacts", "zz", "é"} {
		putObject(t, f.db, key, []byte("bytes of "+key), sbxdb.PutObjectOptions{})
		want = append(want, key, testkit.ArtifactKeyOf([]byte("bytes of "+key)))
	}
	slices.Sort(want)
	if got := keysOf(objectsOf(t, f.db)); !slices.Equal(got, want) {
		t.Fatalf("listing:\n%v\nwant\n%v", got, want)
	}
	for _, limit := range []int{1, 2, 3, 7, len(want), len(want) + 1} {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			page, next, err := f.db.ListObjects(ctx, "", cursor, limit)
			if err != nil || len(page) > limit || pages > len(want) {
				t.Fatalf("limit %d: page of %d, %v", limit, len(page), err)
			}
			got = append(got, keysOf(page)...)
			if next == "" {
				break
			}
			if next != page[len(page)-1].Key {
				t.Fatalf("limit %d: cursor %q is not the page's last key", limit, next)
			}
			cursor = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: pages give %v", limit, got)
		}
	}
	prefixed := func(prefix, cursor string) []string {
		page, next, err := f.db.ListObjects(ctx, prefix, cursor, sbxdb.MaxListObjects)
		if err != nil || next != "" {
			t.Fatalf("ListObjects(%q, %q) = %v, %q", prefix, cursor, err, next)
		}
		return keysOf(page)
	}
	if got := prefixed("b/", ""); !slices.Equal(got, []string{"b/c", "b/d"}) {
		t.Errorf("prefix b/: %v", got)
	}
	if got := prefixed("b/", "b/c"); !slices.Equal(got, []string{"b/d"}) {
		t.Errorf("prefix b/ after b/c: %v", got)
	}
	if got := prefixed("sandbox-files/", ""); len(got) != 7 || got[6] != "sandbox-files/z" {
		t.Errorf("prefix sandbox-files/: %v", got)
	}
	if got := prefixed("", want[len(want)-1]); len(got) != 0 {
		t.Errorf("after the last key: %v", got)
	}
	if got := prefixed("", "a0"); got[0] != "b/c" {
		t.Errorf("after a0 (not a key): %v", got)
	}
	for _, limit := range []int{-1, sbxdb.MaxListObjects + 1} {
		if _, _, err := f.db.ListObjects(ctx, "", "", limit); !errors.Is(err, sbxdb.ErrInvalidObject) {
			t.Errorf("limit %d: %v; want ErrInvalidObject", limit, err)
		}
	}
	if page, next, err := f.db.ListObjects(ctx, "", "", 0); err != nil || page == nil || len(page) != 0 || next != "" {
		t.Errorf("limit 0: %v, %q, %v; want an empty page, no cursor", page, next, err)
	}
}

// TestOpenObjectDamaged: stored bytes that do not match their key are
// never returned as good: a packed blob fails at OpenObject, a large one at
// the end of its bytes, both as SANDBOX_SNAPSHOT_INVALID_BLOB.
func TestOpenObjectDamaged(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	small, large := []byte(strings.Repeat("packed bytes ", 20)), bigBody(5)
	putObject(t, f.db, "small", small, sbxdb.PutObjectOptions{})
	putObject(t, f.db, testkit.FileKeyOf(large), large, sbxdb.PutObjectOptions{})
	root := filepath.Join(f.db.Dir(), engine.BlobDir)
	packs, _ := filepath.Glob(filepath.Join(root, "packs", "*.pack"))
	larges, _ := filepath.Glob(filepath.Join(root, "large", "*", "*", "*"))
	if len(packs) != 1 || len(larges) != 1 {
		t.Fatalf("packs %v, large files %v", packs, larges)
	}
	flipLast(t, packs[0])
	flipLast(t, larges[0])
	if _, _, err := f.db.OpenObject(ctx, "small"); !errors.Is(err, chain.ErrInvalidBlob) || !errors.Is(err, sbxdb.ErrBlobCorrupt) || chain.Code(err) != chain.CodeInvalidBlob {
		t.Errorf("OpenObject of damaged packed bytes: %v; want INVALID_BLOB", err)
	}
	r, _, err := f.db.OpenObject(ctx, testkit.FileKeyOf(large))
	if err != nil {
		t.Fatalf("OpenObject of a damaged large blob: %v (its damage shows at the end)", err)
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); !errors.Is(err, chain.ErrInvalidBlob) || !errors.Is(err, sbxdb.ErrBlobCorrupt) {
		t.Errorf("reading damaged large bytes: %v; want INVALID_BLOB", err)
	}
}

// flipLast flips the last byte of a file.
func flipLast(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestObjectsReadOnly(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	data := []byte("kept")
	putObject(t, f.db, testkit.FileKeyOf(data), data, sbxdb.PutObjectOptions{})
	putObject(t, f.db, "plain", data, sbxdb.PutObjectOptions{})
	dir := f.db.Dir()
	f.db.Close()
	ro, err := engine.Open(dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.PutObject(ctx, "x", strings.NewReader("x"), sbxdb.PutObjectOptions{Size: -1}); !errors.Is(err, sbxdb.ErrReadOnly) {
		t.Errorf("PutObject read-only: %v", err)
	}
	if err := ro.DeleteObject(ctx, "plain"); !errors.Is(err, sbxdb.ErrReadOnly) {
		t.Errorf("DeleteObject read-only: %v", err)
	}
	if err := ro.ArtifactRecords().Save(ctx, sbxdb.ArtifactRecord{ArtifactID: "a", RunID: "r", ThreadID: "t", Name: "n", MimeType: "m"}); !errors.Is(err, sbxdb.ErrReadOnly) {
		t.Errorf("Save read-only: %v", err)
	}
	for _, key := range []string{testkit.FileKeyOf(data), "plain"} {
		if got, _ := readObject(t, ro, key); !bytes.Equal(got, data) {
			t.Errorf("read-only read of %q: %q", key, got)
		}
		if _, err := ro.StatObject(ctx, key); err != nil {
			t.Errorf("read-only StatObject(%q): %v", key, err)
		}
	}
	if len(objectsOf(t, ro)) != 3 {
		t.Errorf("read-only listing: %v", keysOf(objectsOf(t, ro)))
	}
}
