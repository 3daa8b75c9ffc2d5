package engine_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/gc"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// checkNoErrors runs Check and fails the test on every error finding
// (warnings, such as the dangling parents retention leaves, are allowed);
// when says at what point of the test.
func checkNoErrors(t *testing.T, db *engine.DB, opts sbxdb.CheckStoreOptions, when string) *sbxdb.CheckReport {
	t.Helper()
	rep, err := db.Check(context.Background(), opts)
	if err != nil {
		t.Fatalf("%s: check: %v", when, err)
	}
	for _, fd := range rep.Findings {
		if fd.Severity == sbxdb.SeverityError {
			t.Errorf("%s: check: %.300s", when, fd)
		}
	}
	return rep
}

// restoreEqual restores checkpoint id into out (which must not exist) and
// fails the test unless the tree is want.
func restoreEqual(t *testing.T, db *engine.DB, id, out string, want map[string]fstree.Node) {
	t.Helper()
	if _, err := db.Restore(context.Background(), id, out, nil); err != nil {
		t.Fatalf("restore %s: %v", id, err)
	}
	if diff := fstree.Diff(want, snapshot(t, out)); diff != nil {
		t.Fatalf("checkpoint %s restored wrong:\n%s", id, strings.Join(diff, "\n"))
	}
}

func findings(rep *sbxdb.CheckReport, kind string) []sbxdb.Finding {
	var out []sbxdb.Finding
	for _, f := range rep.Findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

func TestCheck(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	ws := filepath.Join(f.dir, "ws")
	var ids []string
	for i := range 4 {
		write(t, ws, "a.txt", []byte{byte('a' + i)}, 0o644)
		write(t, ws, "same.txt", []byte("same"), 0o644)
		ids = append(ids, f.capture(t, "th", ws).ID)
	}
	rep, err := f.db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
	if err != nil || !rep.Clean() || len(rep.Findings) != 0 || rep.Checkpoints != 4 || rep.BlobKeys != 5 || !rep.Verified {
		t.Fatalf("fresh store: %+v, %v", rep, err)
	}

	// Retention leaves a dangling parent: a note, still clean.
	if _, err := gc.KeepNewest(ctx, f.db, "th", 2); err != nil {
		t.Fatal(err)
	}
	rep, _ = f.db.Check(ctx, sbxdb.CheckStoreOptions{})
	if rep.Unreferenced != 2 { // a.txt's first two versions
		t.Fatalf("unreferenced after retention = %d, want 2", rep.Unreferenced)
	}
	if d := findings(rep, sbxdb.FindingDanglingParent); !rep.Clean() || len(d) != 1 || d[0].Subject != ids[2] || d[0].Severity != sbxdb.SeverityNote {
		t.Fatalf("after retention: %+v", rep.Findings)
	}

	// A count that drifted is found, and repaired.
	key := "sandbox-files/sha256/" + string(slices.Repeat([]byte("ab"), 32))
	f.db.SetRefCount(key, 3)
	cp, _ := f.db.Get(ctx, ids[3])
	f.db.SetRefCount(cp.Files[0].BlobKey, 7)
	rep, _ = f.db.Check(ctx, sbxdb.CheckStoreOptions{Repair: true})
	if r := findings(rep, sbxdb.FindingRefCount); rep.Clean() || len(r) != 2 || rep.Repaired == 0 {
		t.Fatalf("drifted counts: %+v", rep)
	}
	if rep, _ = f.db.Check(ctx, sbxdb.CheckStoreOptions{}); !rep.Clean() {
		t.Fatalf("after repair: %+v", rep.Findings)
	}

	// A head naming nothing, and a checkpoint off every chain.
	f.db.SetHead("ghost", "nobody")
	f.db.InsertRaw(&chain.Checkpoint{ID: "stray", ThreadID: "th", CreatedAt: 1, Reason: chain.ReasonAutomatic, Files: []chain.Entry{}})
	rep, _ = f.db.Check(ctx, sbxdb.CheckStoreOptions{})
	if h, o := findings(rep, sbxdb.FindingHead), findings(rep, sbxdb.FindingOffChain); rep.Clean() || len(h) != 1 || h[0].Subject != "ghost" || len(o) != 1 || o[0].Subject != "stray" {
		t.Fatalf("bad head and stray checkpoint: %+v", rep.Findings)
	}
	f.db.SetHead("ghost", "")

	// Damaged blob bytes are found only when blobs are read back.
	packs, _ := filepath.Glob(filepath.Join(f.dir, "store", engine.BlobDir, "packs", "*.pack"))
	for _, p := range packs {
		data, _ := os.ReadFile(p)
		data[len(data)-1] ^= 0xff
		os.WriteFile(p, data, 0o644)
	}
	if rep, _ = f.db.Check(ctx, sbxdb.CheckStoreOptions{}); !rep.Clean() {
		t.Fatalf("shallow check read blob bytes: %+v", rep.Findings)
	}
	rep, _ = f.db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
	b := findings(rep, sbxdb.FindingBlob)
	if rep.Clean() || len(b) == 0 {
		t.Fatalf("damaged packs not found: %+v", rep.Findings)
	}
	// Found by several readers at once, reported in key order.
	if !slices.IsSortedFunc(b, func(x, y sbxdb.Finding) int { return strings.Compare(x.Subject, y.Subject) }) {
		t.Errorf("blob findings out of key order: %+v", b)
	}
}

// Check finds a chunk no checkpoint uses and a chunk counted wrong, repair
// rebuilds the counts and deletes the orphan, and the store reads the same.
func TestCheckChunks(t *testing.T) {
	dir := t.TempDir()
	history(t, dir)
	db, err := engine.Open(dir, historyOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := viewOf(t, db)
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{}, "before")
	if err := db.DamageChunks(); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Check(context.Background(), sbxdb.CheckStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var unused, miscounted bool
	for _, f := range findings(rep, sbxdb.FindingChunk) {
		unused = unused || f.Subject == "fffffffffffffffe" && strings.Contains(f.Detail, "no checkpoint uses it")
		miscounted = miscounted || strings.Contains(f.Detail, "counted 0")
	}
	if !unused || !miscounted || rep.Clean() {
		t.Fatalf("check missed the damage: %v", rep.Findings)
	}
	rep, err = db.Check(context.Background(), sbxdb.CheckStoreOptions{Repair: true})
	if err != nil || rep.Repaired == 0 {
		t.Fatalf("repair: %v, %+v", err, rep)
	}
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{}, "after repair")
	if s, err := db.Stats(context.Background()); err != nil || s.Chunks != rep.Chunks {
		t.Errorf("after repair: %d chunks stored, %d used (%v)", s.Chunks, rep.Chunks, err)
	}
	if diff := cmp.Diff(before, viewOf(t, db)); diff != "" {
		t.Errorf("repair changed what the store reads:\n%s", diff)
	}
}

// A pending set whose weight or thread names are off is a warning (they
// only decide when folds run), and repair weighs it anew.
func TestCheckPendingWeight(t *testing.T) {
	ctx := context.Background()
	db, _ := onePending(t, func(pb *bolt.Bucket) error {
		k := meta.PendingKey(1, "c1")
		if err := pb.Put(k, meta.Seal(meta.BucketPendingRefs, k, []byte("other"))); err != nil {
			return err
		}
		return pb.SetSequence(7) // 1, but under any fold threshold: a write would fold past one
	})
	rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range rep.Findings {
		if f.Kind == sbxdb.FindingPending && f.Severity == sbxdb.SeverityWarning {
			got = append(got, f.Detail)
		}
	}
	if len(got) != 2 || !rep.Clean() || rep.Repaired != 2 {
		t.Fatalf("findings %q, clean %v, repaired %d; want the weight and the thread, as warnings, repaired", got, rep.Clean(), rep.Repaired)
	}
	rep = checkNoErrors(t, db, sbxdb.CheckStoreOptions{}, "after repair")
	for _, f := range rep.Findings {
		if f.Kind == sbxdb.FindingPending {
			t.Errorf("after repair: %s", f)
		}
	}
}

// damagedThenRepaired requires Check to find an error in db, and a repair
// to leave none.
func damagedThenRepaired(t *testing.T, db *engine.DB) {
	t.Helper()
	rep, err := db.Check(context.Background(), sbxdb.CheckStoreOptions{})
	if err != nil || rep.Clean() {
		t.Fatalf("check: clean %v, %v; want an error finding", rep.Clean(), err)
	}
	if _, err := db.Check(context.Background(), sbxdb.CheckStoreOptions{Repair: true}); err != nil {
		t.Fatal(err)
	}
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{}, "after repair")
}

