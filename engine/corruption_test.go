package engine_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
)

// The corruption matrix: one store with packed blobs (zstd
// and raw), large blob files (zstd and raw), an artifact and two
// checkpoints, closed; each case copies it, damages one thing on disk and
// reopens it. Every read path that touches the damaged thing must fail with
// a typed error naming it, every other read must return the original bytes,
// DB.Check must report a finding naming it, and nothing may panic. Damage
// that bbolt itself cannot read past must make Open fail with ErrCorrupt
// naming the file.

// corruptStore is the undamaged store the cases copy.
type corruptStore struct {
	dir    string // the store directory, closed
	thread string
	cps    []*chain.Checkpoint               // as Get returned them, oldest first
	list   []*chain.Checkpoint               // List(thread) before the damage
	trees  map[string]map[string]fstree.Node // checkpoint id → the tree captured
	blobs  map[string][]byte                 // every stored blob key → its bytes
	keyOf  map[string]string                 // workspace path (or "artifact") → blob key
	art    chain.Artifact
	marker map[string]string // checkpoint id → a label found only in its record
}

// corruptText is compressible text, different for every seed.
func corruptText(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	words := []string{"func ", "return ", "if err != nil ", "{\n", "}\n", "x := ", "ctx, ", "// comment\n", "package main\n"}
	var b bytes.Buffer
	fmt.Fprintf(&b, "seed %d\n", seed)
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.Bytes()[:n]
}

// corruptNoise is incompressible: stored raw.
func corruptNoise(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 9))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

// talkMarker starts the one message of the corrupt store's conversation.
const talkMarker = "TALK-5f3a9c0e1b7d"

func newCorruptStore(t *testing.T) *corruptStore {
	t.Helper()
	root := t.TempDir()
	s := &corruptStore{dir: filepath.Join(root, "store"), thread: "t1", trees: map[string]map[string]fstree.Node{},
		blobs: map[string][]byte{}, keyOf: map[string]string{}, marker: map[string]string{}}
	db, err := engine.Open(s.dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w, err := db.AcquireWriter(ctx, s.thread)
	if err != nil {
		t.Fatal(err)
	}
	artData := []byte("the artifact's bytes, stored as a large blob file of their own\n")
	s.art, err = db.PutArtifact(ctx, engine.ArtifactInput{ArtifactID: "art1", Name: "report.txt", MimeType: "text/plain",
		CreatedAt: 1000, Data: bytes.NewReader(artData)})
	if err != nil {
		t.Fatal(err)
	}
	s.blobs[s.art.BlobKey], s.keyOf["artifact"] = artData, s.art.BlobKey

	ws := filepath.Join(root, "ws")
	files := map[string][]byte{
		"a.txt":     corruptText(3000, 1),
		"src/c.go":  corruptText(5000, 2),
		"src/d.go":  corruptText(2000, 3),
		"noise.bin": corruptNoise(3000, 4),              // packed, in a block with the three above
		"mid.txt":   corruptText(80<<10, 7),             // packed, a frame of its own, zstd
		"mid.bin":   corruptNoise(70<<10, 8),            // packed, a frame of its own, raw
		"big.txt":   corruptText(cas.MaxPacked+4096, 5), // a file of its own, zstd
		"big.bin":   corruptNoise(1<<20+4096, 6),        // a file of its own (over 1 MiB), raw
	}
	// A long source run id makes the records big enough that the
	// checkpoints bucket gets a page of its own (not inline in its
	// parent); the conversation lives in a shared chunk.
	runID := "run-" + strings.Repeat("r", 1200)
	talk := []json.RawMessage{json.RawMessage(`{"text":"` + talkMarker + strings.Repeat(" lorem ipsum", 150) + `"}`)}
	capture := func(id string, arts []chain.Artifact) {
		t.Helper()
		for p, b := range files {
			write(t, ws, p, b, 0o644)
			s.keyOf[p] = cas.Files.Key(sha256.Sum256(b))
			s.blobs[s.keyOf[p]] = b
		}
		s.marker[id] = "MARKER-" + id + "-d41d8cd98f00b204"
		res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws, ID: id, Label: s.marker[id],
			CreatedAt: int64(len(s.cps) + 1), SourceRunID: runID, Conversation: talk, Artifacts: arts})
		if err != nil {
			t.Fatal(err)
		}
		cp, err := db.Get(ctx, res.Checkpoint.ID)
		if err != nil {
			t.Fatal(err)
		}
		s.cps = append(s.cps, cp)
		s.trees[id] = snapshot(t, ws)
	}
	capture("cp1", []chain.Artifact{s.art})
	files["a.txt"] = corruptText(3100, 11) // the second capture writes a second pack
	files["e.txt"] = corruptText(1500, 12)
	capture("cp2", nil)
	if s.list, err = db.List(ctx, s.thread); err != nil {
		t.Fatal(err)
	}
	// The last transaction: a meta page case that falls back to the
	// previous one loses only this.
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true}); err != nil || len(rep.Findings) != 0 {
		t.Fatalf("the undamaged store: %+v, %v", rep, err)
	}
	return s
}

