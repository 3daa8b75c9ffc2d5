package cas

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb/internal/kv"
	bolt "go.etcd.io/bbolt"
)

// levels returns the recorded level of every registered pack.
func (f *fixture) levels(t *testing.T) map[uint64]zstd.EncoderLevel {
	t.Helper()
	got := map[uint64]zstd.EncoderLevel{}
	err := f.db.View(func(tx *bolt.Tx) error {
		return forEachPack(kv.Bolt(tx), func(id uint64, ps packStats, err error) error {
			got[id] = ps.level
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// readAll checks that every blob reads back as stored and that a deep
// check finds nothing.
func (f *fixture) readAll(t *testing.T, blobs map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	for k, want := range blobs {
		got, err := f.s.Get(ctx, k)
		if err != nil || string(got) != string(want) {
			t.Fatalf("Get %s: %d bytes, %v", k, len(got), err)
		}
	}
	if err := f.s.Check(ctx, true, nil, func(key string, err error) { t.Errorf("check: %s: %v", key, err) }); err != nil {
		t.Fatal(err)
	}
}

func TestRepackRecompressesAtABetterLevel(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fill(t, 300, 1)
	for k, v := range f.fillSized(t, 4, 2, blockMemberMax+1) {
		blobs[k] = v
	}
	for id, lv := range f.levels(t) {
		if lv != CaptureLevel {
			t.Fatalf("pack %x written at level %v, want %v", id, lv, CaptureLevel)
		}
	}

	// Without Recompress, packs with no dead bytes stay.
	if st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold}); err != nil || st.Packs != 0 {
		t.Fatalf("Repack without Recompress = %+v, %v", st, err)
	}
	p, err := f.s.PlanRepack(ctx, RepackOptions{Threshold: DefaultRepackThreshold, Recompress: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := p.Stats
	if plan.Packs != 2 || plan.Recompressed != 2 || plan.Before != packBytes(t, f) {
		t.Fatalf("PlanRepack = %+v, %v (packs hold %d bytes)", plan, err, packBytes(t, f))
	}
	st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold, Recompress: true})
	if err != nil || st.Packs != 2 || st.Recompressed != 2 || st.Blobs != len(blobs) || st.RecompressedBytes != plan.Before {
		t.Fatalf("Repack with Recompress = %+v, %v", st, err)
	}
	if st.After >= st.Before {
		t.Errorf("recompressed packs take %d bytes, were %d", st.After, st.Before)
	}
	lv := f.levels(t)
	if len(lv) != 1 {
		t.Fatalf("%d packs after the repack, want 1", len(lv))
	}
	for id, l := range lv {
		if l != RecompressLevel {
			t.Fatalf("pack %x at level %v after recompression, want %v", id, l, RecompressLevel)
		}
	}
	f.readAll(t, blobs)
	f.reopen(t)
	f.readAll(t, blobs)

	// Recompressed once: a second run has nothing to do.
	if st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold, Recompress: true}); err != nil || st.Packs != 0 {
		t.Fatalf("second Repack with Recompress = %+v, %v", st, err)
	}
}

func TestRepackRecompressesOnlyColdPacks(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fill(t, 50, 3)
	name := f.packFiles(t)[0]
	path := filepath.Join(f.dir, "blobs", "packs", name)
	written := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, written, written); err != nil {
		t.Fatal(err)
	}
	opts := RepackOptions{Threshold: DefaultRepackThreshold, Recompress: true, ColdBefore: written.Add(-time.Minute)}
	if st, err := f.s.Repack(ctx, opts); err != nil || st.Packs != 0 {
		t.Fatalf("Repack of a pack newer than ColdBefore = %+v, %v", st, err)
	}
	opts.ColdBefore = written.Add(time.Minute)
	if st, err := f.s.Repack(ctx, opts); err != nil || st.Recompressed != 1 {
		t.Fatalf("Repack of a pack older than ColdBefore = %+v, %v", st, err)
	}
	f.readAll(t, blobs)
}

