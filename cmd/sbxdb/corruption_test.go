package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
	bolt "go.etcd.io/bbolt"
)

// sbxdb check over the corruption matrix of engine/corruption_test.go: the
// command opens the store read-only, which is another path through bbolt
// than the engine tests' writable opens. Each case damages one thing in a
// copy of a store built by capture; check must exit 1 and either report a
// finding naming the damaged thing or, for damage bbolt cannot read past,
// fail with one line naming the database file. Damage bbolt recovers from
// (an older meta page) must leave a clean check.

// dmgStore builds the store: two captures on thread main, with two packs
// (one per capture) and a large blob file.
func dmgStore(t *testing.T) (store string, keys map[string]string) {
	t.Helper()
	store, ws := filepath.Join(t.TempDir(), "store"), t.TempDir()
	files := tree{
		"a.txt":   strings.Repeat("alpha ", 500),
		"b.txt":   strings.Repeat("bravo ", 400),
		"big.txt": strings.Repeat("a large blob, a file of its own ", 50_000), // over 1 MiB
	}
	// Twenty entries sharing one blob, and a long label: records too big
	// to be stored inline (the manifest lives in chunks), so the
	// checkpoints bucket has a leaf page of its own.
	for i := range 20 {
		files[fmt.Sprintf("docs/chapter-%02d-of-the-manual.md", i)] = "the same text\n"
	}
	makeTree(t, ws, files)
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp1", "--label", "MARKER-cp1-6f1ed002ab5595859014ebf0951522d9 "+strings.Repeat("label ", 200))
	makeTree(t, ws, tree{"c.txt": strings.Repeat("charlie ", 300)})
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp2")
	keys = map[string]string{}
	for p, c := range files {
		keys[p] = testkit.FileKeyOf(c)
	}
	keys["c.txt"] = testkit.FileKeyOf(strings.Repeat("charlie ", 300))
	ok(t, "check", "--db", store, "--verify-blobs")
	return store, keys
}

func dmgCopy(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// dmgPack returns the pack file holding key and the offset and stored
// size of its frame (a block's, for a small blob), parsing the packs
// (cas/format.go: 64-byte headers, frame version at 4, codec at 5, stored
// size at 16, then a blob frame's sha256 or a block's member count at 24;
// a block's payload decodes to rows of sha256 and uvarint size).
func dmgPack(t *testing.T, store, key string) (path string, off, stored int64) {
	t.Helper()
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	packs, _ := filepath.Glob(filepath.Join(store, "blobs", "packs", "*.pack"))
	for _, p := range packs {
		b, _ := os.ReadFile(p)
		for o := 0; o+64 <= len(b); {
			n := int64(binary.LittleEndian.Uint64(b[o+16:]))
			ns := cas.Namespace(b[o+6])
			keys := []string{ns.Key([32]byte(b[o+24 : o+56]))}
			if b[o+4] == 2 {
				keys = nil
				payload := b[o+64 : o+64+int(n)]
				if b[o+5] == 1 {
					payload, _ = dec.DecodeAll(payload, nil)
				}
				for range binary.LittleEndian.Uint32(b[o+24:]) {
					keys = append(keys, ns.Key([32]byte(payload[:32])))
					_, w := binary.Uvarint(payload[32:])
					payload = payload[32+w:]
				}
			}
			if slices.Contains(keys, key) {
				return p, int64(o), n
			}
			o += 64 + int(n)
		}
	}
	t.Fatalf("no frame of %s", key)
	return "", 0, 0
}

// dmgBolt returns the page size, the checkpoints bucket's root page and the
// transaction ids of the two meta pages.
func dmgBolt(t *testing.T, store string) (pageSize int64, root uint64, txid [2]uint64) {
	t.Helper()
	path := filepath.Join(store, engine.DBFile)
	db, err := bolt.Open(path, 0o644, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bolt.Tx) error { root = uint64(tx.Bucket([]byte("checkpoints")).Root()); return nil })
	pageSize = int64(db.Info().PageSize)
	db.Close()
	if root == 0 {
		t.Fatal("the checkpoints bucket is inline: make the records bigger")
	}
	b, _ := os.ReadFile(path)
	txid[0], txid[1] = binary.LittleEndian.Uint64(b[16+48:]), binary.LittleEndian.Uint64(b[pageSize+16+48:])
	return pageSize, root, txid
}

