package suite

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// openRawBolt opens a plain bbolt file with the engine's options (fsync on)
// and the buckets the baselines write.
func openRawBolt(tb testing.TB) *bolt.DB {
	tb.Helper()
	db, err := bolt.Open(filepath.Join(Dir(tb), "raw.db"), 0o644, &bolt.Options{
		Timeout:        time.Second,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	err = (kv.BoltDB{DB: db}).Update(func(tx kv.Tx) error {
		for _, name := range [][]byte{meta.BucketCheckpoints, meta.BucketChunks, meta.BucketThreadIndex, meta.BucketHeads, meta.BucketRefs} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return db
}

// rawIndexKey is the engine's thread-index key (internal/meta/threads.go indexKey):
// threadId 0x00 be64(createdAt xor 1<<63) checkpoint id.
func rawIndexKey(cp *chain.Checkpoint) []byte {
	k := make([]byte, 0, len(cp.ThreadID)+9+len(cp.ID))
	k = append(k, cp.ThreadID...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint64(k, uint64(cp.CreatedAt)^1<<63)
	return append(k, cp.ID...)
}

// rawPut writes what the engine's append writes for cp, minus checks and
// reference counts: the chunks not yet stored, the sealed checkpoint
// record, its sealed index key and the sealed head. CheckRawBaseline checks
// the bytes equal the engine's.
func rawPut(tx kv.Tx, cp *chain.Checkpoint) error {
	record, chunks := meta.EncodeRecord(cp)
	b := tx.Bucket(meta.BucketChunks)
	for h, data := range chunks {
		k := binary.BigEndian.AppendUint64(nil, h)
		if b.Get(k) == nil {
			if err := b.Put(k, meta.Seal(meta.BucketChunks, k, data)); err != nil {
				return err
			}
		}
	}
	return rawPutRecord(tx, cp, record)
}

// rawPutWhole writes cp the way format 1 stored it, whole (the unchunked
// baseline): one sealed record with its full manifest and conversation,
// its index key and the head.
func rawPutWhole(tx kv.Tx, cp *chain.Checkpoint) error {
	return rawPutRecord(tx, cp, meta.EncodeCheckpoint(cp))
}

func rawPutRecord(tx kv.Tx, cp *chain.Checkpoint, record []byte) error {
	id := []byte(cp.ID)
	if err := tx.Bucket(meta.BucketCheckpoints).Put(id, meta.Seal(meta.BucketCheckpoints, id, record)); err != nil {
		return err
	}
	ik := rawIndexKey(cp)
	if err := tx.Bucket(meta.BucketThreadIndex).Put(ik, meta.Seal(meta.BucketThreadIndex, ik, nil)); err != nil {
		return err
	}
	thread := []byte(cp.ThreadID)
	return tx.Bucket(meta.BucketHeads).Put(thread, meta.Seal(meta.BucketHeads, thread, id))
}

// rawAppend writes g's next checkpoint into db in one Update (fsync on).
func rawAppend(db *bolt.DB, g *gen) error {
	cp := g.next()
	if err := (kv.BoltDB{DB: db}).Update(func(tx kv.Tx) error { return rawPut(tx, cp) }); err != nil {
		return err
	}
	g.head = cp.ID
	return nil
}

// RawBoltUpdate is the baseline of the serial append: one plain bbolt
// Update (fsync on) per op, writing the same record, index key and head as
// the engine's append of the same checkpoint.
func RawBoltUpdate(b *testing.B) {
	db := openRawBolt(b)
	g := newGen("w00", SmallFiles)
	for b.Loop() {
		if err := rawAppend(db, g); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, b.Elapsed())
}

// RawBoltConcurrent is the baseline of AppendConcurrent: n goroutines, each
// writing its own chain to one plain bbolt file with one Update (fsync on)
// per checkpoint, the same bytes as RawBoltUpdate. Plain bbolt has one
// writer at a time and no group commit, so each Update waits for the
// previous one's fsync. b.N writes are shared among the goroutines.
func RawBoltConcurrent(b *testing.B, n int) {
	db := openRawBolt(b)
	ops := make([]func() error, n)
	for i := range ops {
		g := newGen(fmt.Sprintf("w%02d", i), SmallFiles)
		ops[i] = func() error { return rawAppend(db, g) }
	}
	b.ResetTimer()
	elapsed, err := concurrently(ops, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportRate(b, b.N, elapsed)
}

// rawAddRefs adds one reference to each distinct blob key of cp the way the
// engine did before it folded counts lazily (read, unseal, decode,
// re-seal, put).
func rawAddRefs(tx kv.Tx, cp *chain.Checkpoint) error {
	refs := tx.Bucket(meta.BucketRefs)
	for _, k := range cp.BlobKeys() {
		key := []byte(k)
		var n uint64
		if v := refs.Get(key); v != nil {
			p, err := meta.Unseal(meta.BucketRefs, key, v)
			if err != nil {
				return err
			}
			n, _ = binary.Uvarint(p)
		}
		if err := refs.Put(key, meta.Seal(meta.BucketRefs, key, binary.AppendUvarint(nil, n+1))); err != nil {
			return err
		}
	}
	return nil
}

// RawBoltUpdateRefs is a diagnostic second baseline: the baseline plus
// eager blob reference counts (one read-modify-write per distinct blob key,
// 10 here). It is not a target's baseline; it splits the gap between the
// baseline and the serial append into "the same writes" and "the engine's
// own work" (checks, copy, lease, group-commit hand-off).
func RawBoltUpdateRefs(b *testing.B) {
	db := openRawBolt(b)
	g := newGen("w00", SmallFiles)
	for b.Loop() {
		cp := g.next()
		if err := (kv.BoltDB{DB: db}).Update(func(tx kv.Tx) error {
			if err := rawPut(tx, cp); err != nil {
				return err
			}
			return rawAddRefs(tx, cp)
		}); err != nil {
			b.Fatal(err)
		}
		g.head = cp.ID
	}
	reportRate(b, b.N, b.Elapsed())
}

// Appends per phase of one Paired round. The concurrent phases make more
// appends so that each writer makes 20 or more and the ramp at the start
// and the tail at the end of a phase weigh little.
const (
	pairedSerial = 100
	pairedW8     = 400
	pairedW64    = 1280
)

// Paired measures the four write paths of the engine's ratios in
// alternation: each op (b.Loop iteration) is one round of pairedSerial raw
// bbolt updates, pairedSerial serial appends, pairedW8 appends by 8 writers
// and pairedW64 by 64 writers, each on its own store, the phase order
// rotating every round. The fsync time of this machine drifts within
// seconds, which a ratio of two benchmarks run a minute apart absorbs; here
// both sides of each ratio share every stretch of the run. It reports each
// path's appends/s and the three ratios of the engine's performance targets
// (ns/op is the time of a whole round and means little).
func Paired(b *testing.B) {
	raw := openRawBolt(b)
	rawGen := newGen("w00", SmallFiles)
	serialDB := openDB(b, Durable())
	serial := writers(b, serialDB, 1, SmallFiles)
	db8 := openDB(b, Durable())
	w8 := writers(b, db8, 8, SmallFiles)
	db64 := openDB(b, Durable())
	w64 := writers(b, db64, 64, SmallFiles)

	var elapsed [4]time.Duration
	phases := [4]func() (time.Duration, error){
		func() (time.Duration, error) {
			start := time.Now()
			for range pairedSerial {
				if err := rawAppend(raw, rawGen); err != nil {
					return 0, err
				}
			}
			return time.Since(start), nil
		},
		func() (time.Duration, error) { return appendConcurrently(serialDB, serial, pairedSerial) },
		func() (time.Duration, error) { return appendConcurrently(db8, w8, pairedW8) },
		func() (time.Duration, error) { return appendConcurrently(db64, w64, pairedW64) },
	}
	round := 0
	for b.Loop() {
		for i := range phases {
			p := (round + i) % len(phases)
			d, err := phases[p]()
			if err != nil {
				b.Fatal(err)
			}
			elapsed[p] += d
		}
		round++
	}
	rate := func(n int, d time.Duration) float64 { return float64(n*b.N) / d.Seconds() }
	rawRate := rate(pairedSerial, elapsed[0])
	serialRate := rate(pairedSerial, elapsed[1])
	rate8 := rate(pairedW8, elapsed[2])
	rate64 := rate(pairedW64, elapsed[3])
	b.ReportMetric(rawRate, "raw-appends/s")
	b.ReportMetric(serialRate, "serial-appends/s")
	b.ReportMetric(rate8, "w8-appends/s")
	b.ReportMetric(rate64, "w64-appends/s")
	b.ReportMetric(serialRate/rawRate, "serial/raw")
	b.ReportMetric(rate8/serialRate, "w8/serial")
	b.ReportMetric(rate64/serialRate, "w64/serial")
}

// CheckRawBaseline checks that the baselines write exactly the bytes the
// engine writes for the same checkpoints (record, index key, head; and
// reference counts for the Refs variant), so the raw benchmarks and
// AppendSerial compare like with like. It appends three checkpoints
// through the engine, writes the same checkpoints with the baselines' code
// into a raw bbolt file, and compares the buckets.
func CheckRawBaseline(t testing.TB) {
	t.Helper()
	dir := Dir(t)
	opts := Durable()
	opts.NoSync = true
	db, err := engine.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	wr := writers(t, db, 1, SmallFiles)[0]
	var cps []*chain.Checkpoint
	for range 3 {
		if err := wr.appendNext(db); err != nil {
			t.Fatal(err)
		}
		cp, err := db.Get(ctx, wr.g.head)
		if err != nil || cp == nil {
			t.Fatalf("Get(%s) = %v, %v", wr.g.head, cp, err)
		}
		cps = append(cps, cp)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	eng, err := bolt.Open(filepath.Join(dir, engine.DBFile), 0o644, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	raw := openRawBolt(t)
	if err := (kv.BoltDB{DB: raw}).Update(func(tx kv.Tx) error {
		for _, cp := range cps {
			if err := rawPut(tx, cp); err != nil {
				return err
			}
			if err := rawAddRefs(tx, cp); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	err = (kv.BoltDB{DB: eng}).View(func(etx kv.Tx) error {
		return (kv.BoltDB{DB: raw}).View(func(rtx kv.Tx) error {
			// Reference counts: the engine folds them lazily (internal/meta/refs.go),
			// so compare the counts, not the bucket's bytes.
			got, err := meta.References(etx)
			if err != nil {
				return err
			}
			want := []chain.BlobRef{}
			err = rtx.Bucket(meta.BucketRefs).ForEach(func(k, v []byte) error {
				p, err := meta.Unseal(meta.BucketRefs, k, v)
				if err != nil {
					return err
				}
				n, _ := binary.Uvarint(p)
				want = append(want, chain.BlobRef{Key: string(k), References: int64(n)})
				return nil
			})
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("reference counts: engine %v, baseline %v", got, want)
			}
			for _, name := range [][]byte{meta.BucketCheckpoints, meta.BucketChunks, meta.BucketThreadIndex, meta.BucketHeads} {
				eb, rb := etx.Bucket(name), rtx.Bucket(name)
				if eb == nil || rb == nil {
					return fmt.Errorf("bucket %s missing", name)
				}
				en, err := kv.Count(eb)
				if err != nil {
					return err
				}
				rn, err := kv.Count(rb)
				if err != nil {
					return err
				}
				if en != rn {
					return fmt.Errorf("bucket %s: engine has %d keys, baseline %d", name, en, rn)
				}
				err = rb.ForEach(func(k, v []byte) error {
					if ev := eb.Get(k); string(ev) != string(v) {
						return fmt.Errorf("bucket %s key %q: engine value %d bytes, baseline %d bytes (or different)", name, k, len(ev), len(v))
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
