package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

func record(id, run, thread string, createdAt int64) sbxdb.ArtifactRecord {
	return sbxdb.ArtifactRecord{ArtifactID: id, RunID: run, ThreadID: thread, Name: "file-" + id, MimeType: "text/plain",
		Size: 3, CreatedAt: createdAt}
}

func idsOf(recs []sbxdb.ArtifactRecord) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.ArtifactID)
	}
	return out
}

// recordsView is everything the artifact records of a test say.
type recordsView struct {
	Runs, Threads map[string][]sbxdb.ArtifactRecord
}

func viewRecords(t *testing.T, recs sbxdb.ArtifactRecords, runs, threads []string) recordsView {
	t.Helper()
	ctx := context.Background()
	v := recordsView{Runs: map[string][]sbxdb.ArtifactRecord{}, Threads: map[string][]sbxdb.ArtifactRecord{}}
	for _, r := range runs {
		l, err := recs.ListForRun(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		v.Runs[r] = l
	}
	for _, th := range threads {
		l, err := recs.ListForThread(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		v.Threads[th] = l
	}
	return v
}

func TestArtifactRecords(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	recs := f.db.ArtifactRecords()
	// Same createdAt: artifactId bytes decide (UTF-8 byte order, not
	// UTF-16 or locale order); then createdAt first, negative ones too.
	for _, r := range []sbxdb.ArtifactRecord{
		record("😀", "r1", "t1", 5), record("é", "r1", "t1", 5), record("a", "r1", "t1", 5), record("B", "r1", "t1", 5),
		record("late", "r1", "t2", 6), record("early", "r1", "t1", -7), record("other", "r2", "t1", 1),
	} {
		if err := recs.Save(ctx, r); err != nil {
			t.Fatalf("Save %q: %v", r.ArtifactID, err)
		}
	}
	list := func(run, thread string) []string {
		t.Helper()
		var l []sbxdb.ArtifactRecord
		var err error
		if run != "" {
			l, err = recs.ListForRun(ctx, run)
		} else {
			l, err = recs.ListForThread(ctx, thread)
		}
		if err != nil || l == nil {
			t.Fatalf("list %q %q: %v, %v", run, thread, l, err)
		}
		return idsOf(l)
	}
	for _, c := range []struct {
		run, thread string
		want        []string
	}{
		{"r1", "", []string{"early", "B", "a", "é", "😀", "late"}},
		{"r2", "", []string{"other"}},
		{"", "t1", []string{"early", "other", "B", "a", "é", "😀"}},
		{"", "t2", []string{"late"}},
		{"unknown", "", []string{}},
		{"", "unknown", []string{}},
	} {
		if got := list(c.run, c.thread); !slices.Equal(got, c.want) {
			t.Errorf("run %q thread %q: %v, want %v", c.run, c.thread, got, c.want)
		}
	}

	// Get returns the record, a copy; an unknown id is nil.
	got, err := recs.Get(ctx, "é")
	if want := record("é", "r1", "t1", 5); err != nil || got == nil || *got != want {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, want)
	}
	if got, err := recs.Get(ctx, "nope"); got != nil || err != nil {
		t.Errorf("Get of an unknown id = %+v, %v", got, err)
	}

	// Overwrite moves the record between runs, threads and times.
	moved := record("a", "r2", "t2", 0)
	moved.BlobKey, moved.SourceURL = testkit.FileKey(1), "https://example.com/a"
	if err := recs.Save(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if got := list("r1", ""); !slices.Equal(got, []string{"early", "B", "é", "😀", "late"}) {
		t.Errorf("r1 after moving a: %v", got)
	}
	if got := list("r2", ""); !slices.Equal(got, []string{"a", "other"}) {
		t.Errorf("r2 after moving a: %v", got)
	}
	if got, _ := recs.Get(ctx, "a"); got == nil || *got != moved {
		t.Errorf("Get after the overwrite = %+v", got)
	}

	// Delete, twice; DeleteForRun says how many.
	for range 2 {
		if err := recs.Delete(ctx, "B"); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := recs.DeleteForRun(ctx, "r1"); n != 4 || err != nil {
		t.Errorf("DeleteForRun(r1) = %d, %v; want 4", n, err)
	}
	if n, err := recs.DeleteForRun(ctx, "r1"); n != 0 || err != nil {
		t.Errorf("DeleteForRun(r1) again = %d, %v; want 0", n, err)
	}
	if got := list("", "t1"); !slices.Equal(got, []string{"other"}) {
		t.Errorf("t1 after the deletes: %v", got)
	}
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{}, "after artifact records")
}

func TestArtifactRecordRefused(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	recs := f.db.ArtifactRecords()
	kept := record("kept", "run", "thread", 1)
	kept.BlobKey = testkit.FileKey(7)
	if err := recs.Save(ctx, kept); err != nil {
		t.Fatal(err)
	}
	runs, threads := []string{"run", "r"}, []string{"thread", "t"}
	before := viewRecords(t, recs, runs, threads)
	with := func(fn func(*sbxdb.ArtifactRecord)) sbxdb.ArtifactRecord {
		r := record("kept", "r", "t", 2) // an overwrite of kept, were it valid
		fn(&r)
		return r
	}
	for _, c := range []struct {
		name string
		rec  sbxdb.ArtifactRecord
		code string
		in   string // what the message names
	}{
		{"empty id", with(func(r *sbxdb.ArtifactRecord) { r.ArtifactID, r.RunID = "", "" }), chain.CodeInvalidID, "artifactId"},
		{"NUL id", with(func(r *sbxdb.ArtifactRecord) { r.ArtifactID = "a\x00" }), chain.CodeInvalidID, "artifactId"},
		{"lone surrogate id", with(func(r *sbxdb.ArtifactRecord) { r.ArtifactID = "\xed\xa0\x80" }), chain.CodeInvalidID, "artifactId"},
		{"long id", with(func(r *sbxdb.ArtifactRecord) { r.ArtifactID = strings.Repeat("i", chain.MaxIDBytes+1) }), chain.CodeInvalidID, "artifactId"},
		{"run before thread", with(func(r *sbxdb.ArtifactRecord) { r.RunID, r.ThreadID = "", "" }), chain.CodeInvalidID, "runId"},
		{"thread", with(func(r *sbxdb.ArtifactRecord) { r.ThreadID, r.Size = "\xff", -1 }), chain.CodeInvalidID, "threadId"},
		{"blob key", with(func(r *sbxdb.ArtifactRecord) { r.BlobKey = "sandbox-files/sha256/xyz" }), chain.CodeInvalidEntry, "blobKey"},
		{"blob key that is no key", with(func(r *sbxdb.ArtifactRecord) { r.BlobKey = "docs//readme.md" }), chain.CodeInvalidEntry, "blobKey"},
		{"empty name", with(func(r *sbxdb.ArtifactRecord) { r.Name = "" }), chain.CodeInvalidEntry, "name"},
		{"empty mimeType", with(func(r *sbxdb.ArtifactRecord) { r.MimeType = "" }), chain.CodeInvalidEntry, "mimeType"},
		{"name not text", with(func(r *sbxdb.ArtifactRecord) { r.Name = "\xed\xa0\x80" }), chain.CodeInvalidEntry, "name"},
		{"sourceUrl NUL", with(func(r *sbxdb.ArtifactRecord) { r.SourceURL = "http://x/\x00" }), chain.CodeInvalidEntry, "sourceUrl"},
		{"long sourceUrl", with(func(r *sbxdb.ArtifactRecord) { r.SourceURL = strings.Repeat("u", engine.MaxArtifactTextBytes+1) }), chain.CodeInvalidEntry, "sourceUrl"},
		{"negative size", with(func(r *sbxdb.ArtifactRecord) { r.Size = -1 }), chain.CodeInvalidEntry, "size"},
		{"huge size", with(func(r *sbxdb.ArtifactRecord) { r.Size = chain.MaxSafeInteger + 1 }), chain.CodeInvalidEntry, "size"},
		{"createdAt", with(func(r *sbxdb.ArtifactRecord) { r.CreatedAt = -chain.MaxSafeInteger - 1 }), chain.CodeInvalidEntry, "createdAt"},
	} {
		err := recs.Save(ctx, c.rec)
		if chain.Code(err) != c.code || !strings.Contains(err.Error(), c.in) {
			t.Errorf("%s: Save = %v; want %s naming %s", c.name, err, c.code, c.in)
		}
	}
	for _, id := range []string{"", "\x00", "\xff"} {
		if _, err := recs.Get(ctx, id); chain.Code(err) != chain.CodeInvalidID {
			t.Errorf("Get(%q): %v", id, err)
		}
		if err := recs.Delete(ctx, id); chain.Code(err) != chain.CodeInvalidID {
			t.Errorf("Delete(%q): %v", id, err)
		}
		if _, err := recs.DeleteForRun(ctx, id); chain.Code(err) != chain.CodeInvalidID {
			t.Errorf("DeleteForRun(%q): %v", id, err)
		}
		if _, err := recs.ListForRun(ctx, id); chain.Code(err) != chain.CodeInvalidID {
			t.Errorf("ListForRun(%q): %v", id, err)
		}
		if _, err := recs.ListForThread(ctx, id); chain.Code(err) != chain.CodeInvalidID {
			t.Errorf("ListForThread(%q): %v", id, err)
		}
	}
	if diff := cmp.Diff(before, viewRecords(t, recs, runs, threads)); diff != "" {
		t.Errorf("refused calls changed the records (-before +after):\n%s", diff)
	}
	if got, _ := recs.Get(ctx, "kept"); got == nil || *got != kept {
		t.Errorf("kept = %+v", got)
	}
	// A blobKey need not be stored: check warns, a sweep runs.
	rep := checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{}, "a record naming bytes not stored")
	if w := findings(rep, sbxdb.FindingMissingBlob); len(w) != 1 || w[0].Severity != sbxdb.SeverityWarning {
		t.Errorf("check of a record naming bytes not stored: %v", rep.Findings)
	}
	if _, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil {
		t.Errorf("sweep with a record naming bytes not stored: %v", err)
	}
}

// TestArtifactRecordNamingAnObject: a record's blobKey may be a plain
// object's key (a TanStack host keeps artifacts/<runId>/<artifactId>); the
// object holds its own bytes, so the record holds nothing and check is
// clean, and a sweep keeps the object's bytes while the object lives.
func TestArtifactRecordNamingAnObject(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	key := "artifacts/run-1/a1"
	info, err := f.db.PutObject(ctx, key, strings.NewReader("report"), sbxdb.PutObjectOptions{Size: -1, ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	rec := record("a1", "run-1", "t", 1)
	rec.BlobKey = key
	if err := f.db.ArtifactRecords().Save(ctx, rec); err != nil {
		t.Fatalf("Save of a record naming an object: %v", err)
	}
	if got, err := f.db.ArtifactRecords().Get(ctx, "a1"); err != nil || got == nil || got.BlobKey != key {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "a record naming an object")
	if _, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil {
		t.Fatal(err)
	}
	r, _, err := f.db.OpenObject(ctx, key)
	if err != nil {
		t.Fatalf("the object's bytes after a sweep: %v (size %d)", err, info.Size)
	}
	r.Close()
}

// TestArtifactRecordBlocksFork: a thread with an artifact record is not an
// empty fork destination (SPEC §3.2).
func TestArtifactRecordBlocksFork(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	appendNaming(t, f.db, "src", "c1", testkit.ArtifactKeyOf([]byte("forked")))
	if err := f.db.ArtifactRecords().Save(ctx, record("a", "run", "dst", 1)); err != nil {
		t.Fatal(err)
	}
	l, err := f.db.AcquireWriter(ctx, "dst")
	if err != nil {
		t.Fatal(err)
	}
	in := chain.ForkInput{SourceThreadID: "src", SourceCheckpointID: "c1", DestinationThreadID: "dst", DestinationCheckpointID: "f1", Writer: l.Writer}
	if _, err := f.db.Fork(ctx, in); chain.Code(err) != chain.CodeForkDestinationNotEmpty || !strings.Contains(err.Error(), "artifact records") {
		t.Fatalf("Fork into a thread with an artifact record: %v", err)
	}
	if head, err := f.db.Head(ctx, "dst"); head != "" || err != nil {
		t.Errorf("head of dst = %q, %v", head, err)
	}
	if err := f.db.ArtifactRecords().Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Fork(ctx, in); err != nil {
		t.Errorf("Fork once the record is gone: %v", err)
	}
}

// TestObjectChurnCheck: after many puts, overwrites and deletes of objects
// and records, and sweeps between them, check finds nothing; a wrong hold
// count is found and repaired.
func TestObjectChurnCheck(t *testing.T) {
	f := newGCFixture(t)
	ctx := context.Background()
	recs := f.db.ArtifactRecords()
	n := testkit.Scale(t, 40, 400)
	for i := range n {
		body := []byte(strings.Repeat(string(rune('a'+i%7)), 10+i%5))
		key := "obj/" + string(rune('a'+i%9))
		switch i % 5 {
		case 0, 1:
			putObject(t, f.db, key, body, sbxdb.PutObjectOptions{ContentType: "text/plain", CustomMetadata: map[string]string{"i": "x"}})
		case 2:
			if err := f.db.DeleteObject(ctx, key); err != nil {
				t.Fatal(err)
			}
		case 3:
			putObject(t, f.db, testkit.ArtifactKeyOf(body), body, sbxdb.PutObjectOptions{})
			r := record(string(rune('A'+i%6)), "run"+string(rune('0'+i%3)), "t"+string(rune('0'+i%2)), int64(i%4))
			r.BlobKey = testkit.ArtifactKeyOf(body)
			if err := recs.Save(ctx, r); err != nil {
				t.Fatal(err)
			}
		case 4:
			if i%10 == 4 {
				if err := recs.Delete(ctx, string(rune('A'+i%6))); err != nil {
					t.Fatal(err)
				}
			} else if _, err := recs.DeleteForRun(ctx, "run"+string(rune('0'+i%3))); err != nil {
				t.Fatal(err)
			}
			if _, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep := checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after churn")
	if rep.Objects == 0 || rep.HeldKeys == 0 {
		t.Errorf("check counted %d objects, %d held keys", rep.Objects, rep.HeldKeys)
	}
	held := "" // the blob of an object: its count made wrong
	for _, o := range objectsOf(t, f.db) {
		if strings.HasPrefix(o.Key, "obj/") {
			held = chain.ArtifactPrefix + o.SHA256
		}
	}
	if held == "" {
		t.Fatal("the churn left no object")
	}
	if err := f.db.SetHoldCount(held, 9); err != nil {
		t.Fatal(err)
	}
	if err := f.db.SetHoldCount(testkit.FileKey(3), 1); err != nil {
		t.Fatal(err)
	}
	rep, err := f.db.Check(ctx, sbxdb.CheckStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := findings(rep, sbxdb.FindingHold); len(got) != 2 || rep.Clean() {
		t.Fatalf("check of two wrong hold counts: %v", rep.Findings)
	}
	rep, err = f.db.Check(ctx, sbxdb.CheckStoreOptions{Repair: true})
	if err != nil || rep.Repaired != 2 {
		t.Fatalf("repair = %+v, %v; want 2 repaired", rep, err)
	}
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after the repair")
}
