package meta

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
)

func recordDB(t *testing.T) *bolt.DB {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "r.db"), 0o644, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.Update(func(tx *bolt.Tx) error {
		for _, name := range Buckets {
			tx.CreateBucket(name)
		}
		return nil
	})
	return db
}

// boundaryPaths returns n paths each ending a group (hash&shapeMask == 0).
func boundaryPaths(n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		p := fmt.Sprintf("p%06d", i)
		if xxhash.Sum64String(p)&shapeMask == 0 {
			out = append(out, p)
		}
	}
	return out
}

// padding returns a directory entry whose path sorts before boundaryPaths'
// and does not end a group, long enough that a manifest holding it is cut
// into chunks rather than stored inline in its record.
func padding() chain.Entry {
	for i := 0; ; i++ {
		p := fmt.Sprintf("a%d/%s", i, strings.Repeat("x", inlineManifestMax))
		if xxhash.Sum64String(p)&shapeMask != 0 {
			return chain.Entry{Path: p, Kind: chain.KindDir}
		}
	}
}

// Two groups of one file each (the first padded, so that the manifest is
// chunked). Their content chunks C1, C2 (different
// bytes) are forged to share xxhash h, as a real 64-bit collision would.
// Both groups' index chunks are then the same bytes ([h]). One content
// chunk is stored at h, the other moves to h+1; the group of the moved one
// gets a corrected index. If the index chunk stored "created" by this put
// belongs to the group that needs the fix, putRecord deletes it, but the
// other group's record slot still names it.
func TestCollisionInOneOfTwoEqualIndexes(t *testing.T) {
	for _, swap := range []bool{false, true} {
		t.Run(fmt.Sprint("swap=", swap), func(t *testing.T) {
			db := recordDB(t)
			paths := boundaryPaths(2)
			cp := &chain.Checkpoint{ID: "c1", ThreadID: "t", Reason: chain.ReasonAutomatic, Conversation: []json.RawMessage{}}
			cp.Files = []chain.Entry{
				padding(),
				{Path: paths[0], Kind: chain.KindFile, BlobKey: testkit.FileKey(1), Size: 1},
				{Path: paths[1], Kind: chain.KindFile, BlobKey: testkit.FileKey(2), Size: 2},
			}
			p := Prepare(cp)
			// chunks: shape1, C1, I1, shape2, C2, I2
			if len(p.chunks) != 6 || !p.chunks[2].index || !p.chunks[5].index {
				t.Fatalf("layout: %d chunks", len(p.chunks))
			}
			i2 := forgeSecondContentCollision(p)
			if i2.hash != p.chunks[2].hash {
				t.Fatal("index chunks differ")
			}
			// Equal hashes: SortFunc is not stable, any order is possible.
			// C1 stored first (C2 moves: group 2 needs the fix); I2 stored
			// first (created), I1 finds it.
			p.order = []int32{1, 4, 5, 2, 0, 3}
			if swap { // C2 first (C1 moves), I1 created
				p.order = []int32{4, 1, 2, 5, 0, 3}
			}
			// shapes in any order; keep hash order irrelevant for them
			err := db.Update(func(tx *bolt.Tx) error {
				if err := putRecord(kv.Bolt(tx), p); err != nil {
					return err
				}
				return addPending(kv.Bolt(tx), p.ID, cp.ThreadID, cp.CreatedAt, uint64(len(cp.Files)))
			})
			if err != nil {
				t.Fatal(err)
			}
			err = db.View(func(tx *bolt.Tx) error {
				got, err := GetCheckpoint(kv.Bolt(tx), "c1")
				if err != nil {
					return err
				}
				if got.Files[1].BlobKey != testkit.FileKey(1) || got.Files[2].BlobKey != testkit.FileKey(2) {
					return fmt.Errorf("wrong content: %v", got.Files[1:])
				}
				return checkCounts(tx)
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A record naming one large message chunk N times must not make a read
// allocate N copies: refused on its size claim, or, when the claim is
// forged small, as soon as the chunks pass it.
func TestRepeatedChunkOverItsClaim(t *testing.T) {
	db := recordDB(t)
	msg := make([]byte, 1<<20)
	msg[0], msg[len(msg)-1] = '"', '"'
	for i := 1; i < len(msg)-1; i++ {
		msg[i] = 'a'
	}
	const n = 1000
	cp := &chain.Checkpoint{ID: "c1", ThreadID: "t", Reason: chain.ReasonAutomatic}
	for range n {
		cp.Conversation = append(cp.Conversation, json.RawMessage(msg))
	}
	var recLen int
	err := db.Update(func(tx *bolt.Tx) error {
		if err := PutRecord(kv.Bolt(tx), cp); err != nil {
			return err
		}
		recLen = len(tx.Bucket(BucketCheckpoints).Get([]byte("c1")))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	allocated, err := getAllocs(db, "c1")
	t.Logf("record %d bytes + one 1 MiB chunk; GetCheckpoint err=%v; allocated %d MiB (RecordSize %d > MaxRecordBytes %d: %v)",
		recLen, err, allocated>>20, chain.RecordSize(cp), chain.MaxRecordBytes, chain.RecordSize(cp) > chain.MaxRecordBytes)
	if allocated > chain.MaxRecordBytes {
		t.Errorf("a %d-byte record made a read allocate %d MiB", recLen, allocated>>20)
	}
}

// Same collision, but the order is the one Prepare's sort produces: with
// more chunks than insertion sort handles, pdqsort may put the equal-hash
// chunks in either order. Try fillers until the bad order shows up.
func TestCollisionInPrepareOrder(t *testing.T) {
	paths := boundaryPaths(40)
	for fill := 0; fill < 38; fill++ {
		cp := &chain.Checkpoint{ID: "c1", ThreadID: "t", Reason: chain.ReasonAutomatic, Conversation: []json.RawMessage{}}
		cp.Files = []chain.Entry{padding()}
		for i := 0; i < 2+fill; i++ {
			cp.Files = append(cp.Files, chain.Entry{Path: paths[i], Kind: chain.KindFile, BlobKey: testkit.FileKey(100 + i), Size: int64(i)})
		}
		p := Prepare(cp)
		// group g is chunks 3g, 3g+1 (content), 3g+2 (index)
		forgeSecondContentCollision(p)
		for i := range p.order {
			p.order[i] = int32(i)
		}
		slices.SortFunc(p.order, func(a, b int32) int { return cmp.Compare(p.chunks[a].hash, p.chunks[b].hash) })
		db := recordDB(t)
		err := db.Update(func(tx *bolt.Tx) error { return putRecord(kv.Bolt(tx), p) })
		if err == nil {
			err = db.View(func(tx *bolt.Tx) error { _, err := GetCheckpoint(kv.Bolt(tx), "c1"); return err })
		}
		if err != nil {
			t.Errorf("%d chunks, order %v: %v", len(p.chunks), p.order, err)
			return
		}
	}
}

// Randomized: larger manifests (several groups, dirs, symlinks, duplicate
// files), puts, deletes of several at once, folds. After each step every
// stored checkpoint reads back as appended, chunks check clean and blob
// counts match.
func TestRandomRecordsRoundTrip(t *testing.T) {
	db := recordDB(t)
	rng := newRng(11)
	stored := map[string]*chain.Checkpoint{}
	for step := range testkit.Scale(t, 300, 600) {
		err := db.Update(func(tx *bolt.Tx) error {
			switch rng.IntN(4) {
			case 0, 1:
				id := fmt.Sprintf("c%d", rng.IntN(30))
				if stored[id] != nil {
					return nil
				}
				cp := &chain.Checkpoint{ID: id, ThreadID: "t", Reason: chain.ReasonAutomatic, Conversation: []json.RawMessage{}}
				n := rng.IntN(400)
				for j := range n {
					p := fmt.Sprintf("d%d/f%04d", j/50, j)
					switch rng.IntN(10) {
					case 0:
						cp.Files = append(cp.Files, chain.Entry{Path: p, Kind: chain.KindDir})
					case 1:
						cp.Files = append(cp.Files, chain.Entry{Path: p, Kind: chain.KindSymlink, Target: "x"})
					default:
						cp.Files = append(cp.Files, chain.Entry{Path: p, Kind: chain.KindFile, BlobKey: testkit.FileKey(rng.IntN(40)), Size: int64(rng.IntN(3)), Executable: rng.IntN(5) == 0})
					}
				}
				for range rng.IntN(5) {
					cp.Conversation = append(cp.Conversation, json.RawMessage(fmt.Sprint(rng.IntN(4))))
				}
				stored[id] = cp
				if err := putCheckpoint(kv.Bolt(tx), cp); err != nil {
					return err
				}
				if PendingWeight(kv.Bolt(tx)) >= 4 {
					return FoldRefs(kv.Bolt(tx))
				}
			case 2:
				return deleteSome(tx, rng, stored, 4)
			case 3:
				if rng.IntN(5) == 0 {
					return FoldRefs(kv.Bolt(tx))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		err = db.View(func(tx *bolt.Tx) error {
			for id, want := range stored {
				got, err := GetCheckpoint(kv.Bolt(tx), id)
				if err != nil {
					return err
				}
				w := want.Clone()
				if len(w.Files) == 0 {
					w.Files = got.Files
				}
				if fmt.Sprint(w) != fmt.Sprint(got) {
					return fmt.Errorf("%s differs", id)
				}
			}
			return checkCounts(tx)
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
}

func newRng(s uint64) *rand.Rand { return rand.New(rand.NewPCG(s, s)) }

// The same repetition under a forged, small size claim: the reassembly
// stops once its chunks pass the claim, before copying them.
func TestRepeatedChunkUnderAForgedClaim(t *testing.T) {
	db := recordDB(t)
	msg := []byte(`"` + strings.Repeat("a", 1<<20) + `"`)
	h := xxhash.Sum64(msg)
	var e Encoder
	for _, s := range []string{"c1", "t", "", "automatic", "", ""} {
		e.String(s)
	}
	e.Varint(0)
	e.Uvarint(1 << 21) // fullSize: two copies' worth
	e.Uvarint(0)       // entries
	e.Uvarint(0)       // groups
	e.Uvarint(0)       // artifacts
	e.Uvarint(1000)    // messages, all the same chunk
	for range 1000 {
		e.b = binary.BigEndian.AppendUint64(e.b, h)
	}
	err := db.Update(func(tx *bolt.Tx) error {
		k := chunkKey(h)
		if err := tx.Bucket(BucketChunks).Put(k, Seal(BucketChunks, k, msg)); err != nil {
			return err
		}
		return tx.Bucket(BucketCheckpoints).Put([]byte("c1"), Seal(BucketCheckpoints, []byte("c1"), e.Bytes()))
	})
	if err != nil {
		t.Fatal(err)
	}
	allocated, err := getAllocs(db, "c1")
	if !errors.Is(err, chain.ErrCorrupt) {
		t.Errorf("GetCheckpoint of a record over its claim: %v, want ErrCorrupt", err)
	}
	if n := allocated; n > 8<<20 {
		t.Errorf("a record claiming 2 MiB made a read allocate %d MiB", n>>20)
	}
}

// A manifest of at most inlineManifestMax bytes (shape plus content) is
// stored in its record, one byte more is cut into chunks; both read back
// as appended.
func TestInlineManifestThreshold(t *testing.T) {
	// n files "f0000".. of size 1: shape 2+1+5 = 8 bytes, content 33 each;
	// a directory entry pads the shape to the byte.
	manifest := func(total int) *chain.Checkpoint {
		cp := &chain.Checkpoint{ID: fmt.Sprint("c", total), ThreadID: "t", Reason: chain.ReasonAutomatic, Conversation: []json.RawMessage{json.RawMessage(`"hi"`)}}
		n := (total - 8) / 41
		for j := range n {
			cp.Files = append(cp.Files, chain.Entry{Path: fmt.Sprintf("f%04d", j), Kind: chain.KindFile, BlobKey: testkit.FileKey(j), Size: 1})
		}
		pad := total - 41*n - 3 // a dir's shape: kind, flags, length byte, path
		cp.Files = append(cp.Files, chain.Entry{Path: "z" + strings.Repeat("d", pad-1), Kind: chain.KindDir})
		if sn, cn := manifestSize(cp.Files); sn+cn != total {
			t.Fatalf("manifest of %d bytes, want %d", sn+cn, total)
		}
		return cp
	}
	db := recordDB(t)
	for _, total := range []int{inlineManifestMax, inlineManifestMax + 1} {
		cp := manifest(total)
		p := Prepare(cp)
		inline := len(p.chunks) == 1 // the message only
		if inline != (total <= inlineManifestMax) {
			t.Errorf("%d-byte manifest: %d chunks (inline %v)", total, len(p.chunks), inline)
		}
		err := db.Update(func(tx *bolt.Tx) error { return putCheckpoint(kv.Bolt(tx), cp) })
		if err == nil {
			err = db.View(func(tx *bolt.Tx) error {
				got, err := GetCheckpoint(kv.Bolt(tx), cp.ID)
				if err == nil && fmt.Sprint(got) != fmt.Sprint(cp) {
					err = fmt.Errorf("reads back as %v", got)
				}
				return err
			})
		}
		if err != nil {
			t.Errorf("%d-byte manifest: %v", total, err)
		}
	}
}

// A damaged inline manifest is an error naming what does not add up,
// never a panic or a wrong checkpoint.
func TestInlineManifestDamaged(t *testing.T) {
	shapeOf := func(paths ...string) []byte {
		var s []byte
		for _, p := range paths {
			s = append(s, 'f', 0, byte(len(p)))
			s = append(s, p...)
		}
		return s
	}
	contentOf := func(n int) []byte {
		var c []byte
		for i := range n {
			c = appendDigest(c, testkit.FileKey(i), chain.FilePrefix)
			c = append(c, 1)
		}
		return c
	}
	record := func(entries int, shape, content []byte) []byte {
		e := &Encoder{}
		for _, s := range []string{"c", "t", "", string(chain.ReasonAutomatic), "", ""} {
			e.String(s)
		}
		e.Varint(1)
		e.Uvarint(1000) // fullSize
		e.Uvarint(uint64(entries))
		e.Uvarint(0) // no groups: inline
		e.Raw(shape)
		e.Raw(content)
		e.Uvarint(0) // artifacts
		e.Uvarint(0) // messages
		return e.Bytes()
	}
	good, err := DecodeRecord(record(2, shapeOf("a", "b"), contentOf(2)), nil)
	if err != nil || len(good.Files) != 2 || good.Files[1].BlobKey != testkit.FileKey(1) {
		t.Fatalf("a good inline record: %v, %v", good, err)
	}
	for name, rec := range map[string][]byte{
		"content of a file more":   record(2, shapeOf("a", "b"), contentOf(3)),
		"content of a file less":   record(2, shapeOf("a", "b"), contentOf(1)),
		"more entries than count":  record(1, shapeOf("a", "b"), contentOf(2)),
		"fewer entries than count": record(3, shapeOf("a", "b"), contentOf(2)),
		"truncated":                record(2, shapeOf("a", "b"), contentOf(2))[:30],
		"content cut in a digest":  record(2, shapeOf("a", "b"), contentOf(2)[:50]),
	} {
		if cp, err := DecodeRecord(rec, nil); err == nil {
			t.Errorf("%s: decoded as %v", name, cp)
		}
	}
}

// Manifests of only directories, only symlinks or only files, of 0 to 139
// entries and three path lengths, cross the inline bound in every way; each
// reads back, and counts and chunks stay right through folds and deletes.
// (Written by a review of format 3.)
func TestInlineBoundaryKinds(t *testing.T) {
	db := recordDB(t)
	stride := testkit.ScaleShort(t, 7, 3, 1) // manifest sizes 0, stride, 2·stride, … below 140
	i := 0
	for _, kind := range []chain.Kind{chain.KindDir, chain.KindSymlink, chain.KindFile} {
		for n := 0; n < 140; n += stride {
			for _, plen := range []int{5, 13, 60} {
				i++
				cp := &chain.Checkpoint{ID: fmt.Sprint("c", i), ThreadID: "t", Reason: chain.ReasonAutomatic}
				for j := range n {
					e := chain.Entry{Path: fmt.Sprintf("%0*d", plen, j), Kind: kind}
					switch kind {
					case chain.KindSymlink:
						e.Target = strings.Repeat("x", 1+j%7)
					case chain.KindFile:
						e.BlobKey, e.Size = testkit.FileKey(j%5), int64(j)
					}
					cp.Files = append(cp.Files, e)
				}
				err := db.Update(func(tx *bolt.Tx) error {
					if err := putCheckpoint(kv.Bolt(tx), cp); err != nil {
						return err
					}
					if i%5 == 0 {
						if err := FoldRefs(kv.Bolt(tx)); err != nil {
							return err
						}
					}
					got, err := GetCheckpoint(kv.Bolt(tx), cp.ID)
					if err != nil {
						return err
					}
					if len(got.Files) != len(cp.Files) || len(cp.Files) > 0 && fmt.Sprint(got.Files) != fmt.Sprint(cp.Files) {
						return fmt.Errorf("reads back as %v", got.Files)
					}
					if i%2 == 0 {
						if err := DeleteCheckpoints(kv.Bolt(tx), []string{cp.ID}); err != nil {
							return err
						}
					}
					return checkCounts(tx)
				})
				if err != nil {
					t.Fatalf("%v × %d, paths of %d: %v", kind, n, plen, err)
				}
			}
		}
	}
}

// forgeSecondContentCollision forges a hash collision in a prepared record
// of two groups (chunks: shape1, C1, I1, shape2, C2, I2): C2 takes C1's
// hash, and I2, which names C2, is rewritten to name that hash and
// rehashed, its new id patched into the record. It returns I2.
func forgeSecondContentCollision(p *Prepared) *preparedChunk {
	h := p.chunks[1].hash
	c2 := &p.chunks[4]
	c2.hash = h
	c2.sum = sum(BucketChunks, chunkKey(h), c2.data)
	i2 := &p.chunks[5]
	i2.data = binary.BigEndian.AppendUint64(nil, h)
	i2.hash = xxhash.Sum64(i2.data)
	i2.sum = sum(BucketChunks, chunkKey(i2.hash), i2.data)
	binary.BigEndian.PutUint64(p.record[i2.slot:], i2.hash)
	return i2
}

// getAllocs reads checkpoint id with GetCheckpoint and returns how many
// bytes the read allocated, and its error.
func getAllocs(db *bolt.DB, id string) (uint64, error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := db.View(func(tx *bolt.Tx) error {
		_, err := GetCheckpoint(kv.Bolt(tx), id)
		return err
	})
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err
}