// copyStore copies the undamaged store for one case.
func (s *corruptStore) copyStore(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(dst, os.DirFS(s.dir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// packedFrame is a frame found in a pack file: a blob's, or a block's.
type packedFrame struct {
	pack           string // file path
	offset, stored int64
	keys           []string // the blobs it holds: damage to it harms them all
}

// packFrames parses the pack files of the store in dir and maps every
// packed blob's key to its frame: frames back to back, each a 64-byte
// header (magic, version, codec, namespace, reserved, raw size, stored
// size, then the sha256 of a blob frame or the member count of a block
// frame, checksum) and the stored bytes, which for a block decode to a
// member table (sha256, uvarint size) and the members (cas/format.go).
func packFrames(t *testing.T, dir string) map[string]packedFrame {
	t.Helper()
	packs, _ := filepath.Glob(filepath.Join(dir, engine.BlobDir, "packs", "*.pack"))
	out := map[string]packedFrame{}
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	for _, p := range packs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+64 <= len(b); {
			if string(b[off:off+4]) != "sbxb" {
				t.Fatalf("%s: no frame at %d", p, off)
			}
			version, codec, ns := b[off+4], b[off+5], cas.Namespace(b[off+6])
			stored := int64(binary.LittleEndian.Uint64(b[off+16:]))
			f := packedFrame{pack: p, offset: int64(off), stored: stored}
			if version == 1 {
				f.keys = []string{ns.Key([32]byte(b[off+24 : off+56]))}
			} else {
				payload := b[off+64 : off+64+int(stored)]
				if codec == 1 {
					if payload, err = dec.DecodeAll(payload, nil); err != nil {
						t.Fatal(err)
					}
				}
				for range binary.LittleEndian.Uint32(b[off+24:]) {
					f.keys = append(f.keys, ns.Key([32]byte(payload[:32])))
					_, n := binary.Uvarint(payload[32:])
					payload = payload[32+n:]
				}
			}
			for _, k := range f.keys {
				out[k] = f
			}
			off += 64 + int(stored)
		}
	}
	return out
}

// largeFile is the path of a large blob's file (cas/format.go).
func largeFile(dir, key string) string {
	ns, sum, err := cas.ParseKey(key)
	if err != nil {
		panic(err)
	}
	sub := "files"
	if ns == cas.Artifacts {
		sub = "artifacts"
	}
	h := hex.EncodeToString(sum[:])
	return filepath.Join(dir, engine.BlobDir, "large", sub, h[:2], h)
}

func truncateFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func removeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// boltUpdate changes the closed store's bbolt file directly, below every
// seal and check of the engine.
func boltUpdate(t *testing.T, dir string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	b, err := bolt.Open(filepath.Join(dir, engine.DBFile), 0o644, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// boltPages returns the page size and the root page of a bucket.
func boltPages(t *testing.T, dir string, bucket []byte) (pageSize int, root uint64) {
	t.Helper()
	b, err := bolt.Open(filepath.Join(dir, engine.DBFile), 0o644, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.View(func(tx *bolt.Tx) error {
		root = uint64(tx.Bucket(bucket).Root())
		return nil
	})
	return b.Info().PageSize, root
}

// metaTxids returns the transaction ids of meta pages 0 and 1.
func metaTxids(t *testing.T, dir string, pageSize int) (uint64, uint64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, engine.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	// The meta follows the 16-byte page header; txid is at 48 in it.
	return binary.LittleEndian.Uint64(b[16+48:]), binary.LittleEndian.Uint64(b[pageSize+16+48:])
}

// pagesInUse returns the high-water mark of the newer meta page: the
// number of pages the database uses.
func pagesInUse(t *testing.T, dir string, pageSize int) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, engine.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	m0, m1 := b[16:], b[pageSize+16:]
	if binary.LittleEndian.Uint64(m1[48:]) > binary.LittleEndian.Uint64(m0[48:]) {
		m0 = m1
	}
	return binary.LittleEndian.Uint64(m0[40:])
}

// harm is what a case damaged, and so what must fail.
type harm struct {
	keys    []string // blobs whose reads must fail as damaged, each named
	missing []string // blobs whose reads must fail as missing (MISSING_BLOB)
	records []string // checkpoint records whose reads must fail, named
	pack    string   // a pack file name a check finding must name
	subject []string // further subjects a check finding must name
	// openRefused: Open must fail with ErrCorrupt naming the database file.
	openRefused bool
	// lost: checkpoints whose records are gone without a trace in their
	// own bucket (Get finds nothing); listCorrupt: List must fail with
	// ErrCorrupt naming it (the thread index still names them).
	lost        []string
	listCorrupt string
	// metaPage: one meta page is damaged; check warns of the older
	// transaction it opened at, and finds nothing else.
	metaPage bool
	// chunk: a shared chunk is damaged; check must say so.
	chunk bool
}

func (h *harm) damaged(key string) bool { return slices.Contains(h.keys, key) }
func (h *harm) gone(key string) bool    { return slices.Contains(h.missing, key) }

// noPanic runs fn, failing the test if it panics.
func noPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: panic: %v\n%s", what, r, debug.Stack())
		}
	}()
	fn()
}

type corruptCase struct {
	name   string
	damage func(t *testing.T, s *corruptStore, dir string) harm
	// after runs extra assertions on the damaged store once probed.
	after func(t *testing.T, s *corruptStore, dir string, db *engine.DB)
}

func corruptCases() []corruptCase {
	return []corruptCase{
		{name: "packed frame payload flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["mid.txt"]
			f := packFrames(t, dir)[k]
			testkit.FlipByte(t, f.pack, f.offset+64+f.stored/2)
			return harm{keys: []string{k}}
		}},
		{name: "packed raw frame payload flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["mid.bin"]
			f := packFrames(t, dir)[k]
			testkit.FlipByte(t, f.pack, f.offset+64+f.stored-1)
			return harm{keys: []string{k}}
		}},
		{name: "packed frame header flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["mid.txt"]
			f := packFrames(t, dir)[k]
			testkit.FlipByte(t, f.pack, f.offset+9) // raw size
			return harm{keys: []string{k}}
		}},
		{name: "block payload flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			f := packFrames(t, dir)[s.keyOf["src/c.go"]]
			if len(f.keys) != 4 {
				t.Fatalf("src/c.go's block holds %d blobs, want the 4 small files of cp1", len(f.keys))
			}
			testkit.FlipByte(t, f.pack, f.offset+64+f.stored/2)
			return harm{keys: f.keys}
		}},
		{name: "block header flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			f := packFrames(t, dir)[s.keyOf["src/d.go"]]
			testkit.FlipByte(t, f.pack, f.offset+25) // member count
			return harm{keys: f.keys}
		}},
		{name: "pack truncated in its last frame", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			// The pack cp2 wrote: the second a.txt and e.txt.
			f2 := packFrames(t, dir)[s.keyOf["e.txt"]]
			var last string
			var end int64
			for k, f := range packFrames(t, dir) {
				if f.pack == f2.pack && f.offset >= end {
					last, end = k, f.offset
				}
			}
			f := packFrames(t, dir)[last]
			truncateFile(t, f.pack, f.offset+64+f.stored/2)
			return harm{keys: f.keys, pack: filepath.Base(f.pack)}
		}},
		{name: "pack missing", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			f1 := packFrames(t, dir)[s.keyOf["src/c.go"]]
			var keys []string
			for k, f := range packFrames(t, dir) {
				if f.pack == f1.pack {
					keys = append(keys, k)
				}
			}
			removeFile(t, f1.pack)
			return harm{keys: keys, pack: filepath.Base(f1.pack)}
		}},
		{name: "large zstd file payload flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["big.txt"]
			st, _ := os.Stat(largeFile(dir, k))
			testkit.FlipByte(t, largeFile(dir, k), st.Size()/2)
			return harm{keys: []string{k}}
		}},
		{name: "large raw file payload flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["big.bin"]
			testkit.FlipByte(t, largeFile(dir, k), -1) // the last byte: all else reads back first
			return harm{keys: []string{k}}
		}},
		{name: "large file header flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["big.bin"]
			testkit.FlipByte(t, largeFile(dir, k), 17) // stored size
			return harm{keys: []string{k}}
		}},
		{name: "large file truncated", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["big.txt"]
			st, _ := os.Stat(largeFile(dir, k))
			truncateFile(t, largeFile(dir, k), st.Size()/2)
			return harm{keys: []string{k}}
		}},
		{name: "large raw file truncated", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["big.bin"]
			st, _ := os.Stat(largeFile(dir, k))
			truncateFile(t, largeFile(dir, k), st.Size()-1)
			return harm{keys: []string{k}}
		}},
		{name: "large file missing", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["big.bin"]
			removeFile(t, largeFile(dir, k))
			return harm{keys: []string{k}}
		}},
		{name: "artifact file flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["artifact"]
			testkit.FlipByte(t, largeFile(dir, k), -3)
			return harm{keys: []string{k}}
		}},
		{name: "pack index value flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["noise.bin"]
			boltUpdate(t, dir, func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("cas_index"))
				v := bytes.Clone(b.Get([]byte(k)))
				v[2] ^= 0x01 // in the pack id or offset
				return b.Put([]byte(k), v)
			})
			return harm{keys: []string{k}}
		}},
		{name: "large index value flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			k := s.keyOf["big.txt"]
			boltUpdate(t, dir, func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("cas_index"))
				v := bytes.Clone(b.Get([]byte(k)))
				v[len(v)-1] ^= 0x80 // the checksum
				return b.Put([]byte(k), v)
			})
			return harm{keys: []string{k}}
		}},
		{name: "pack index key flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			// The entry moves under another (valid) key: its checksum,
			// which covers the key, no longer matches, and the blob it
			// described is gone from the index.
			k := s.keyOf["src/d.go"]
			moved := []byte(k)
			if moved[len(moved)-1] != '0' { // another hex digit: still a valid key
				moved[len(moved)-1] = '0'
			} else {
				moved[len(moved)-1] = '1'
			}
			boltUpdate(t, dir, func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("cas_index"))
				v := bytes.Clone(b.Get([]byte(k)))
				if err := b.Delete([]byte(k)); err != nil {
					return err
				}
				return b.Put(moved, v)
			})
			return harm{missing: []string{k}, subject: []string{string(moved)}}
		}},
		{name: "pack stats key flipped",
			damage: func(t *testing.T, s *corruptStore, dir string) harm {
				// cas_packs keys carry no checksum: a flipped bit makes
				// the pack look unregistered.
				f := packFrames(t, dir)[s.keyOf["src/c.go"]]
				id := strings.TrimSuffix(filepath.Base(f.pack), ".pack")
				var keys []string
				for k, g := range packFrames(t, dir) {
					if g.pack == f.pack {
						keys = append(keys, k)
					}
				}
				boltUpdate(t, dir, func(tx *bolt.Tx) error {
					b := tx.Bucket([]byte("cas_packs"))
					n, err := strconv.ParseUint(id, 16, 64)
					if err != nil {
						return err
					}
					old := binary.BigEndian.AppendUint64(nil, n)
					v := bytes.Clone(b.Get(old))
					if v == nil {
						return fmt.Errorf("pack %s not registered", id)
					}
					if err := b.Delete(old); err != nil {
						return err
					}
					return b.Put(binary.BigEndian.AppendUint64(nil, n^1<<40), v)
				})
				return harm{subject: keys, pack: id}
			},
			after: func(t *testing.T, s *corruptStore, dir string, db *engine.DB) {
				f := packFrames(t, s.dir)[s.keyOf["src/c.go"]]
				if _, err := os.Stat(filepath.Join(dir, engine.BlobDir, "packs", filepath.Base(f.pack))); err != nil {
					t.Errorf("Open removed a pack that index entries name: %v", err)
				}
			}},
		{name: "checkpoint record flipped in a data page", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			// Every copy of the record's label (freed pages may hold old
			// ones): the live one among them.
			path := filepath.Join(dir, engine.DBFile)
			b, _ := os.ReadFile(path)
			m := []byte(s.marker["cp2"])
			n := 0
			for i := bytes.Index(b, m); i >= 0; i = bytes.Index(b, m) {
				b[i+len(m)/2] ^= 0x20
				n++
			}
			if n == 0 {
				t.Fatal("the record's label is not in the file")
			}
			os.WriteFile(path, b, 0o644)
			// cp2 is the head: the head names a record that is not there.
			return harm{records: []string{"cp2"}, subject: []string{"t1"}}
		}},
		{name: "shared message chunk flipped in a data page", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			// Both checkpoints hold the same conversation, stored once.
			path := filepath.Join(dir, engine.DBFile)
			b, _ := os.ReadFile(path)
			m := []byte(talkMarker)
			n := 0
			for i := bytes.Index(b, m); i >= 0; i = bytes.Index(b, m) {
				b[i+len(m)/2] ^= 0x20
				n++
			}
			if n == 0 {
				t.Fatal("the message is not in the file")
			}
			os.WriteFile(path, b, 0o644)
			return harm{records: []string{"cp1", "cp2"}, subject: []string{"t1"}, chunk: true}
		}},
		{name: "checkpoints leaf page header flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			pageSize, root := boltPages(t, dir, meta.BucketCheckpoints)
			if root == 0 {
				t.Fatal("the checkpoints bucket is inline: make the records bigger")
			}
			testkit.FlipByte(t, filepath.Join(dir, engine.DBFile), int64(root)*int64(pageSize)) // its page id
			return harm{openRefused: true}
		}},
		{name: "checkpoints leaf element flipped", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			pageSize, root := boltPages(t, dir, meta.BucketCheckpoints)
			// The first element's key size (leaf element: flags, pos,
			// ksize, vsize): the key would overlap the value.
			testkit.FlipByte(t, filepath.Join(dir, engine.DBFile), int64(root)*int64(pageSize)+16+8+1)
			return harm{openRefused: true}
		}},
		{name: "checkpoints leaf element count lowered", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			// A structure bbolt and the page walk accept: the last record
			// of the leaf is silently gone from its bucket. The thread
			// index and the head still name it, and say so.
			pageSize, root := boltPages(t, dir, meta.BucketCheckpoints)
			path := filepath.Join(dir, engine.DBFile)
			b, _ := os.ReadFile(path)
			p := b[int64(root)*int64(pageSize):]
			if flags, n := binary.LittleEndian.Uint16(p[8:]), binary.LittleEndian.Uint16(p[10:]); flags != 0x02 || n != 2 {
				t.Fatalf("the checkpoints bucket is not one leaf of 2 records: flags %#x, count %d", flags, n)
			}
			binary.LittleEndian.PutUint16(p[10:], 1)
			os.WriteFile(path, b, 0o644)
			return harm{lost: []string{"cp2"}, listCorrupt: "cp2", subject: []string{"cp2", "t1"}}
		}},
		{name: "older meta page damaged", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			pageSize, _ := boltPages(t, dir, meta.BucketCheckpoints)
			t0, t1 := metaTxids(t, dir, pageSize)
			older := int64(0)
			if t1 < t0 {
				older = int64(pageSize)
			}
			testkit.FlipByte(t, filepath.Join(dir, engine.DBFile), older+16+16) // its root page id
			return harm{metaPage: true}
		}},
		{name: "newer meta page damaged", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			// bbolt takes the other meta page: the store as it was one
			// transaction earlier (the fixture's last is a lease release).
			flipNewestMeta(t, dir)
			return harm{metaPage: true}
		}},
		{name: "both meta pages damaged", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			pageSize, _ := boltPages(t, dir, meta.BucketCheckpoints)
			testkit.FlipByte(t, filepath.Join(dir, engine.DBFile), 16+16)
			testkit.FlipByte(t, filepath.Join(dir, engine.DBFile), int64(pageSize)+16+16)
			return harm{openRefused: true}
		}},
		{name: "database file truncated to half", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			// Half of the pages in use: bbolt grows the file ahead, and
			// cutting only its unused tail is no damage.
			pageSize, _ := boltPages(t, dir, meta.BucketCheckpoints)
			truncateFile(t, filepath.Join(dir, engine.DBFile), int64(pagesInUse(t, dir, pageSize)*uint64(pageSize)/2))
			return harm{openRefused: true}
		}},
		{name: "database file truncated to zero", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			// Not a new store: the blob store beside it says there was
			// one. Opening it as new would forget every checkpoint, and
			// the blob store's Open would remove every pack as a crash
			// leftover.
			truncateFile(t, filepath.Join(dir, engine.DBFile), 0)
			return harm{openRefused: true}
		}, after: func(t *testing.T, s *corruptStore, dir string, db *engine.DB) {
			if packs, _ := filepath.Glob(filepath.Join(dir, engine.BlobDir, "packs", "*.pack")); len(packs) != 2 {
				t.Errorf("%d pack files left, want the 2 there were", len(packs))
			}
		}},
		{name: "database file missing", damage: func(t *testing.T, s *corruptStore, dir string) harm {
			removeFile(t, filepath.Join(dir, engine.DBFile))
			return harm{openRefused: true}
		}, after: func(t *testing.T, s *corruptStore, dir string, db *engine.DB) {
			if _, err := os.Stat(filepath.Join(dir, engine.DBFile)); err == nil {
				t.Errorf("Open created a new database beside the blob store")
			}
		}},
	}
}