// setLevel rewrites every pack's stats as format 2 wrote them (no level)
// when lv is 0, or with level lv.
func (f *fixture) setLevel(t *testing.T, lv zstd.EncoderLevel) {
	t.Helper()
	err := f.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPacks)
		return b.ForEach(func(k, v []byte) error {
			ps, err := decodePackStats(v)
			if err != nil {
				return err
			}
			ps.level = lv
			return b.Put(k, ps.encode())
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A repack for dead bytes alone writes at the highest level of the packs
// it rewrites: a pack of format 2 (no level: zstd.SpeedDefault) is not
// made bigger by the faster capture level.
func TestRepackKeepsTheLevelOfOlderPacks(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fill(t, 100, 4)
	f.setLevel(t, 0)
	var gone []string
	for k := range blobs {
		if len(gone) < 50 {
			gone = append(gone, k)
		}
	}
	f.s.DeleteUnused(ctx, gone, nil)
	for _, k := range gone {
		delete(blobs, k)
	}
	st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold})
	if err != nil || st.Packs != 1 || st.Recompressed != 0 {
		t.Fatalf("Repack = %+v, %v", st, err)
	}
	for id, lv := range f.levels(t) {
		if lv != zstd.SpeedDefault {
			t.Fatalf("pack %x rewritten at %v, want %v", id, lv, zstd.SpeedDefault)
		}
	}
	f.readAll(t, blobs)
	// A pack of format 2 counts as zstd.SpeedDefault: below
	// RecompressLevel, so Recompress takes it.
	f.setLevel(t, 0)
	if st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold, Recompress: true}); err != nil || st.Recompressed != 1 {
		t.Fatalf("Repack with Recompress of a format-2 pack = %+v, %v", st, err)
	}
	f.readAll(t, blobs)
}

func TestPackStatsDecodeWithAndWithoutLevel(t *testing.T) {
	old := []byte{0x90, 0x03, 0x05} // format 2: total 400, dead 5
	ps, err := decodePackStats(old)
	if err != nil || ps.total != 400 || ps.dead != 5 || ps.level != 0 || ps.at() != zstd.SpeedDefault {
		t.Fatalf("format-2 stats = %+v, %v", ps, err)
	}
	if string(ps.encode()) != string(old) {
		t.Fatalf("stats with no level encode as %x, want %x", ps.encode(), old)
	}
	ps.level = RecompressLevel
	back, err := decodePackStats(ps.encode())
	if err != nil || back != ps {
		t.Fatalf("round trip of %+v = %+v, %v", ps, back, err)
	}
	for _, bad := range [][]byte{{0x90, 0x03, 0x05, 0x00}, {0x90, 0x03, 0x05, 0x09}, {0x90, 0x03, 0x05, 0x02, 0x00}, {0x90}} {
		if _, err := decodePackStats(bad); err == nil {
			t.Errorf("stats %x decoded", bad)
		}
	}
}

// A store of format 2 opens and is stamped 3 by its first writable open;
// its packs keep reading. A newer format is refused.
func TestFormat2StoreOpens(t *testing.T) {
	f := open(t)
	blobs := f.fill(t, 20, 5)
	f.setLevel(t, 0)
	stamp := func(v byte) {
		if err := f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte{v}) }); err != nil {
			t.Fatal(err)
		}
	}
	stamp(2)
	f.reopen(t)
	f.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyFormat); len(v) != 1 || v[0] != FormatVersion {
			t.Errorf("format after a writable open = %v, want %d", v, FormatVersion)
		}
		return nil
	})
	f.readAll(t, blobs)
	stamp(FormatVersion + 1)
	f.s.Close()
	if _, err := Open(filepath.Join(f.dir, "blobs"), kv.BoltDB{DB: f.db}, Options{NoSync: true}); !errors.Is(err, ErrFormat) {
		t.Fatalf("Open of format %d = %v, want ErrFormat", FormatVersion+1, err)
	}
}

// failingDB fails the next index update after running fail, as a crash
// between writing the new packs and the transaction switching to them
// leaves things.
type failingDB struct {
	kv.BoltDB
	fail func()
}

func (d *failingDB) Update(fn func(kv.Tx) error) error {
	if f := d.fail; f != nil {
		d.fail = nil
		f()
		return errors.New("injected: the index update did not happen")
	}
	return d.BoltDB.Update(fn)
}

func TestRecompressCrashBeforeSwitchingIsSafe(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	blobs := f.fill(t, 200, 6)
	before := f.packFiles(t)
	f.s.Close()
	d := &failingDB{BoltDB: kv.BoltDB{DB: f.db}}
	s, err := Open(filepath.Join(f.dir, "blobs"), d, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	// What a crash at the switch leaves: the new packs, written in full
	// and unregistered. They are copied aside before the failed update's
	// cleanup removes them, and put back after.
	left := map[string][]byte{}
	d.fail = func() {
		dir := filepath.Join(f.dir, "blobs", "packs")
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			left[e.Name()] = b
		}
	}
	if _, err := s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold, Recompress: true}); err == nil {
		t.Fatal("Repack with a failed index update succeeded")
	}
	s.Close()
	if len(left) != len(before)+1 {
		t.Fatalf("%d pack files at the switch, want %d old and 1 new", len(left), len(before))
	}
	for name, b := range left {
		os.WriteFile(filepath.Join(f.dir, "blobs", "packs", name), b, 0o644)
	}
	f.db.Close()
	f.s = nil
	f.reopen(t)
	if got := f.packFiles(t); len(got) != len(before) || got[0] != before[0] {
		t.Fatalf("packs after reopening = %v, want %v", got, before)
	}
	for _, lv := range f.levels(t) {
		if lv != CaptureLevel {
			t.Fatalf("a pack at level %v after a failed recompression", lv)
		}
	}
	f.readAll(t, blobs)
}

