package cas

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	bolt "go.etcd.io/bbolt"
)

// entries returns the index entries of keys.
func (f *fixture) entries(t *testing.T, keys []string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	f.db.View(func(tx *bolt.Tx) error {
		for _, k := range keys {
			e, ok, err := lookup(kv.Bolt(tx), k)
			if err != nil || !ok {
				t.Fatalf("lookup(%s) = %v, %v", k, ok, err)
			}
			out[k] = e
		}
		return nil
	})
	return out
}

// packStatsOf returns the cas_packs value of every pack.
func (f *fixture) packStatsOf(t *testing.T) map[uint64]packStats {
	t.Helper()
	out := map[uint64]packStats{}
	f.db.View(func(tx *bolt.Tx) error {
		return forEachPack(kv.Bolt(tx), func(id uint64, st packStats, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			out[id] = st
			return nil
		})
	})
	return out
}

// TestBlocksRoundTrip adds small blobs of both namespaces from several
// goroutines, among them empty ones, blobs at the member limit and one just
// over it, and checks that they share block frames, that every read path
// returns them, and that the members' shares add up to the packs' sizes.
func TestBlocksRoundTrip(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	type blob struct {
		ns   Namespace
		data []byte
	}
	var blobs []blob
	for i := range 300 {
		ns := Files
		if i%5 == 0 {
			ns = Artifacts
		}
		var d []byte
		switch {
		case i%50 == 7: // empty, several times: one blob per namespace
		case i == 11:
			d = text(blockMemberMax, 11)
		case i == 12:
			d = text(blockMemberMax+1, 12) // a frame of its own
		case i%9 == 0:
			d = noise(500+i, uint64(i)) // incompressible, among compressible neighbours
		default:
			d = text(100+i*53%9000, uint64(i))
		}
		blobs = append(blobs, blob{ns, d})
	}
	b := f.s.NewBatch()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < len(blobs); i += 4 {
				if _, err := b.Add(ctx, blobs[i].ns, blobs[i].data); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	written := b.Written()
	b.Close()

	want := map[string][]byte{}
	for _, bl := range blobs {
		want[keyOf(bl.ns, bl.data)] = bl.data
	}
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	es := f.entries(t, keys)
	frames := map[[2]uint64]int{}
	shares := map[uint64]uint64{}
	for k, e := range es {
		switch {
		case len(want[k]) > blockMemberMax:
			if e.where != wherePack {
				t.Errorf("a blob over blockMemberMax has where %d, want its own frame", e.where)
			}
		case e.where != whereBlock && e.where != wherePack:
			t.Errorf("a small blob has where %d", e.where)
		}
		frames[[2]uint64{e.pack, e.offset}]++
		shares[e.pack] += e.footprint()
	}
	if len(frames) >= len(es)/4 {
		t.Errorf("%d blobs in %d frames: blocks are not being filled", len(es), len(frames))
	}
	var total uint64
	for id, st := range f.packStatsOf(t) {
		if shares[id] != st.total {
			t.Errorf("pack %016x: footprints add up to %d, the pack holds %d", id, shares[id], st.total)
		}
		total += st.total
	}
	if uint64(written) != total {
		t.Errorf("Written() = %d, the packs hold %d", written, total)
	}

	// Every read path, cached or not, and Head's sizes.
	cache := newBlockCache()
	for k, d := range want {
		if got, err := f.s.Get(ctx, k); err != nil || !bytes.Equal(got, d) {
			t.Fatalf("Get(%s) = %d bytes, %v; want %d", k, len(got), err, len(d))
		}
		r, err := f.s.openCached(ctx, k, cache)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, d) {
			t.Fatalf("openCached(%s) = %d bytes, %v", k, len(got), err)
		}
		if info, err := f.s.Head(ctx, k); err != nil || info.Size != int64(len(d)) || info.Stored != storedOf(es[k]) {
			t.Fatalf("Head(%s) = %+v, %v", k, info, err)
		}
	}
	if err := f.s.Check(ctx, true, nil, func(key string, err error) { t.Errorf("check: %s: %v", key, err) }); err != nil {
		t.Fatal(err)
	}

	// Deleting every blob marks every byte of every pack dead.
	deleted, err := f.s.DeleteUnused(ctx, keys, nil)
	if err != nil || len(deleted) != len(keys) {
		t.Fatalf("DeleteUnused = %d, %v", len(deleted), err)
	}
	for id, st := range f.packStatsOf(t) {
		if st.dead != st.total {
			t.Errorf("pack %016x: %d of %d bytes dead after deleting everything", id, st.dead, st.total)
		}
	}
}