func TestCorruptionMatrix(t *testing.T) {
	s := newCorruptStore(t)
	for _, tc := range corruptCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t.Run("writable", func(t *testing.T) {
				dir := s.copyStore(t)
				h := tc.damage(t, s, dir)
				noPanic(t, "writable", func() { corruptProbe(t, s, dir, h, false, tc.after) })
			})
			// A read-only open (sbxdb check's) goes another way: bbolt
			// loads no freelist, and no write heals a meta page.
			t.Run("read-only", func(t *testing.T) {
				dir := s.copyStore(t)
				h := tc.damage(t, s, dir)
				noPanic(t, "read-only", func() { corruptProbe(t, s, dir, h, true, nil) })
			})
		})
	}
}

// corruptProbe opens the damaged store and runs every read path over it.
func corruptProbe(t *testing.T, s *corruptStore, dir string, h harm, readOnly bool, after func(*testing.T, *corruptStore, string, *engine.DB)) {
	t.Helper()
	mode := "writable"
	if readOnly {
		mode = "read-only"
	}
	db, err := engine.Open(dir, &engine.Options{NoSync: true, ReadOnly: readOnly})
	if h.openRefused {
		dbFile := filepath.Join(dir, engine.DBFile)
		if err == nil {
			db.Close()
			t.Fatalf("%s Open of a damaged file succeeded", mode)
		}
		if !errors.Is(err, chain.ErrCorrupt) || !strings.Contains(err.Error(), dbFile) {
			t.Errorf("%s Open: %v; want ErrCorrupt naming %s", mode, err, dbFile)
		}
		if after != nil {
			after(t, s, dir, nil)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s Open: %v", mode, err)
	}
	defer db.Close()

	// Records.
	bad := func(id string) bool { return slices.Contains(h.records, id) }
	readable := map[string]bool{}
	for _, want := range s.cps {
		got, err := db.Get(ctx, want.ID)
		switch {
		case bad(want.ID):
			if got != nil || !errors.Is(err, chain.ErrCorrupt) || !strings.Contains(err.Error(), want.ID) {
				t.Errorf("Get(%s) = %v, %v; want ErrCorrupt naming it", want.ID, got, err)
			}
		case slices.Contains(h.lost, want.ID):
			if got != nil || err != nil {
				t.Errorf("Get(%s) of a lost checkpoint = %v, %v", want.ID, got, err)
			}
		case err != nil:
			t.Errorf("Get(%s): %v", want.ID, err)
		default:
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("Get(%s) returned another record:\n%s", want.ID, d)
			}
			readable[want.ID] = true
		}
	}
	list, err := db.List(ctx, s.thread)
	switch {
	case len(h.records) > 0 || h.listCorrupt != "":
		name := h.listCorrupt
		if name == "" {
			name = h.records[0]
		}
		if !errors.Is(err, chain.ErrCorrupt) || !strings.Contains(err.Error(), name) {
			t.Errorf("List over a damaged record: %v; want ErrCorrupt naming %s", err, name)
		}
	case err != nil:
		t.Errorf("List: %v", err)
	default:
		want := slices.DeleteFunc(slices.Clone(s.list), func(cp *chain.Checkpoint) bool { return slices.Contains(h.lost, cp.ID) })
		if d := cmp.Diff(want, list); d != "" {
			t.Errorf("List returned other records:\n%s", d)
		}
	}

	// Blobs, through the blob store.
	for k, want := range s.blobs {
		got, err := db.Blobs().Get(ctx, k)
		switch {
		case h.damaged(k):
			if got != nil || !errors.Is(err, sbxdb.ErrBlobCorrupt) || !strings.Contains(err.Error(), k) {
				t.Errorf("Blobs().Get of damaged %s = %d bytes, %v; want sbxdb.ErrBlobCorrupt naming it", k, len(got), err)
			}
		case h.gone(k):
			if got != nil || !errors.Is(err, sbxdb.ErrBlobNotFound) || !strings.Contains(err.Error(), k) {
				t.Errorf("Blobs().Get of missing %s = %d bytes, %v; want sbxdb.ErrBlobNotFound naming it", k, len(got), err)
			}
		case err != nil:
			t.Errorf("Blobs().Get(%s): %v", k, err)
		case !bytes.Equal(got, want):
			t.Errorf("Blobs().Get(%s) returned wrong bytes as good", k)
		}
	}

	// Blobs, through checkpoint entries: OpenEntry (each key once),
	// Restore, ReadArtifact. After a read-only Open, file blobs are read
	// by the same code: the blob store's Get above and Check below do.
	opened := map[string]bool{}
	for _, cp := range s.cps {
		if !readable[cp.ID] {
			continue
		}
		if !readOnly {
			probeFiles(t, db, s, h, cp, opened)
		}
		for _, a := range cp.Artifacts {
			got, data, err := db.ReadArtifact(ctx, s.thread, cp.ID, a.ArtifactID)
			switch {
			case h.damaged(a.BlobKey) || h.gone(a.BlobKey):
				if data != nil || !errors.Is(err, chain.ErrInvalidArtifactBytes) || !strings.Contains(err.Error(), a.ArtifactID) || !strings.Contains(err.Error(), a.BlobKey) {
					t.Errorf("ReadArtifact of damaged %s = %d bytes, %v; want INVALID_ARTIFACT_BYTES naming it and its key", a.ArtifactID, len(data), err)
				}
			case err != nil:
				t.Errorf("ReadArtifact(%s): %v", a.ArtifactID, err)
			case got != a || !bytes.Equal(data, s.blobs[a.BlobKey]):
				t.Errorf("ReadArtifact(%s) returned wrong bytes as good", a.ArtifactID)
			}
		}
	}

	// The check.
	rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
	if err != nil {
		t.Errorf("Check: %v", err)
	} else {
		corruptCheck(t, h, rep)
	}
	if after != nil {
		after(t, s, dir, db)
	}
}

