package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
	bolt "go.etcd.io/bbolt"
)

// snapshot reads a tree for comparison.
func snapshot(t *testing.T, root string) map[string]fstree.Node {
	t.Helper()
	tree, err := fstree.Read(root)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func write(t *testing.T, root, rel string, data []byte, mode fs.FileMode) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
}

// age sets every mtime under root an hour back, so the stat cache may trust
// them (its racy-clean window is seconds).
func age(t *testing.T, root string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink == 0 {
			os.Chtimes(p, old, old)
		}
		return nil
	})
}

type captureFixture struct {
	db  *engine.DB
	dir string
	w   *lease.Lease
}

func newCaptureFixture(t *testing.T) *captureFixture {
	t.Helper()
	dir := t.TempDir()
	db, err := engine.Open(filepath.Join(dir, "store"), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w, err := db.AcquireWriter(context.Background(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	return &captureFixture{db: db, dir: dir, w: w}
}

func (f *captureFixture) capture(t *testing.T, ws string) *sbxdb.CaptureResult {
	t.Helper()
	res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	return res
}

func (f *captureFixture) restore(t *testing.T, id string) string {
	t.Helper()
	out := filepath.Join(f.dir, "restored-"+id)
	if _, err := f.db.Restore(context.Background(), id, out, nil); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return out
}

// edgeTree writes the hand-made edge cases and many small files (2,000, or
// 10,000 under SBXDB_LONG=1) of 500 distinct contents; it returns how many.
func edgeTree(t *testing.T, root string) (many int) {
	write(t, root, "empty.txt", nil, 0o644)
	write(t, root, "a/b/c/d/e/f/g/h/i/j/deep.txt", []byte("deep"), 0o644)
	write(t, root, "docs/résumé.md", []byte("non-ascii"), 0o644)
	write(t, root, "src/日本/readme.md", []byte("日本語"), 0o644)
	write(t, root, "bin/run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)
	write(t, root, "docs/run.sh.txt", []byte("#!/bin/sh\necho hi\n"), 0o644)                 // the same blob, not executable
	write(t, root, "big/blob.bin", bytes.Repeat([]byte("0123456789abcdef"), 300_000), 0o644) // 4.8 MB: streamed
	many = testkit.Scale(t, 2_000, 10_000)
	for i := range many {
		write(t, root, fmt.Sprintf("many/f%05d", i), []byte(fmt.Sprint("file ", i%500)), 0o644) // 500 distinct contents
	}
	os.MkdirAll(filepath.Join(root, "empty/nested/dir"), 0o755)
	os.MkdirAll(filepath.Join(root, "emptytop"), 0o755)
	os.Symlink("../docs/résumé.md", filepath.Join(root, "a/link"))
	os.Symlink("many", filepath.Join(root, "dirlink"))
	return many
}

func TestCaptureRestoreRoundTrip(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	many := edgeTree(t, ws)
	res := f.capture(t, ws)
	s := res.Stats
	if s.Files != many+7 || s.Symlinks != 2 || s.Dirs != 2 || s.FilesRead != s.Files || s.Unchanged != 0 {
		t.Fatalf("stats %+v", s)
	}
	if s.Deduplicated < many-500 {
		t.Fatalf("only %d deduplicated", s.Deduplicated)
	}
	out := f.restore(t, res.Checkpoint.ID)
	if diff := fstree.Diff(snapshot(t, ws), snapshot(t, out)); diff != nil {
		t.Fatalf("restored tree differs:\n%s", strings.Join(diff, "\n"))
	}
}

func TestCaptureManifest(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "hello.txt", []byte("hello"), 0o644)
	write(t, ws, "tool", []byte("x"), 0o700)
	write(t, ws, ".env.local", []byte("KEY=1"), 0o644)
	write(t, ws, "node_modules/x/index.js", []byte("x"), 0o644)
	write(t, ws, ".git/HEAD", []byte("ref"), 0o644)
	write(t, ws, ".gitkeep", nil, 0o644)
	os.MkdirAll(filepath.Join(ws, "only-excluded/.git"), 0o755)
	cp := f.capture(t, ws).Checkpoint
	want := []chain.Entry{
		{Path: ".gitkeep", Kind: chain.KindFile, BlobKey: cas.Files.Key(sha256.Sum256(nil)), Size: 0},
		{Path: "hello.txt", Kind: chain.KindFile, BlobKey: "sandbox-files/sha256/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", Size: 5},
		// A directory whose only child is excluded is recorded as empty.
		{Path: "only-excluded", Kind: chain.KindDir},
		{Path: "tool", Kind: chain.KindFile, BlobKey: cas.Files.Key(sha256.Sum256([]byte("x"))), Size: 1, Executable: true},
	}
	if diff := cmp.Diff(want, cp.Files); diff != "" {
		t.Fatalf("manifest (-want +got):\n%s", diff)
	}
	if cp.ParentID != "" || cp.Reason != chain.ReasonAutomatic || cp.ThreadID != "t1" || cp.ID == "" {
		t.Fatalf("header %+v", cp)
	}
	// The next capture is appended on it.
	if next := f.capture(t, ws).Checkpoint; next.ParentID != cp.ID {
		t.Fatalf("parent %q, want %q", next.ParentID, cp.ID)
	}
}

func TestCaptureStatCache(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	for i := range 200 {
		write(t, ws, fmt.Sprintf("d%d/f%03d.txt", i%7, i), []byte(strings.Repeat(fmt.Sprint(i), 100)), 0o644)
	}
	// Fresh files are racily clean: read at the first and second capture.
	first := f.capture(t, ws)
	if first.Stats.FilesRead != 200 {
		t.Fatalf("first: %+v", first.Stats)
	}
	// Unchanged stats, but mtimes inside the racy window of the capture
	// that cached them: read again, not trusted.
	if racy := f.capture(t, ws); racy.Stats.FilesRead != 200 || racy.Stats.Unchanged != 0 {
		t.Fatalf("capture right after the first trusted racy entries: %+v", racy.Stats)
	}
	age(t, ws) // changes ctime: read once more
	f.capture(t, ws)
	unchanged := f.capture(t, ws)
	if unchanged.Stats.FilesRead != 0 || unchanged.Stats.BytesRead != 0 || unchanged.Stats.Unchanged != 200 {
		t.Fatalf("unchanged capture: %+v", unchanged.Stats)
	}
	if diff := cmp.Diff(first.Checkpoint.Files, unchanged.Checkpoint.Files); diff != "" {
		t.Fatalf("unchanged tree, different manifest:\n%s", diff)
	}
	// An edit that keeps size and mtime is still caught (ctime moves).
	p := filepath.Join(ws, "d0/f000.txt")
	st, _ := os.Stat(p)
	write(t, ws, "d0/f000.txt", bytes.Repeat([]byte("Z"), int(st.Size())), 0o644)
	os.Chtimes(p, st.ModTime(), st.ModTime())
	// A file replaced by a directory, and a removed file.
	os.Remove(filepath.Join(ws, "d1/f001.txt"))
	write(t, ws, "d1/f001.txt/inner.txt", []byte("now a dir"), 0o644)
	os.Remove(filepath.Join(ws, "d2/f002.txt"))
	edited := f.capture(t, ws)
	if edited.Stats.FilesRead != 2 || edited.Stats.Files != 199 {
		t.Fatalf("edited capture: %+v", edited.Stats)
	}
	out := f.restore(t, edited.Checkpoint.ID)
	if diff := fstree.Diff(snapshot(t, ws), snapshot(t, out)); diff != nil {
		t.Fatalf("restored tree differs:\n%s", strings.Join(diff, "\n"))
	}
	// A blob the cache vouches for but the store lost is read again.
	key := unchanged.Checkpoint.Files[5].BlobKey
	if err := f.db.Blobs().Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	age(t, ws)
	f.capture(t, ws)
	again := f.capture(t, ws)
	if again.Stats.FilesRead != 0 {
		t.Fatalf("after the refill: %+v", again.Stats)
	}
	if _, err := f.db.Blobs().Head(context.Background(), key); err != nil {
		t.Fatalf("lost blob not stored again: %v", err)
	}
}

func TestCaptureSecretsAreZeroed(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "config", []byte("x=secret"), 0o644)
	big := append(bytes.Repeat([]byte("a"), 3<<20), []byte("token=secret!")...)
	write(t, ws, "big", big, 0o644)
	res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Secrets: []string{"secret", ""}})
	if err != nil {
		t.Fatal(err)
	}
	out := f.restore(t, res.Checkpoint.ID)
	if got, _ := os.ReadFile(filepath.Join(out, "config")); string(got) != "x=\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("config restored as %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "big")); !bytes.HasSuffix(got, []byte("token=\x00\x00\x00\x00\x00\x00!")) {
		t.Fatalf("big file tail %q", got[len(got)-20:])
	}
	// Captured without the secret, the same tree is read again, not taken
	// from a cache made under other secrets.
	age(t, ws)
	plain := f.capture(t, ws)
	if plain.Stats.FilesRead != 2 || plain.Checkpoint.Files[1].BlobKey == res.Checkpoint.Files[1].BlobKey {
		t.Fatalf("capture without secrets: %+v", plain.Stats)
	}
}