// storedOf is what Head reports as Stored for e.
func storedOf(e entry) int64 {
	if e.where == whereBlock {
		return int64(e.share)
	}
	return int64(e.stored)
}

func TestBlockShares(t *testing.T) {
	for _, c := range []struct {
		frame   uint64
		weights []uint64
	}{
		{100, []uint64{1, 1, 1}},
		{64 + 7, []uint64{33, 33, 40, 33}},
		{1 << 20, []uint64{3, 1 << 17, 33, 5000, 1}},
		{65, []uint64{1000}},
	} {
		var sum uint64
		for i, s := range blockShares(c.frame, c.weights) {
			sum += s
			// Each share is its weight's part of the frame, rounded
			// either way by less than one byte.
			exact := float64(c.frame) * float64(c.weights[i]) / float64(sumOf(c.weights))
			if d := float64(s) - exact; d <= -1 || d >= 1 {
				t.Errorf("frame %d, weights %v: share %d is %d, exact %.2f", c.frame, c.weights, i, s, exact)
			}
		}
		if sum != c.frame {
			t.Errorf("frame %d, weights %v: shares add up to %d", c.frame, c.weights, sum)
		}
	}
}

func sumOf(ws []uint64) (s uint64) {
	for _, w := range ws {
		s += w
	}
	return s
}

// TestBlockMemberTable checks the table against the index: a member row
// that does not match the entry is damage even when the bytes hash right.
func TestBlockMemberTable(t *testing.T) {
	payload := appendMemberRow(nil, [32]byte{1}, 3)
	payload = appendMemberRow(payload, [32]byte{2}, 0)
	payload = appendMemberRow(payload, [32]byte{3}, 2)
	table := len(payload)
	payload = append(payload, "abcde"...)
	ms, err := decodeMembers(payload, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].at != uint64(table) || ms[1].at != uint64(table+3) || ms[2].at != uint64(table+3) || ms[2].size != 2 {
		t.Fatalf("members %+v", ms)
	}
	for _, c := range []struct {
		name    string
		payload []byte
		count   uint32
	}{
		{"a byte short", payload[:len(payload)-1], 3},
		{"a byte over", append(bytes.Clone(payload), 'x'), 3},
		{"count too high", payload, 4},
		{"count too low", payload, 2},
		{"count absurd", payload, 1 << 31},
	} {
		if _, err := decodeMembers(c.payload, c.count); err == nil {
			t.Errorf("%s: decoded", c.name)
		}
	}
}

// TestBlockDamageFailsEveryMember flips one byte in a block's payload: its
// checksum fails every member alike (the sha256s alone would pass those
// whose own bytes survived), and blobs in other frames read on.
func TestBlockDamageFailsEveryMember(t *testing.T) {
	for _, compressible := range []bool{true, false} {
		t.Run(fmt.Sprint("compressible=", compressible), func(t *testing.T) {
			f := open(t)
			ctx := context.Background()
			b := f.s.NewBatch()
			want := map[string][]byte{}
			for i := range 12 {
				d := noise(3000, uint64(i))
				if compressible {
					d = text(3000, uint64(i))
				}
				res, err := b.Add(ctx, Files, d)
				if err != nil {
					t.Fatal(err)
				}
				want[res.Key] = d
			}
			other := text(blockMemberMax+10, 99)
			res, _ := b.Add(ctx, Files, other)
			if err := b.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			b.Close()
			var keys []string
			for k := range want {
				keys = append(keys, k)
			}
			e := f.entries(t, keys)[keys[0]]
			if e.where != whereBlock || (e.codec == codecZstd) != compressible {
				t.Fatalf("entry %+v", e)
			}
			flip(t, f, e.pack, int64(e.offset+headerSize+e.stored-1))
			for _, k := range keys {
				if _, err := f.s.Get(ctx, k); !errors.Is(err, sbxdb.ErrBlobCorrupt) {
					t.Errorf("Get of a member of the damaged block = %v", err)
				}
			}
			if got, err := f.s.Get(ctx, res.Key); err != nil || !bytes.Equal(got, other) {
				t.Errorf("Get of a blob in another frame: %v", err)
			}
		})
	}
}