// probeFiles reads the file blobs of cp through OpenEntry (those not in
// opened yet) and restores it.
func probeFiles(t *testing.T, db *engine.DB, s *corruptStore, h harm, cp *chain.Checkpoint, opened map[string]bool) {
	t.Helper()
	var hit []string // damaged or missing keys cp uses
	for _, e := range cp.Files {
		if e.Kind != chain.KindFile {
			continue
		}
		if h.damaged(e.BlobKey) || h.gone(e.BlobKey) {
			hit = append(hit, e.BlobKey)
		}
		if opened[e.BlobKey] {
			continue
		}
		opened[e.BlobKey] = true
		r, err := db.OpenEntry(ctx, &e)
		var got []byte
		if err == nil {
			got, err = io.ReadAll(r)
			r.Close()
		}
		entryResult(t, h, "OpenEntry "+e.Path, e.BlobKey, e.Path, got, s.blobs[e.BlobKey], err)
	}
	out := filepath.Join(t.TempDir(), "restored")
	_, err := db.Restore(ctx, cp.ID, out, nil)
	switch {
	case len(hit) > 0:
		named := slices.ContainsFunc(hit, func(k string) bool { return err != nil && strings.Contains(err.Error(), k) })
		if c := chain.Code(err); (c != chain.CodeInvalidBlob && c != chain.CodeMissingBlob) || !named {
			t.Errorf("Restore(%s) over damaged blobs: %v; want INVALID_BLOB or MISSING_BLOB naming one of %v", cp.ID, err, hit)
		}
		if h.gone(hit[0]) && len(hit) == 1 && chain.Code(err) != chain.CodeMissingBlob {
			t.Errorf("Restore(%s) over a missing blob: %v; want MISSING_BLOB", cp.ID, err)
		}
		if _, serr := os.Lstat(out); !os.IsNotExist(serr) {
			t.Errorf("failed Restore(%s) left %s behind", cp.ID, out)
		}
	case err != nil:
		t.Errorf("Restore(%s): %v", cp.ID, err)
	default:
		if d := fstree.Diff(s.trees[cp.ID], snapshot(t, out)); d != nil {
			t.Errorf("Restore(%s) wrote another tree:\n%s", cp.ID, strings.Join(d, "\n"))
		}
	}
}