func TestCaptureRefusals(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "ok", []byte("ok"), 0o644)
	for _, tc := range []struct {
		name  string
		setup func(ws string)
		in    func(in *sbxdb.CaptureInput)
		want  error
	}{
		{"missing workspace", nil, func(in *sbxdb.CaptureInput) { in.Dir = filepath.Join(f.dir, "nope") }, chain.ErrInvalidWorkspace},
		{"workspace is a file", nil, func(in *sbxdb.CaptureInput) { in.Dir = filepath.Join(ws, "ok") }, chain.ErrInvalidWorkspace},
		{"escaping symlink", func(ws string) { os.Symlink("../../etc/passwd", filepath.Join(ws, "esc")) }, nil, chain.ErrUnsupportedEntry},
		{"symlink escaping on paper through a loop", func(ws string) { os.Symlink("a/../..", filepath.Join(ws, "a")) }, nil, chain.ErrUnsupportedEntry},
		{"absolute symlink", func(ws string) { os.Symlink("/etc/passwd", filepath.Join(ws, "abs")) }, nil, chain.ErrUnsupportedEntry},
		{"symlink escaping through another", func(ws string) { // each stays inside on its own
			os.Symlink(".", filepath.Join(ws, "a"))
			os.Symlink("a/..", filepath.Join(ws, "b"))
		}, nil, chain.ErrUnsupportedEntry},
		{"backslash name", func(ws string) { os.WriteFile(filepath.Join(ws, `a\b`), nil, 0o644) }, nil, chain.ErrUnsupportedEntry},
		{"drive-like root name", func(ws string) { write(t, ws, "C:/x", nil, 0o644) }, nil, chain.ErrInvalidWorkspace},
		{"lost lease", nil, func(in *sbxdb.CaptureInput) { in.Writer.Fence++ }, chain.ErrWriterLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ws")
			write(t, dir, "ok", []byte("ok"), 0o644)
			if tc.setup != nil {
				tc.setup(dir)
			}
			in := sbxdb.CaptureInput{Writer: f.w.Writer, Dir: dir}
			if tc.in != nil {
				tc.in(&in)
			}
			head, _ := f.db.Head(ctx, "t1")
			_, err := f.db.Capture(ctx, in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Capture = %v, want %v", err, tc.want)
			}
			if now, _ := f.db.Head(ctx, "t1"); now != head {
				t.Fatal("a refused capture moved the head")
			}
		})
	}
	// The caller may allow escaping symlinks.
	dir := filepath.Join(t.TempDir(), "ws")
	write(t, dir, "ok", []byte("ok"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "abs"))
	if _, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: dir, AllowEscapingSymlinks: true}); err != nil {
		t.Fatal(err)
	}
}