// flip flips one byte of a pack file.
func flip(t *testing.T, f *fixture, pack uint64, at int64) {
	t.Helper()
	p, release, err := f.s.packFile(pack)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var b [1]byte
	p.ReadAt(b[:], at)
	b[0] ^= 0xff
	w, err := os.OpenFile(p.(*os.File).Name(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt(b[:], at); err != nil {
		t.Fatal(err)
	}
}

// TestFormat1StoreIsStampedAndRead: format 2 only added block frames, so a
// format-1 index is read as it is, read-only, and stamped 2 by a writable
// open; a newer format is refused.
func TestFormat1StoreIsStampedAndRead(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	d := text(5000, 1)
	key := keyOf(Files, d)
	if err := f.s.Put(ctx, key, d); err != nil { // one blob: a blob frame, as format 1 wrote
		t.Fatal(err)
	}
	setFormat := func(v byte) {
		f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte{v}) })
	}
	format := func() byte {
		var v byte
		f.db.View(func(tx *bolt.Tx) error { v = tx.Bucket(bucketMeta).Get(keyFormat)[0]; return nil })
		return v
	}
	setFormat(1)
	ro, err := Open(f.s.Dir(), kv.BoltDB{DB: f.db}, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open of format 1: %v", err)
	}
	if got, err := ro.Get(ctx, key); err != nil || !bytes.Equal(got, d) {
		t.Fatalf("read-only Get: %v", err)
	}
	ro.Close()
	if format() != 1 {
		t.Fatal("a read-only open changed the format")
	}
	f.reopen(t)
	if v := format(); v != FormatVersion {
		t.Fatalf("format %d after a writable open, want %d", v, FormatVersion)
	}
	if got, err := f.s.Get(ctx, key); err != nil || !bytes.Equal(got, d) {
		t.Fatalf("Get: %v", err)
	}
	setFormat(FormatVersion + 1)
	if _, err := Open(f.s.Dir(), kv.BoltDB{DB: f.db}, Options{ReadOnly: true}); !errors.Is(err, ErrFormat) {
		t.Fatalf("Open of a newer format = %v, want ErrFormat", err)
	}
}

// TestReadEach reads blobs of every kind (block members, blob frames,
// large files) named in any order and more than once: each is passed to fn
// exactly once with its bytes.
func TestReadEach(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	want := f.fill(t, 60, 5)                                  // blocks
	maps.Copy(want, f.fillSized(t, 3, 50, blockMemberMax+1))  // blob frames
	large := bytes.Repeat([]byte("a large blob "), MaxPacked) // a file of its own
	want[keyOf(Files, large)] = large
	if err := f.s.Put(ctx, keyOf(Files, large), large); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range want {
		keys = append(keys, k, k) // twice each
	}
	var mu sync.Mutex
	seen := map[string]int{}
	err := f.s.ReadEach(ctx, keys, 3, func(key string, r *Reader) error {
		got, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		seen[key]++
		if !bytes.Equal(got, want[key]) {
			t.Errorf("%s: wrong bytes", key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("%s passed %d times", k, seen[k])
		}
	}

	// A key the store does not hold fails before anything is read.
	calls := 0
	err = f.s.ReadEach(ctx, append(keys, keyOf(Files, []byte("never stored"))), 2, func(string, *Reader) error { calls++; return nil })
	if !errors.Is(err, sbxdb.ErrBlobNotFound) || calls != 0 {
		t.Fatalf("ReadEach with a missing key = %v after %d calls", err, calls)
	}
	// fn's error stops the run and is returned.
	stop := errors.New("stop")
	if err := f.s.ReadEach(ctx, keys, 2, func(string, *Reader) error { return stop }); err != stop {
		t.Fatalf("ReadEach = %v, want fn's error", err)
	}
	// A damaged block fails with ErrCorrupt naming one of its members.
	es := f.entries(t, keys[:1])
	e := es[keys[0]]
	flip(t, f, e.pack, int64(e.offset+headerSize+e.stored/2))
	err = f.s.ReadEach(ctx, keys, 2, func(string, *Reader) error { return nil })
	var ce *sbxdb.BlobError
	if !errors.Is(err, sbxdb.ErrBlobCorrupt) || !errors.As(err, &ce) || want[ce.Key] == nil {
		t.Fatalf("ReadEach over a damaged frame = %v", err)
	}
}

// TestReadEachDuringRepack: ReadEach holds no lock while fn runs, so a
// Repack can finish meanwhile (and others read on); the blobs it moved are
// then located again and read from their new packs.
func TestReadEachDuringRepack(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	a := f.fillSized(t, 40, 1, 8000) // one pack of several blocks, made worth repacking below
	b := f.fillSized(t, 40, 2, 8000) // another
	var del []string
	for k := range a {
		if len(del) < 20 {
			del = append(del, k)
		}
	}
	if _, err := f.s.DeleteUnused(ctx, del, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for k, d := range a {
		if !slices.Contains(del, k) {
			want[k] = d
		}
	}
	maps.Copy(want, b)
	keys := slices.Collect(maps.Keys(want))

	inFn, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan error, 1)
	go func() {
		first := true
		done <- f.s.ReadEach(ctx, keys, 1, func(key string, r *Reader) error {
			if first {
				first = false
				close(inFn)
				<-release // a restore writing a big file
			}
			got, err := io.ReadAll(r)
			mu.Lock()
			defer mu.Unlock()
			seen[key]++
			if err != nil || !bytes.Equal(got, want[key]) {
				t.Errorf("%s: %d bytes, %v", key, len(got), err)
			}
			return nil
		})
	}()
	<-inFn
	repacked := make(chan error, 1)
	go func() {
		st, err := f.s.Repack(ctx, RepackOptions{Threshold: DefaultRepackThreshold})
		if err == nil && st.Packs != 1 {
			err = fmt.Errorf("repack %+v", st)
		}
		repacked <- err
	}()
	select {
	case err := <-repacked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Repack waited for a ReadEach whose fn was running")
	}
	if _, err := f.s.Get(ctx, keys[0]); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("ReadEach across a Repack: %v", err)
	}
	for _, k := range keys {
		if seen[k] != 1 {
			t.Errorf("%s passed %d times", k, seen[k])
		}
	}
}

// TestReadEachStopsInsideABlock: the end of ctx stops ReadEach between two
// members of one block, not after the block.
func TestReadEachStopsInsideABlock(t *testing.T) {
	f := open(t)
	keys := slices.Collect(maps.Keys(f.fill(t, 40, 3))) // blocks of ~20 members
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := f.s.ReadEach(ctx, keys, 1, func(string, *Reader) error { calls++; cancel(); return nil })
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("ReadEach = %v after %d calls; want context.Canceled after 1", err, calls)
	}
}