// entryResult checks what reading one file entry's blob gave.
func entryResult(t *testing.T, h harm, what, key, path string, got, want []byte, err error) {
	t.Helper()
	switch {
	case h.damaged(key) || h.gone(key):
		wantCode := chain.CodeInvalidBlob
		if h.gone(key) {
			wantCode = chain.CodeMissingBlob
		}
		if chain.Code(err) != wantCode || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v; want %s naming %s and its path", what, err, wantCode, key)
		}
	case err != nil:
		t.Errorf("%s: %v", what, err)
	case !bytes.Equal(got, want):
		t.Errorf("%s returned wrong bytes as good", what)
	}
}

// corruptCheck checks a check report against the harm done: a finding names
// every damaged thing, and no blob finding names an undamaged blob.
func corruptCheck(t *testing.T, h harm, rep *sbxdb.CheckReport) {
	t.Helper()
	names := func(subject string) bool {
		return slices.ContainsFunc(rep.Findings, func(f sbxdb.Finding) bool {
			return f.Severity == sbxdb.SeverityError && f.Subject == subject
		})
	}
	var want []string
	want = append(want, h.keys...)
	want = append(want, h.missing...)
	want = append(want, h.records...)
	want = append(want, h.subject...)
	for _, subject := range want {
		if !names(subject) {
			t.Errorf("no check finding names %s: %v", subject, rep.Findings)
		}
	}
	if h.pack != "" && !slices.ContainsFunc(rep.Findings, func(f sbxdb.Finding) bool {
		return f.Severity == sbxdb.SeverityError && strings.Contains(f.Detail, strings.TrimSuffix(h.pack, ".pack"))
	}) {
		t.Errorf("no check finding names pack %s: %v", h.pack, rep.Findings)
	}
	if h.chunk && !slices.ContainsFunc(rep.Findings, func(f sbxdb.Finding) bool {
		return f.Kind == sbxdb.FindingChunk && strings.Contains(f.Detail, "damaged")
	}) {
		t.Errorf("no check finding about the damaged chunk: %v", rep.Findings)
	}
	if h.metaPage && !slices.ContainsFunc(rep.Findings, func(f sbxdb.Finding) bool {
		return f.Kind == sbxdb.FindingMetaPage && f.Severity == sbxdb.SeverityWarning && f.Subject == engine.DBFile
	}) {
		t.Errorf("no check warning about the damaged meta page: %v", rep.Findings)
	}
	for _, f := range rep.Findings {
		switch f.Kind {
		case sbxdb.FindingMetaPage:
			if !h.metaPage {
				t.Errorf("unexpected finding: %v", f)
			}
		case sbxdb.FindingBlob, sbxdb.FindingMissingBlob:
			if f.Subject != "" && !slices.Contains(want, f.Subject) {
				t.Errorf("finding about an undamaged blob: %v", f)
			}
		case sbxdb.FindingRefCount, sbxdb.FindingChunk, sbxdb.FindingDanglingParent, sbxdb.FindingOffChain:
			// A damaged record's keys and chunks go uncounted, its
			// children dangle.
			if len(h.records) == 0 && len(h.lost) == 0 {
				t.Errorf("unexpected finding: %v", f)
			}
		default:
			if !slices.Contains(want, f.Subject) {
				t.Errorf("unexpected finding: %v", f)
			}
		}
	}
	if len(want) == 0 && h.pack == "" && !h.metaPage && len(rep.Findings) != 0 {
		t.Errorf("findings in an undamaged store: %v", rep.Findings)
	}
}