// damage helpers for the corruption tests.
func onlyPack(t *testing.T, db *engine.DB) string {
	t.Helper()
	ents, _ := filepath.Glob(filepath.Join(db.Blobs().Dir(), "packs", "*.pack"))
	if len(ents) != 1 {
		t.Fatalf("%d packs", len(ents))
	}
	return ents[0]
}

func TestRestoreRefusesDamagedBlobs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, db *engine.DB, cp *chain.Checkpoint)
		want   error
	}{
		{"flipped byte", func(t *testing.T, db *engine.DB, cp *chain.Checkpoint) {
			p := onlyPack(t, db)
			b, _ := os.ReadFile(p)
			b[len(b)-3] ^= 1
			os.WriteFile(p, b, 0o644)
		}, chain.ErrInvalidBlob},
		{"truncated pack", func(t *testing.T, db *engine.DB, cp *chain.Checkpoint) {
			p := onlyPack(t, db)
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()/2)
		}, chain.ErrInvalidBlob},
		{"deleted blob", func(t *testing.T, db *engine.DB, cp *chain.Checkpoint) {
			db.Blobs().Delete(ctx, cp.Files[len(cp.Files)-1].BlobKey)
		}, chain.ErrMissingBlob},
		{"flipped large blob", func(t *testing.T, db *engine.DB, cp *chain.Checkpoint) {
			filepath.WalkDir(filepath.Join(db.Blobs().Dir(), "large"), func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					b[len(b)/2] ^= 1
					os.WriteFile(p, b, 0o644)
				}
				return nil
			})
		}, chain.ErrInvalidBlob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCaptureFixture(t)
			ws := filepath.Join(f.dir, "ws")
			r := rand.New(rand.NewPCG(1, 2))
			for i := range 50 {
				write(t, ws, fmt.Sprintf("f%02d", i), []byte(strings.Repeat(fmt.Sprint(r.Int()), 50)), 0o644)
			}
			write(t, ws, "zz-large", bytes.Repeat([]byte("large!"), 400_000), 0o644)
			cp := f.capture(t, ws).Checkpoint
			f.db.Blobs().Close() // drop cached pack handles
			tc.damage(t, f.db, cp)
			out := filepath.Join(f.dir, "out", "restored")
			_, err := f.db.Restore(ctx, cp.ID, out, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Restore = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), "sandbox-files/sha256/") {
				t.Fatalf("error names no key: %v", err)
			}
			// Nothing is left behind, not even the parent Restore created.
			if _, err := os.Lstat(filepath.Join(f.dir, "out")); !os.IsNotExist(err) {
				t.Fatalf("restore left %s behind: %v", filepath.Join(f.dir, "out"), err)
			}
		})
	}
}

