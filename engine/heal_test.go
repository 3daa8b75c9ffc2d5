package engine_test

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// healFiles is a workspace with small files (one block), packed frames of
// their own (zstd and raw) and a large file.
func healFiles() map[string][]byte {
	return map[string][]byte{
		"a.txt":     corruptText(3000, 21),
		"src/b.go":  corruptText(5000, 22),
		"src/c.go":  corruptText(2000, 23),
		"mid.txt":   corruptText(80<<10, 24),
		"mid.bin":   corruptNoise(70<<10, 25),
		"big.bin":   corruptNoise(1<<20+4096, 26),
		"gone.txt":  corruptText(4000, 27), // only the first checkpoint has it
		"gone2.bin": corruptNoise(90<<10, 28),
	}
}

// healCapture captures ws into thread t1 as checkpoint id.
func healCapture(t *testing.T, db *engine.DB, ws, id string) {
	t.Helper()
	w, err := db.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	if _, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws, ID: id}); err != nil {
		t.Fatalf("capture %s: %v", id, err)
	}
}

// healRestore restores id and compares it with want.
func healRestore(t *testing.T, db *engine.DB, id string, want string) error {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	if _, err := db.Restore(ctx, id, out, nil); err != nil {
		return err
	}
	if diff := cmp.Diff(snapshot(t, want), snapshot(t, out)); diff != "" {
		t.Errorf("restore of %s differs (-want +got):\n%s", id, diff)
	}
	return nil
}

func packNames(t *testing.T, dir string) []string {
	t.Helper()
	ps, _ := filepath.Glob(filepath.Join(dir, engine.BlobDir, "packs", "*.pack"))
	for i, p := range ps {
		ps[i] = filepath.Base(p)
	}
	return ps
}

// flipNewestMeta damages the newest bbolt meta page of the closed store:
// bbolt opens it at the transaction before.
func flipNewestMeta(t *testing.T, dir string) {
	t.Helper()
	pageSize, _ := boltPages(t, dir, meta.BucketCheckpoints)
	t0, t1 := metaTxids(t, dir, pageSize)
	newer := int64(0)
	if t1 > t0 {
		newer = int64(pageSize)
	}
	testkit.FlipByte(t, filepath.Join(dir, engine.DBFile), newer+16+16)
}

func hasFinding(rep *sbxdb.CheckReport, kind, subjectPart string) bool {
	return slices.ContainsFunc(rep.Findings, func(f sbxdb.Finding) bool {
		return f.Kind == kind && strings.Contains(f.Subject, subjectPart)
	})
}

// newHealStore opens a store in a temporary directory with healFiles
// captured as cp1 on thread t, and returns it, its directory and the
// workspace.
func newHealStore(t *testing.T) (dir, ws string, db *engine.DB) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "store")
	ws = filepath.Join(root, "ws")
	for p, b := range healFiles() {
		write(t, ws, p, b, 0o644)
	}
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	healCapture(t, db, ws, "cp1")
	return dir, ws, db
}