// The newest meta page damaged right after an append: bbolt opens the
// store as it was before that transaction (its recovery from a torn meta
// write), so the checkpoint is gone; what is left reads back intact, and
// check warns that the store opened on its older meta page.
func TestCorruptNewestMetaLosesLastTransaction(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	db, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := db.AcquireWriter(ctx, "th")
	for i, id := range []string{"first", "second"} {
		parent := ""
		if i > 0 {
			parent = "first"
		}
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: checkpoint(id, "th", parent), ExpectedHeadID: parent, Writer: l.Writer}); err != nil {
			t.Fatal(err)
		}
	}
	db.CloseAsCrashed() // a clean Close would commit once more
	flipNewestMeta(t, dir)
	noPanic(t, "open", func() {
		db, err := engine.Open(dir, &engine.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if h, err := db.Head(ctx, "th"); h != "first" || err != nil {
			t.Errorf("Head = %q, %v; want the previous transaction's head", h, err)
		}
		if cp, err := db.Get(ctx, "second"); cp != nil || err != nil {
			t.Errorf("Get(second) = %v, %v", cp, err)
		}
		if cp, err := db.Get(ctx, "first"); err != nil || cp == nil || cp.Label != "label-first" {
			t.Errorf("Get(first) = %v, %v", cp, err)
		}
		// Open's own commit has overwritten the damaged page by now;
		// check still says what happened.
		rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{})
		if err != nil || !slices.ContainsFunc(rep.Findings, func(f sbxdb.Finding) bool { return f.Kind == sbxdb.FindingMetaPage }) {
			t.Errorf("check = %+v, %v; want a meta-page warning", rep, err)
		}
	})
	// A later check, by another handle (sbxdb check in another process
	// opens read-only), still finds the note; a repair clears it.
	for _, pass := range []struct {
		readOnly, repair, want bool
	}{{true, false, true}, {false, true, true}, {true, false, false}} {
		db, err := engine.Open(dir, &engine.Options{ReadOnly: pass.readOnly, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{Repair: pass.repair})
		db.Close()
		got := err == nil && slices.ContainsFunc(rep.Findings, func(f sbxdb.Finding) bool { return f.Kind == sbxdb.FindingMetaPage })
		if got != pass.want {
			t.Errorf("check (read-only %v, repair %v): meta-page warning %v, want %v (%v)", pass.readOnly, pass.repair, got, pass.want, err)
		}
	}
}