func TestRestoreTargetRules(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "a", []byte("a"), 0o644)
	cp := f.capture(t, ws).Checkpoint
	// An empty directory is fine; a non-empty one or a file is refused.
	empty := filepath.Join(f.dir, "empty")
	os.Mkdir(empty, 0o755)
	if _, err := f.db.Restore(ctx, cp.ID, empty, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Restore(ctx, cp.ID, empty, nil); !errors.Is(err, chain.ErrInvalidWorkspace) || !strings.Contains(err.Error(), empty) {
		t.Fatalf("restore into non-empty dir: %v", err)
	}
	if _, err := f.db.Restore(ctx, cp.ID, filepath.Join(empty, "a"), nil); !errors.Is(err, chain.ErrInvalidWorkspace) {
		t.Fatalf("restore onto a file: %v", err)
	}
	if _, err := f.db.Restore(ctx, "nope", filepath.Join(f.dir, "x"), nil); !errors.Is(err, chain.ErrCheckpointNotFound) {
		t.Fatalf("restore of unknown checkpoint: %v", err)
	}
}

// Manifests crafted through Append (which is blob-agnostic) must never make
// Restore write outside its target.
func TestRestorePathSafety(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	key := cas.Files.Key(sha256.Sum256([]byte("evil")))
	if err := f.db.Blobs().Put(ctx, key, []byte("evil")); err != nil {
		t.Fatal(err)
	}
	file := func(p string) chain.Entry { return chain.Entry{Path: p, Kind: chain.KindFile, BlobKey: key, Size: 4} }
	link := func(p, target string) chain.Entry {
		return chain.Entry{Path: p, Kind: chain.KindSymlink, Target: target}
	}
	for i, tc := range []struct {
		name  string
		files []chain.Entry
		want  error
	}{
		{"drive prefix", []chain.Entry{file("C:evil")}, chain.ErrInvalidPath},
		{"escaping symlink", []chain.Entry{link("l", "../../../../tmp/sbxdb-evil")}, chain.ErrUnsupportedEntry},
		{"absolute symlink", []chain.Entry{link("l", "/tmp/sbxdb-evil")}, chain.ErrUnsupportedEntry},
		{"nested escaping symlink", []chain.Entry{link("a/b/l", "../../../x")}, chain.ErrUnsupportedEntry},
		{"symlink escaping through another", []chain.Entry{link("a", "."), link("b", "a/..")}, chain.ErrUnsupportedEntry},
		{"symlink escaping through a chain", []chain.Entry{link("x", "y/.."), link("y", "z"), link("z", "q/..")}, chain.ErrUnsupportedEntry},
		{"symlink escaping on paper through a loop", []chain.Entry{link("a", "a/../..")}, chain.ErrUnsupportedEntry},
		{"excluded path", []chain.Entry{file(".git/hooks/post-checkout")}, chain.ErrInvalidPath},
		{"size mismatch", []chain.Entry{{Path: "f", Kind: chain.KindFile, BlobKey: key, Size: 5}}, chain.ErrInvalidBlob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head, _ := f.db.Head(ctx, "t1")
			cp := &chain.Checkpoint{ID: fmt.Sprint("crafted-", i), ThreadID: "t1", ParentID: head, CreatedAt: int64(i + 1),
				Reason: chain.ReasonAutomatic, Files: tc.files}
			if _, err := f.db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: f.w.Writer}); err != nil {
				t.Fatalf("Append: %v", err)
			}
			parent := t.TempDir()
			_, err := f.db.Restore(ctx, cp.ID, filepath.Join(parent, "out"), nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Restore = %v, want %v", err, tc.want)
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 0 {
				t.Fatalf("restore left %d entries in the parent", len(ents))
			}
		})
	}
	// The store itself refuses the worst shapes before any restore sees them.
	head, _ := f.db.Head(ctx, "t1")
	for i, files := range [][]chain.Entry{
		{file("../evil")}, {file("/abs")}, {file("a/../../evil")},
		{link("l", "x"), file("l/beneath")}, {file("f"), file("f/beneath")},
	} {
		cp := &chain.Checkpoint{ID: fmt.Sprint("refused-", i), ThreadID: "t1", ParentID: head, CreatedAt: 1, Reason: chain.ReasonAutomatic, Files: files}
		if _, err := f.db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: f.w.Writer}); !errors.Is(err, chain.ErrInvalidEntry) {
			t.Fatalf("Append of %v = %v, want INVALID_ENTRY", files, err)
		}
	}
}

