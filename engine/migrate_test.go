package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/vfs/faultfs"
	bolt "go.etcd.io/bbolt"
)

// format1Fixture is a store written by the format-1 engine running history
// (by TestWriteFormat1Fixture, in the commit that added the fixture); the
// migration test opens a copy and compares it with history replayed on the
// current format.
const format1Fixture = "testdata/format1"

// historyClock is the fixed clock of history: every lease and createdAt is
// the same in each replay.
func historyClock() time.Time { return time.UnixMilli(1_700_000_000_000) }

func historyOptions() *engine.Options {
	// A low fold threshold leaves some checkpoints folded and some pending.
	return &engine.Options{Now: historyClock, RefFoldAfter: 3}
}

// history builds a small store that uses every part of the layout:
// captured checkpoints with files, executables, symlinks, an empty dir and a
// non-ASCII name; an artifact; a conversation; a fork; retention; a
// transcript; an instance; a live lease; folded and pending references.
func history(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	db, err := engine.Open(dir, historyOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ws := t.TempDir()
	write(t, ws, "src/main.go", []byte("package main\n\nfunc main() {}\n"), 0o644)
	write(t, ws, "src/lib/util.go", []byte(strings.Repeat("// util\n", 300)), 0o644)
	write(t, ws, "run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)
	write(t, ws, "données/été.txt", []byte("non-ASCII\n"), 0o644)
	write(t, ws, "empty.txt", nil, 0o644)
	must(os.MkdirAll(filepath.Join(ws, "out/empty"), 0o755))
	must(os.Symlink("src/main.go", filepath.Join(ws, "main-link")))
	age(t, ws)

	l1, err := db.AcquireWriter(ctx, "t1")
	must(err)
	w1 := l1.Writer
	conv := []json.RawMessage{json.RawMessage(`{"role":"user","content":"build it"}`)}
	_, err = db.Capture(ctx, sbxdb.CaptureInput{Writer: w1, Dir: ws, ID: "c1", CreatedAt: 1000, Conversation: conv})
	must(err)
	write(t, ws, "src/main.go", []byte("package main\n\nfunc main() { println(1) }\n"), 0o644)
	conv = append(conv, json.RawMessage(`{"role":"assistant","content":"done"}`))
	_, err = db.Capture(ctx, sbxdb.CaptureInput{Writer: w1, Dir: ws, ID: "c2", CreatedAt: 2000, Label: "second", Reason: chain.ReasonNamed, Conversation: conv})
	must(err)
	art, err := db.PutArtifact(ctx, engine.ArtifactInput{ArtifactID: "a1", Name: "report.txt", MimeType: "text/plain", CreatedAt: 2500, Data: strings.NewReader("report")})
	must(err)
	c2, err := db.Get(ctx, "c2")
	must(err)
	c3 := c2.Clone()
	c3.ID, c3.ParentID, c3.CreatedAt, c3.Label, c3.SourceRunID = "c3", "c2", 3000, "", "run-3"
	c3.Reason = chain.ReasonAutomatic
	c3.Artifacts = []chain.Artifact{art}
	c3.Conversation = append(c3.Conversation, json.RawMessage(`[1,2,3]`))
	_, err = db.Append(ctx, chain.AppendInput{Checkpoint: c3, ExpectedHeadID: "c2", Writer: w1})
	must(err)
	must(db.SaveThread(ctx, "t1", c3.Conversation))

	l2, err := db.AcquireWriter(ctx, "t2")
	must(err)
	_, err = db.Fork(ctx, chain.ForkInput{SourceThreadID: "t1", SourceCheckpointID: "c2", DestinationThreadID: "t2", DestinationCheckpointID: "f1", CreatedAt: 4000, Writer: l2.Writer})
	must(err)
	must(l2.Release(ctx))

	l3, err := db.AcquireWriter(ctx, "t3")
	must(err)
	parent := ""
	for i := range 5 {
		cp := &chain.Checkpoint{
			ID: fmt.Sprintf("r%d", i), ThreadID: "t3", ParentID: parent, CreatedAt: int64(5000 + i), Reason: chain.ReasonAutomatic,
			Files: []chain.Entry{
				{Path: "a", Kind: chain.KindFile, BlobKey: c2.Files[0].BlobKey, Size: c2.Files[0].Size},
				{Path: fmt.Sprintf("d%d", i), Kind: chain.KindDir},
			},
			Conversation: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"turn":%d}`, i))},
		}
		_, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: parent, Writer: l3.Writer})
		must(err)
		parent = cp.ID
	}
	_, err = db.DeleteCheckpoints(ctx, "t3", 2, l3.Writer)
	must(err)
	must(db.DeleteHead(ctx, "t3", "r4", l3.Writer))
	must(l3.Release(ctx))

	must(db.Instances().Upsert(ctx, sbxdb.InstanceRecord{Key: "inst", Provider: "local", ProviderSandboxID: "sb-1", ThreadID: "t1", UpdatedAt: 1234}))
	// l1 stays held: the writers bucket keeps a live lease.
}

// storeView is everything a caller can read from a store.
type storeView struct {
	Threads     []string
	Heads       map[string]string
	Lists       map[string][]*chain.Checkpoint
	Refs        []chain.BlobRef
	Transcripts map[string][]json.RawMessage
	Instance    *sbxdb.InstanceRecord
	Writers     map[string]lease.State
}

func viewOf(t *testing.T, db *engine.DB) storeView {
	t.Helper()
	ctx := context.Background()
	v := storeView{Heads: map[string]string{}, Lists: map[string][]*chain.Checkpoint{}, Transcripts: map[string][]json.RawMessage{}}
	var err error
	if v.Threads, err = db.Threads(ctx); err != nil {
		t.Fatal(err)
	}
	for _, th := range v.Threads {
		if v.Heads[th], err = db.Head(ctx, th); err != nil {
			t.Fatal(err)
		}
		if v.Lists[th], err = db.List(ctx, th); err != nil {
			t.Fatal(err)
		}
		if v.Transcripts[th], err = db.LoadThread(ctx, th); err != nil {
			t.Fatal(err)
		}
	}
	if v.Refs, err = db.BlobReferences(ctx); err != nil {
		t.Fatal(err)
	}
	if v.Instance, err = db.Instances().Get(ctx, "inst"); err != nil {
		t.Fatal(err)
	}
	if v.Writers, err = db.Writers(ctx); err != nil {
		t.Fatal(err)
	}
	return v
}

// holdersUnrecorded returns v with no lease holder recorded, as the
// fixtures hold their leases: they were written before leases recorded
// their holder, and such a lease reads as held by an unknown holder,
// while a replay's leases are held by this process.
func holdersUnrecorded(v storeView) storeView {
	writers := make(map[string]lease.State, len(v.Writers))
	for id, s := range v.Writers {
		s.Holder = proc.Identity{}
		writers[id] = s
	}
	v.Writers = writers
	return v
}

// fixtureCopy copies the store fixture into a new directory and returns it.
func fixtureCopy(t *testing.T, fixture string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "old")
	if err := fstree.Copy(fixture, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// replayed writes history on the current format and opens it (closed when
// the test ends).
func replayed(t *testing.T) *engine.DB {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "replay")
	history(t, dir)
	db, err := engine.Open(dir, historyOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// failMigration opens the old store in dir writable with its migration's
// commit failing, and requires the failure.
func failMigration(t *testing.T, dir string) {
	t.Helper()
	ffs := faultfs.New(vfs.OS)
	ffs.FailNth(faultfs.Commit, 1, syscall.EIO)
	opts := historyOptions()
	opts.FS = ffs
	if _, err := engine.Open(dir, opts); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Open with a failing migration commit: %v; want EIO", err)
	}
}

func TestMigrateFormat1(t *testing.T) {
	ctx := context.Background()
	old := fixtureCopy(t, format1Fixture)

	// Read-only, a format-1 store is refused, saying what to do.
	if _, err := engine.Open(old, &engine.Options{ReadOnly: true}); !errors.Is(err, sbxdb.ErrFormat) || !strings.Contains(err.Error(), "sbxdb migrate") {
		t.Fatalf("read-only Open of a format-1 store: %v; want ErrFormat naming sbxdb migrate", err)
	}

	// A migration whose commit fails leaves format 1, whole.
	failMigration(t, old)
	if _, err := engine.Open(old, &engine.Options{ReadOnly: true}); !errors.Is(err, sbxdb.ErrFormat) {
		t.Fatalf("after a failed migration, read-only Open: %v; want ErrFormat (format 1 still)", err)
	}

	// A writable Open migrates; the store reads as the same history
	// written on the current format.
	db, err := engine.Open(old, historyOptions())
	if err != nil {
		t.Fatal(err)
	}
	got := viewOf(t, db)
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "migrated")
	gotTree := filepath.Join(t.TempDir(), "got")
	if _, err := db.Restore(ctx, "c3", gotTree, nil); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db2 := replayed(t)
	if diff := cmp.Diff(holdersUnrecorded(viewOf(t, db2)), got); diff != "" {
		t.Errorf("migrated store differs from the history replayed (-replayed +migrated):\n%s", diff)
	}
	restoreEqual(t, db2, "c3", filepath.Join(t.TempDir(), "want"), snapshot(t, gotTree))

	// Once migrated, read-only opens work.
	ro, err := engine.Open(old, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open after migration: %v", err)
	}
	ro.Close()
}

// format2Fixture is a store written by the format-2 engine (commit
// b39cfe5) running history: every manifest in chunks, and refs_pending's
// sequence counting its keys.
const format2Fixture = "testdata/format2"

func TestMigrateFormat2(t *testing.T) {
	ctx := context.Background()
	old := fixtureCopy(t, format2Fixture)
	db2 := replayed(t)
	want := holdersUnrecorded(viewOf(t, db2))

	// Read-only, a format-2 store is refused, saying what to do: its
	// pending set is keyed as format 3 no longer reads it.
	if _, err := engine.Open(old, &engine.Options{ReadOnly: true}); !errors.Is(err, sbxdb.ErrFormat) || !strings.Contains(err.Error(), "sbxdb migrate") {
		t.Fatalf("read-only Open of a format-2 store: %v; want ErrFormat naming sbxdb migrate", err)
	}

	// A migration whose commit fails leaves format 2.
	failMigration(t, old)
	from, to, err := engine.Migrate(ctx, old, historyOptions())
	if err != nil || from != 2 || to != engine.FormatVersion {
		t.Fatalf("Migrate = %d, %d, %v; want 2, %d (format 2 left by the failed one)", from, to, err, engine.FormatVersion)
	}
	db, err := engine.Open(old, historyOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if diff := cmp.Diff(want, viewOf(t, db)); diff != "" {
		t.Errorf("migrated store differs from the history replayed (-replayed +migrated):\n%s", diff)
	}
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "migrated from format 2")
	wantTree := filepath.Join(t.TempDir(), "want")
	if _, err := db2.Restore(ctx, "c3", wantTree, nil); err != nil {
		t.Fatal(err)
	}
	restoreEqual(t, db, "c3", filepath.Join(t.TempDir(), "got"), snapshot(t, wantTree))
}

// A store the format-2 engine (b39cfe5) wrote with two checkpoints pending
// ("c1", and "checkpoint-0002", an id longer than the 8 bytes of a format-3
// key's time): the upgrade rekeys them, and the counts and check come out
// right (the fixtures above have nothing pending, so they cannot show it).
func TestMigrateFormat2Pending(t *testing.T) {
	ctx := context.Background()
	dir := fixtureCopy(t, "testdata/format2-pending")
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, n, err := db.Pending(); n != 2 || err != nil {
		t.Fatalf("%d checkpoints pending after the upgrade (%v), want 2", n, err)
	}
	refs, err := db.BlobReferences(ctx)
	if err != nil || len(refs) == 0 {
		t.Fatalf("BlobReferences = %v, %v", refs, err)
	}
	rep := checkNoErrors(t, db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "upgraded")
	for _, f := range rep.Findings {
		if f.Kind == sbxdb.FindingPending {
			t.Errorf("upgraded: %s", f)
		}
	}
}

// A format-2 store whose pending set names a missing checkpoint still
// upgrades, so that check reports the damage and repair fixes it, as it
// would in format 3: refusing it would refuse every writable open, repair's
// included. With a fold due at the first commit, the commit goes on
// without the fold.
func TestMigrateFormat2DanglingPending(t *testing.T) {
	for _, foldAfter := range []int{3, 1} {
		t.Run(fmt.Sprint("RefFoldAfter=", foldAfter), func(t *testing.T) { danglingPending(t, foldAfter) })
	}
}

func danglingPending(t *testing.T, foldAfter int) {
	dir := fixtureCopy(t, format2Fixture)
	b, err := bolt.Open(filepath.Join(dir, engine.DBFile), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		k := []byte("ghost")
		return tx.Bucket(meta.BucketPendingRefs).Put(k, meta.Seal(meta.BucketPendingRefs, k, nil))
	})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	opts := historyOptions()
	opts.RefFoldAfter = foldAfter
	db, err := engine.Open(dir, opts)
	if err != nil {
		t.Fatalf("writable Open of a format-2 store with a dangling pending key: %v", err)
	}
	defer db.Close()
	damagedThenRepaired(t, db)
}

// format3Fixture is a store written by the format-3 engine (commit
// 28c0f7c) running history: the layout before plain objects and artifact
// records.
const format3Fixture = "testdata/format3"

// A format-3 store upgrades by gaining the buckets of objects, artifact
// records and their holds; a format-3 build, which would sweep the blobs
// they hold, refuses the format-4 store.
func TestMigrateFormat3(t *testing.T) {
	ctx := context.Background()
	old := fixtureCopy(t, format3Fixture)
	want := holdersUnrecorded(viewOf(t, replayed(t)))
	if _, err := engine.Open(old, &engine.Options{ReadOnly: true}); !errors.Is(err, sbxdb.ErrFormat) || !strings.Contains(err.Error(), "sbxdb migrate") {
		t.Fatalf("read-only Open of a format-3 store: %v; want ErrFormat naming sbxdb migrate", err)
	}
	failMigration(t, old)
	from, to, err := engine.Migrate(ctx, old, historyOptions())
	if err != nil || from != 3 || to != engine.FormatVersion {
		t.Fatalf("Migrate = %d, %d, %v; want 3, %d (format 3 left by the failed one)", from, to, err, engine.FormatVersion)
	}
	db, err := engine.Open(old, historyOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Its lease records the process that wrote the fixture as its holder.
	if diff := cmp.Diff(want, holdersUnrecorded(viewOf(t, db))); diff != "" {
		t.Errorf("migrated store differs from the history replayed (-replayed +migrated):\n%s", diff)
	}
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "migrated from format 3")
	// The new buckets work.
	if _, err := db.PutObject(ctx, "notes/a", strings.NewReader("note"), sbxdb.PutObjectOptions{Size: -1}); err != nil {
		t.Fatal(err)
	}
	if err := db.ArtifactRecords().Save(ctx, sbxdb.ArtifactRecord{ArtifactID: "a1", RunID: "r", ThreadID: "t1", Name: "n", MimeType: "m"}); err != nil {
		t.Fatal(err)
	}
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "migrated, with an object and a record")
}