// A gc that repacks writes a new pack holding every live blob, commits, and
// removes the old pack. With the newest meta page damaged, the database
// opens at the transaction before that commit: its index names the old
// pack, which is gone, and knows nothing of the new one. The writable open
// must not delete the new pack (the only copy of every live blob); it goes
// to quarantine, check reports it, and check --repair indexes it again, so
// the checkpoint gc kept restores byte for byte.
func TestMetaFallbackQuarantinesNewerPack(t *testing.T) {
	dir, ws, db := newHealStore(t)
	os.Remove(filepath.Join(ws, "gone.txt"))
	os.Remove(filepath.Join(ws, "gone2.bin"))
	healCapture(t, db, ws, "cp2") // writes no new blob
	before := packNames(t, dir)
	res, err := db.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Repack.Packs == 0 || len(res.Sweep.Deleted) == 0 {
		t.Fatalf("gc did not sweep and repack: %+v", res)
	}
	db.CloseAsCrashed() // a clean Close would commit once more
	after := packNames(t, dir)
	if len(after) != 1 || slices.Contains(before, after[0]) {
		t.Fatalf("packs before gc %v, after %v: want one new pack", before, after)
	}
	newPack := after[0]

	flipNewestMeta(t, dir)
	db, err = engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	quarantined := filepath.Join(dir, engine.BlobDir, "quarantine", newPack)
	if _, err := os.Stat(quarantined); err != nil {
		t.Fatalf("the new pack is not in quarantine: %v", err)
	}
	if got := db.Blobs().QuarantinedAtOpen(); !slices.Equal(got, []string{filepath.Join("quarantine", newPack)}) {
		t.Errorf("QuarantinedAtOpen = %v, want the new pack", got)
	}
	rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasFinding(rep, sbxdb.FindingQuarantine, newPack) || !hasFinding(rep, sbxdb.FindingMetaPage, "") {
		t.Errorf("check does not report the quarantined pack and the meta page: %v", rep.Findings)
	}
	if rep.Clean() {
		t.Errorf("check finds the store clean while its index names a pack that is gone: %v", rep.Findings)
	}

	rep, err = db.Check(ctx, sbxdb.CheckStoreOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reindexed == 0 || rep.ReindexedFiles != 1 || len(rep.Dropped) != 0 || len(rep.Left) != 0 {
		t.Errorf("repair: reindexed %d blobs from %d files, dropped %v, left %v", rep.Reindexed, rep.ReindexedFiles, rep.Dropped, rep.Left)
	}
	if _, err := os.Stat(quarantined); !os.IsNotExist(err) {
		t.Errorf("the quarantined pack is still there after the repair: %v", err)
	}
	rep, err = db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
	if err != nil || !rep.Clean() || hasFinding(rep, sbxdb.FindingQuarantine, "") || hasFinding(rep, sbxdb.FindingMetaPage, "") {
		t.Errorf("check after the repair: %v, %v", rep.Findings, err)
	}
	if err := healRestore(t, db, "cp2", ws); err != nil {
		t.Fatalf("restoring the checkpoint gc kept: %v", err)
	}
}

// A pack no index entry names is, after an ordinary crash (no meta-page
// fallback, every indexed pack present), a batch's or repack's leftover:
// Open removes it, quarantining nothing. After a fallback the same file is
// quarantined; a repair finds every blob in it indexed and intact, stores
// nothing and removes the file.
func TestCrashLeftoverPack(t *testing.T) {
	dir, ws, db := newHealStore(t)
	db.Close()
	live := packNames(t, dir)
	if len(live) != 1 {
		t.Fatalf("packs %v, want one", live)
	}
	// A leftover: the same frames under a name cas_packs does not list.
	leftover := "00000000deadbeef.pack"
	leave := func() {
		b, err := os.ReadFile(filepath.Join(dir, engine.BlobDir, "packs", live[0]))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, engine.BlobDir, "packs", leftover), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("ordinary crash", func(t *testing.T) {
		leave()
		db, err := engine.Open(dir, &engine.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if got := packNames(t, dir); !slices.Equal(got, live) {
			t.Errorf("packs after open %v, want %v", got, live)
		}
		if q := db.Blobs().QuarantinedAtOpen(); len(q) != 0 {
			t.Errorf("quarantined %v after an ordinary crash", q)
		}
		if _, err := os.Stat(filepath.Join(dir, engine.BlobDir, "quarantine")); !os.IsNotExist(err) {
			t.Errorf("a quarantine directory exists: %v", err)
		}
	})
	t.Run("after a meta-page fallback", func(t *testing.T) {
		leave()
		flipNewestMeta(t, dir) // the last transaction is a lease release
		db, err := engine.Open(dir, &engine.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if q := db.Blobs().QuarantinedAtOpen(); !slices.Equal(q, []string{filepath.Join("quarantine", leftover)}) {
			t.Errorf("QuarantinedAtOpen = %v, want the leftover", q)
		}
		rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{})
		if err != nil || !hasFinding(rep, sbxdb.FindingQuarantine, leftover) || !rep.Clean() {
			t.Fatalf("check: %v, %v", rep, err)
		}
		rep, err = db.Check(ctx, sbxdb.CheckStoreOptions{Repair: true})
		if err != nil || rep.Reindexed != 0 || rep.ReindexedFiles != 1 {
			t.Fatalf("repair: %+v, %v", rep, err)
		}
		rep, err = db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
		if err != nil || len(rep.Findings) != 0 {
			t.Fatalf("check after the repair: %v, %v", rep.Findings, err)
		}
		if err := healRestore(t, db, "cp1", ws); err != nil {
			t.Fatal(err)
		}
	})
}

// One flipped byte in a pack damages the blobs of its frame. A repair with
// VerifyBlobs drops them from the index, naming the checkpoint that needs
// them; a capture of the intact workspace (whose stat cache vouches for the
// files) then stores them again instead of deduplicating against the
// damage, and the older checkpoint restores again. A damaged large file is
// dropped the same way.
func TestRepairDropsDamagedBlobsAndRecaptureHeals(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	ws := filepath.Join(root, "ws")
	files := healFiles()
	for p, b := range files {
		write(t, ws, p, b, 0o644)
	}
	age(t, ws)
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	healCapture(t, db, ws, "cp1")
	db.Close()

	frames := packFrames(t, dir)
	block := frames[cas.Files.Key(sha256.Sum256(files["src/b.go"]))]
	testkit.FlipByte(t, block.pack, block.offset+64+block.stored/2)
	bigKey := cas.Files.Key(sha256.Sum256(files["big.bin"]))
	testkit.FlipByte(t, largeFile(dir, bigKey), 4096)
	damaged := append(slices.Clone(block.keys), bigKey)
	slices.Sort(damaged)

	db, err = engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true, Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	var dropped []string
	for _, d := range rep.Dropped {
		dropped = append(dropped, d.Key)
		if !slices.Equal(d.Checkpoints, []string{"cp1"}) {
			t.Errorf("dropped %s: checkpoints %v, want cp1", d.Key, d.Checkpoints)
		}
	}
	if !slices.Equal(dropped, damaged) {
		t.Errorf("dropped %v, want the damaged blobs %v", dropped, damaged)
	}
	rep, err = db.Check(ctx, sbxdb.CheckStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range damaged {
		if !slices.ContainsFunc(rep.Findings, func(f sbxdb.Finding) bool {
			return f.Kind == sbxdb.FindingMissingBlob && f.Subject == k && strings.Contains(f.Detail, "cp1")
		}) {
			t.Errorf("check does not report %s missing for cp1: %v", k, rep.Findings)
		}
	}
	if hasFinding(rep, sbxdb.FindingBlob, "") || hasFinding(rep, sbxdb.FindingQuarantine, "") {
		t.Errorf("blob damage or quarantine left after the repair: %v", rep.Findings)
	}

	healCapture(t, db, ws, "cp2")
	if err := healRestore(t, db, "cp1", ws); err != nil {
		t.Fatalf("restoring the damaged checkpoint after the re-capture: %v", err)
	}
	rep, err = db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
	if err != nil || !rep.Clean() {
		t.Errorf("check after the re-capture: %v, %v", rep.Findings, err)
	}
}

// Every case of the corruption matrix that damages blob files or the blob
// index (and nothing of the chain): a repair with VerifyBlobs leaves no
// blob damage behind, only blobs missing, each reported with the
// checkpoints that need it; once their bytes are stored again, the store
// checks clean and every checkpoint restores to the tree it was taken of.
func TestRepairHealsEveryBlobDamage(t *testing.T) {
	s := newCorruptStore(t)
	for _, tc := range corruptCases() {
		probe := s.copyStore(t)
		h := tc.damage(t, s, probe)
		if len(h.keys)+len(h.missing)+len(h.subject) == 0 || h.openRefused || h.metaPage || h.chunk ||
			len(h.records)+len(h.lost) > 0 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := s.copyStore(t)
			tc.damage(t, s, dir)
			db, err := engine.Open(dir, &engine.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true, Repair: true}); err != nil {
				t.Fatal(err)
			}
			rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
			if err != nil {
				t.Fatal(err)
			}
			var missing []string
			for _, f := range rep.Findings {
				switch f.Kind {
				case sbxdb.FindingMissingBlob:
					missing = append(missing, f.Subject)
				case sbxdb.FindingDanglingParent, sbxdb.FindingOffChain:
				default:
					t.Errorf("after the repair: %v", f)
				}
			}
			for _, k := range missing {
				if err := db.Blobs().Put(ctx, k, s.blobs[k]); err != nil {
					t.Fatalf("storing %s again: %v", k, err)
				}
			}
			rep, err = db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
			if err != nil || !rep.Clean() {
				t.Errorf("after storing the dropped blobs again: %v, %v", rep.Findings, err)
			}
			for _, cp := range s.cps {
				out := filepath.Join(t.TempDir(), "out")
				if _, err := db.Restore(ctx, cp.ID, out, nil); err != nil {
					t.Errorf("restore %s: %v", cp.ID, err)
					continue
				}
				if diff := cmp.Diff(s.trees[cp.ID], snapshot(t, out)); diff != "" {
					t.Errorf("restore of %s differs (-want +got):\n%s", cp.ID, diff)
				}
			}
		})
	}
}