func TestArtifacts(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	a, err := f.db.PutArtifact(ctx, engine.ArtifactInput{ArtifactID: "a1", Name: "report.txt", MimeType: "text/plain",
		CreatedAt: 5, Data: strings.NewReader("api key: hunter2"), Secrets: []string{"hunter2"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "api key: \x00\x00\x00\x00\x00\x00\x00"
	if a.BlobKey != cas.Artifacts.Key(sha256.Sum256([]byte(want))) || a.Size != int64(len(want)) {
		t.Fatalf("artifact %+v", a)
	}
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "x", []byte("x"), 0o644)
	res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Artifacts: []chain.Artifact{a}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Checkpoint.ID
	got, data, err := f.db.ReadArtifact(ctx, "t1", id, "a1")
	if err != nil || string(data) != want || got != a {
		t.Fatalf("ReadArtifact = %+v %q %v", got, data, err)
	}
	for _, tc := range []struct {
		thread, cp, artifact string
		want                 error
	}{
		{"t1", "nope", "a1", chain.ErrMissingCheckpointArtifact},
		{"t1", id, "nope", chain.ErrMissingCheckpointArtifact},
		{"t2", id, "a1", chain.ErrForeignCheckpointArtifact},
	} {
		if _, _, err := f.db.ReadArtifact(ctx, tc.thread, tc.cp, tc.artifact); !errors.Is(err, tc.want) {
			t.Errorf("ReadArtifact(%s, %s, %s) = %v, want %v", tc.thread, tc.cp, tc.artifact, err, tc.want)
		}
	}
	f.db.Blobs().Delete(ctx, a.BlobKey)
	if _, _, err := f.db.ReadArtifact(ctx, "t1", id, "a1"); !errors.Is(err, chain.ErrInvalidArtifactBytes) {
		t.Fatalf("ReadArtifact of a deleted blob = %v", err)
	}
	if _, err := f.db.PutArtifact(ctx, engine.ArtifactInput{ArtifactID: "", Name: "n", MimeType: "m", Data: strings.NewReader("")}); !errors.Is(err, chain.ErrInvalidEntry) {
		t.Fatalf("PutArtifact without id = %v", err)
	}
}

// TestCaptureOverADamagedIndexEntry: a capture looks up every key its stat
// cache holds. A damaged index entry for the blob of a file deleted since
// must not fail it (nor every capture after it), and one for a file still
// there makes the capture read the file again and store its bytes anew.
func TestCaptureOverADamagedIndexEntry(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	ws := filepath.Join(root, "ws")
	gone, kept := []byte("a file deleted before the second capture\n"), []byte("a file kept\n")
	write(t, ws, "gone.txt", gone, 0o644)
	write(t, ws, "kept.txt", kept, 0o644)
	write(t, ws, "other.txt", []byte("unchanged\n"), 0o644)
	age(t, ws)
	capture := func(id string) (*sbxdb.CaptureResult, error) {
		db, err := engine.Open(dir, &engine.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		w, err := db.AcquireWriter(ctx, "t1")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Release(ctx)
		return db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws, ID: id, CreatedAt: 1})
	}
	if _, err := capture("cp1"); err != nil {
		t.Fatal(err)
	}
	boltUpdate(t, dir, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("cas_index"))
		for _, d := range [][]byte{gone, kept} {
			k := []byte(cas.Files.Key(sha256.Sum256(d)))
			v := bytes.Clone(b.Get(k))
			v[len(v)-1] ^= 0x80 // the entry's checksum
			if err := b.Put(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err := os.Remove(filepath.Join(ws, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	res, err := capture("cp2")
	if err != nil {
		t.Fatalf("capture over damaged entries: %v", err)
	}
	if s := res.Stats; s.Files != 2 || s.FilesRead != 1 || s.BlobsNew != 1 || s.Unchanged != 1 {
		t.Fatalf("stats %+v; want kept.txt read and stored again, other.txt unchanged", s)
	}
	if _, err := capture("cp3"); err != nil {
		t.Fatalf("the capture after: %v", err)
	}
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, err := db.Blobs().Get(ctx, cas.Files.Key(sha256.Sum256(kept))); err != nil || !bytes.Equal(got, kept) {
		t.Fatalf("kept.txt's blob after the capture: %v", err)
	}
}