// largeHeader returns the frame header of key's large file.
func (f *fixture) largeHeader(t *testing.T, key string) header {
	t.Helper()
	ns, sum, _ := ParseKey(key)
	b, err := os.ReadFile(filepath.Join(f.dir, "blobs", largePath(ns, sum)))
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestRepackRecompressesLargeFiles(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	large := text(MaxPacked+(1<<20), 8)
	key := keyOf(Files, large)
	if err := f.s.Put(ctx, key, large); err != nil {
		t.Fatal(err)
	}
	before := f.largeHeader(t, key)
	if before.level != 0 || before.codec != codecZstd {
		t.Fatalf("a batch's large frame: %+v", before)
	}
	p, err := f.s.PlanRepack(ctx, RepackOptions{Threshold: 1, Recompress: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := p.Stats
	if plan.Recompressed != 1 || plan.RecompressedBytes != headerSize+int64(before.stored) {
		t.Fatalf("PlanRepack = %+v, %v", plan, err)
	}
	st, err := f.s.Repack(ctx, RepackOptions{Threshold: 1, Recompress: true})
	if err != nil || st.Recompressed != 1 || st.After >= st.Before {
		t.Fatalf("Repack = %+v, %v", st, err)
	}
	after := f.largeHeader(t, key)
	if after.level != byte(RecompressLevel) || after.stored >= before.stored {
		t.Fatalf("recompressed frame %+v, was %+v", after, before)
	}
	info, err := f.s.Head(ctx, key)
	if err != nil || info.Stored != int64(after.stored) {
		t.Fatalf("Head after recompression = %+v, %v", info, err)
	}
	f.readAll(t, map[string][]byte{key: large})
	if st, err := f.s.Repack(ctx, RepackOptions{Threshold: 1, Recompress: true}); err != nil || st.Packs != 0 {
		t.Fatalf("second Repack = %+v, %v", st, err)
	}
}

// A crash after the recompressed file replaced the old one and before the
// index learned its size leaves a store that reads and checks clean.
func TestRecompressedLargeFileBeforeTheIndexReads(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	large := text(MaxPacked+(1<<20), 9)
	key := keyOf(Files, large)
	if err := f.s.Put(ctx, key, large); err != nil {
		t.Fatal(err)
	}
	f.s.Close()
	d := &failingDB{BoltDB: kv.BoltDB{DB: f.db}}
	s, err := Open(filepath.Join(f.dir, "blobs"), d, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	d.fail = func() {}
	if _, err := s.Repack(ctx, RepackOptions{Threshold: 1, Recompress: true}); err == nil {
		t.Fatal("Repack with a failed index update succeeded")
	}
	s.Close()
	f.db.Close()
	f.s = nil
	f.reopen(t)
	if h := f.largeHeader(t, key); h.level != byte(RecompressLevel) {
		t.Fatalf("the new frame is not in place: %+v", h)
	}
	info, _ := f.s.Head(ctx, key)
	if h := f.largeHeader(t, key); info.Stored == int64(h.stored) {
		t.Fatal("the index learned the new size: the failure injected nothing")
	}
	f.readAll(t, map[string][]byte{key: large})
	if err := f.s.Check(ctx, false, nil, func(key string, err error) { t.Errorf("check: %s: %v", key, err) }); err != nil {
		t.Fatal(err)
	}
	// The next recompression finds the frame at its level and records its
	// size.
	if st, err := f.s.Repack(ctx, RepackOptions{Threshold: 1, Recompress: true}); err != nil || st.Packs != 0 {
		t.Fatalf("Repack after the crash = %+v, %v", st, err)
	}
	if info, _ := f.s.Head(ctx, key); info.Stored != int64(f.largeHeader(t, key).stored) {
		t.Fatalf("stored %d after the next Repack, the frame holds %d", info.Stored, f.largeHeader(t, key).stored)
	}
}