// onePending writes a store holding one pending checkpoint, "c1" of thread
// "t" (createdAt 1, one stored blob), lets edit change the pending set with
// bbolt directly, and reopens the store (closed when the test ends). It
// returns the store and the thread's writer.
func onePending(t *testing.T, edit func(pb *bolt.Bucket) error) (*engine.DB, chain.Writer) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("a file")
	k := chain.FilePrefix + fmt.Sprintf("%x", sha256.Sum256(data))
	if err := db.Blobs().Put(ctx, k, data); err != nil {
		t.Fatal(err)
	}
	cp := &chain.Checkpoint{ID: "c1", ThreadID: "t", CreatedAt: 1, Reason: chain.ReasonAutomatic,
		Files: []chain.Entry{{Path: "a", Kind: chain.KindFile, BlobKey: k, Size: int64(len(data))}}}
	if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	b, err := bolt.Open(filepath.Join(dir, engine.DBFile), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error { return edit(tx.Bucket(meta.BucketPendingRefs)) })
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	if db, err = engine.Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, l.Writer
}

// A pending key whose time is not its checkpoint's is damage that check
// reports and repair fixes: the readers would count it while a delete,
// looking under the record's time, would not find it, so a check that
// called the store clean would let DeleteHead break the counts.
func TestCheckPendingKeyTime(t *testing.T) {
	ctx := context.Background()
	db, w := onePending(t, func(pb *bolt.Bucket) error {
		if err := pb.Delete(meta.PendingKey(1, "c1")); err != nil {
			return err
		}
		k := meta.PendingKey(0, "c1")
		return pb.Put(k, meta.Seal(meta.BucketPendingRefs, k, []byte("t")))
	})
	damagedThenRepaired(t, db)
	if err := db.DeleteHead(ctx, "t", "c1", w); err != nil {
		t.Fatalf("DeleteHead after repair: %v", err)
	}
	if refs, err := db.BlobReferences(ctx); len(refs) != 0 || err != nil {
		t.Fatalf("BlobReferences after DeleteHead = %v, %v; want none", refs, err)
	}
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{}, "after DeleteHead")
}