func TestCorruptCheckCommand(t *testing.T) {
	src, keys := dmgStore(t)
	large := func(store, key string) string {
		h := strings.TrimPrefix(key, chain.FilePrefix)
		return filepath.Join(store, "blobs", "large", "files", h[:2], h)
	}
	dbFile := func(store string) string { return filepath.Join(store, engine.DBFile) }
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, store string) (subject, detail string)
		// refused: check fails with one line naming the database file;
		// metaPage: check passes with one warning, that the store opened
		// on its older meta page.
		refused, metaPage bool
	}{
		{name: "packed frame payload flipped", damage: func(t *testing.T, store string) (string, string) {
			p, off, n := dmgPack(t, store, keys["a.txt"])
			testkit.FlipByte(t, p, off+64+n/2)
			return keys["a.txt"], ""
		}},
		{name: "packed frame header flipped", damage: func(t *testing.T, store string) (string, string) {
			p, off, _ := dmgPack(t, store, keys["b.txt"])
			testkit.FlipByte(t, p, off+20)
			return keys["b.txt"], ""
		}},
		{name: "pack truncated in its last frame", damage: func(t *testing.T, store string) (string, string) {
			p, off, n := dmgPack(t, store, keys["c.txt"]) // cp2's pack holds it alone
			os.Truncate(p, off+64+n/2)
			return keys["c.txt"], strings.TrimSuffix(filepath.Base(p), ".pack")
		}},
		{name: "pack missing", damage: func(t *testing.T, store string) (string, string) {
			p, _, _ := dmgPack(t, store, keys["c.txt"])
			os.Remove(p)
			return keys["c.txt"], strings.TrimSuffix(filepath.Base(p), ".pack")
		}},
		{name: "large file flipped", damage: func(t *testing.T, store string) (string, string) {
			st, _ := os.Stat(large(store, keys["big.txt"]))
			testkit.FlipByte(t, large(store, keys["big.txt"]), st.Size()/2)
			return keys["big.txt"], ""
		}},
		{name: "large file truncated", damage: func(t *testing.T, store string) (string, string) {
			st, _ := os.Stat(large(store, keys["big.txt"]))
			os.Truncate(large(store, keys["big.txt"]), st.Size()/2)
			return keys["big.txt"], ""
		}},
		{name: "large file missing", damage: func(t *testing.T, store string) (string, string) {
			os.Remove(large(store, keys["big.txt"]))
			return keys["big.txt"], ""
		}},
		{name: "pack index value flipped", damage: func(t *testing.T, store string) (string, string) {
			db, err := bolt.Open(dbFile(store), 0o644, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			k := []byte(keys["a.txt"])
			db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("cas_index"))
				v := bytes.Clone(b.Get(k))
				v[3] ^= 1
				return b.Put(k, v)
			})
			return keys["a.txt"], ""
		}},
		{name: "checkpoint record flipped", damage: func(t *testing.T, store string) (string, string) {
			b, _ := os.ReadFile(dbFile(store))
			m := []byte("MARKER-cp1-6f1ed002ab5595859014ebf0951522d9")
			for i := bytes.Index(b, m); i >= 0; i = bytes.Index(b, m) {
				b[i+len(m)/2] ^= 0x20
			}
			os.WriteFile(dbFile(store), b, 0o644)
			return "cp1", ""
		}},
		{name: "checkpoints leaf element count lowered", damage: func(t *testing.T, store string) (string, string) {
			pageSize, root, _ := dmgBolt(t, store)
			b, _ := os.ReadFile(dbFile(store))
			p := b[int64(root)*pageSize:]
			if binary.LittleEndian.Uint16(p[8:]) != 0x02 || binary.LittleEndian.Uint16(p[10:]) != 2 {
				t.Fatal("the checkpoints bucket is not one leaf of 2 records")
			}
			binary.LittleEndian.PutUint16(p[10:], 1) // cp2 is gone from its bucket
			os.WriteFile(dbFile(store), b, 0o644)
			return "cp2", ""
		}},
		{name: "checkpoints leaf page header flipped", refused: true, damage: func(t *testing.T, store string) (string, string) {
			pageSize, root, _ := dmgBolt(t, store)
			testkit.FlipByte(t, dbFile(store), int64(root)*pageSize)
			return "", ""
		}},
		{name: "checkpoints leaf element flipped", refused: true, damage: func(t *testing.T, store string) (string, string) {
			pageSize, root, _ := dmgBolt(t, store)
			testkit.FlipByte(t, dbFile(store), int64(root)*pageSize+16+8+1)
			return "", ""
		}},
		{name: "older meta page damaged", metaPage: true, damage: func(t *testing.T, store string) (string, string) {
			pageSize, _, txid := dmgBolt(t, store)
			older := int64(0)
			if txid[1] < txid[0] {
				older = pageSize
			}
			testkit.FlipByte(t, dbFile(store), older+16+16)
			return "", ""
		}},
		{name: "newer meta page damaged", metaPage: true, damage: func(t *testing.T, store string) (string, string) {
			// bbolt reads the store as of the transaction before: capture's
			// last is its lease release.
			pageSize, _, txid := dmgBolt(t, store)
			newer := int64(0)
			if txid[1] > txid[0] {
				newer = pageSize
			}
			testkit.FlipByte(t, dbFile(store), newer+16+16)
			return "", ""
		}},
		{name: "both meta pages damaged", refused: true, damage: func(t *testing.T, store string) (string, string) {
			pageSize, _, _ := dmgBolt(t, store)
			testkit.FlipByte(t, dbFile(store), 16+16)
			testkit.FlipByte(t, dbFile(store), pageSize+16+16)
			return "", ""
		}},
		{name: "database file truncated to half", refused: true, damage: func(t *testing.T, store string) (string, string) {
			pageSize, _, txid := dmgBolt(t, store)
			b, _ := os.ReadFile(dbFile(store))
			m := b[16:]
			if txid[1] > txid[0] {
				m = b[pageSize+16:]
			}
			os.Truncate(dbFile(store), int64(binary.LittleEndian.Uint64(m[40:]))*pageSize/2) // half the pages in use
			return "", ""
		}},
		{name: "database file truncated to zero", refused: true, damage: func(t *testing.T, store string) (string, string) {
			os.Truncate(dbFile(store), 0)
			return "", ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := dmgCopy(t, src)
			subject, detail := tc.damage(t, store)
			code, out, errOut := cli(t, "check", "--db", store, "--verify-blobs", "--json")
			switch {
			case tc.refused:
				// --json: the failure alone, as JSON on standard output.
				if e := decode[jsonError](t, out).Error; code != exitDamaged || errOut != "" || e.Code != codeCorrupt ||
					!strings.HasPrefix(e.Message, "corrupt") || !strings.Contains(e.Message, dbFile(store)) || strings.Count(out, "\n") != 1 {
					t.Fatalf("check --json: exit %d, stdout %q, stderr %q; want exit 12 and a JSON error saying %s is corrupt", code, out, errOut, dbFile(store))
				}
				code, out, errOut := cli(t, "check", "--db", store, "--verify-blobs")
				if code != exitDamaged || out != "" || !strings.HasPrefix(errOut, "sbxdb: corrupt") || !strings.Contains(errOut, dbFile(store)) || strings.Count(errOut, "\n") != 1 {
					t.Fatalf("check: exit %d, stdout %q, stderr %q; want one line saying %s is corrupt", code, out, errOut, dbFile(store))
				}
				return
			case tc.metaPage:
				if code != 0 || errOut != "" {
					t.Fatalf("check: exit %d, stdout %q, stderr %q; want a store with one warning", code, out, errOut)
				}
			case code != exitDamaged || errOut != "":
				// --json: the report says what is wrong, the exit status that something is.
				t.Fatalf("check: exit %d, stdout %q, stderr %q; want exit 12 and findings", code, out, errOut)
			}
			var rep sbxdb.CheckReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("check --json: %v: %q", err, out)
			}
			if tc.metaPage {
				if len(rep.Findings) != 1 || rep.Findings[0].Kind != sbxdb.FindingMetaPage || rep.Findings[0].Severity != sbxdb.SeverityWarning || rep.Checkpoints != 2 {
					t.Fatalf("check of a store with a damaged meta page: %+v", rep)
				}
				return
			}
			found, foundDetail := false, detail == ""
			for _, f := range rep.Findings {
				if f.Severity == sbxdb.SeverityError && f.Subject == subject {
					found = true
				}
				if f.Severity == sbxdb.SeverityError && detail != "" && strings.Contains(f.Detail, detail) {
					foundDetail = true
				}
			}
			if !found || !foundDetail {
				t.Fatalf("no finding names %s %s: %+v", subject, detail, rep.Findings)
			}
			// The text form says so too, on a line of its own.
			if code, out, errOut := cli(t, "check", "--db", store, "--verify-blobs"); code != exitDamaged || !strings.Contains(out, subject) || errOut != "sbxdb: the store has problems (see above)\n" {
				t.Errorf("check (text): exit %d, %q, stderr %q; want %s named", code, out, errOut, subject)
			}
		})
	}
}