// TestTinyBlobsKeepBlocksSmall: a block is full when its table and bytes
// reach blockTarget, so blobs of a few bytes, whose table rows outweigh
// them, do not make a block that one read must decode whole.
func TestTinyBlobsKeepBlocksSmall(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	b := f.s.NewBatch()
	var keys []string
	for i := range 10_000 {
		res, err := b.Add(ctx, Files, fmt.Appendf(nil, "%08d", i))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, res.Key)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.Close()
	for _, e := range f.entries(t, keys) {
		if e.where != whereBlock || e.blockRaw > blockTarget+blockMemberMax+binary.MaxVarintLen64+32 {
			t.Fatalf("entry %+v: a block of %d bytes", e, e.blockRaw)
		}
	}
}

// TestBlockIndependentOfAddOrder adds the same small blobs to two stores
// in opposite orders: the blocks they seal are the same, so every member
// has the same offset and the same share of its frame (a store's reported
// sizes must not depend on which capture worker finished first).
func TestBlockIndependentOfAddOrder(t *testing.T) {
	ctx := context.Background()
	var blobs [][]byte
	for i := range 12 {
		blobs = append(blobs, text(200+i*37, uint64(i)))
	}
	var keys []string
	for _, d := range blobs {
		keys = append(keys, keyOf(Files, d))
	}
	entriesAfter := func(order []int) map[string]entry {
		f := open(t)
		b := f.s.NewBatch()
		defer b.Close()
		for _, i := range order {
			if _, err := b.Add(ctx, Files, blobs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return f.entries(t, keys)
	}
	forward, backward := make([]int, len(blobs)), make([]int, len(blobs))
	for i := range blobs {
		forward[i], backward[len(blobs)-1-i] = i, i
	}
	a, b := entriesAfter(forward), entriesAfter(backward)
	for _, k := range keys {
		if a[k].where != whereBlock {
			t.Fatalf("%s: where %d, want a block member", k, a[k].where)
		}
		if a[k].at != b[k].at || a[k].share != b[k].share || a[k].raw != b[k].raw {
			t.Errorf("%s: at %d share %d added forward, at %d share %d added backward", k, a[k].at, a[k].share, b[k].at, b[k].share)
		}
	}
}
