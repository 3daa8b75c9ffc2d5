package capture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
)

// statTree is a walk of n files, every third one unstable, with a
// directory and a symlink among them.
func statTree(n int) []*walked {
	tree := []*walked{{path: "a-dir", kind: chain.KindDir}, {path: "a-link", kind: chain.KindSymlink, target: "x"}}
	for i := range n {
		w := walked{path: fmt.Sprintf("d%d/f%03d", i%4, i), kind: chain.KindFile, unstable: i%3 == 2,
			st: fileStat{size: int64(i * 100), mtime: int64(i) << 32, ctime: -int64(i), ino: uint64(i) << 40, mode: 0o100644}}
		w.sum[0], w.sum[31] = byte(i), byte(i>>8)
		tree = append(tree, &w)
	}
	return tree
}

// TestStatCacheEncoding checks that a cache reads back as written: every
// stable file of the walk in order, with its stat, digest and key, and
// that the secrets' verifier decides whether it is read at all.
func TestStatCacheEncoding(t *testing.T) {
	var secrets [32]byte
	tree := statTree(50)
	b := encodeStatCache(12345, secrets, tree)
	c := loadStatCacheBytes(bytes.Clone(b), secrets)
	if c.taken != 12345 {
		t.Fatalf("taken %d", c.taken)
	}
	keys := c.keys()
	i := 0
	for _, w := range tree {
		if w.kind != chain.KindFile || w.unstable {
			continue
		}
		if i == len(c.entries) {
			t.Fatalf("%s missing", w.path)
		}
		e := c.entries[i]
		if e.path != w.path || e.st != w.st || e.sum != w.sum || keys[i] != cas.Files.Key(w.sum) || e.key != keys[i] {
			t.Fatalf("entry %d is %+v, want %s %+v %x", i, e, w.path, w.st, w.sum)
		}
		i++
	}
	if i != len(c.entries) {
		t.Fatalf("%d entries, want %d", len(c.entries), i)
	}
	secrets[0] = 1
	if c := loadStatCacheBytes(b, secrets); len(c.entries) != 0 {
		t.Fatal("a cache taken under other secrets was read")
	}
}

// TestStatCacheDamage feeds the decoder damaged caches whose checksum
// still matches: truncations and random byte changes. Each must read as
// an empty cache or as a well-formed one, never panic.
func TestStatCacheDamage(t *testing.T) {
	var secrets [32]byte
	good := encodeStatCache(1, secrets, statTree(30))
	body := good[:len(good)-8]
	seal := func(body []byte) []byte {
		return binary.LittleEndian.AppendUint64(bytes.Clone(body), xxhash.Sum64(body))
	}
	check := func(b []byte) {
		t.Helper()
		c := loadStatCacheBytes(b, secrets)
		for _, e := range c.entries {
			if len(e.path) > len(b) {
				t.Fatalf("a path of %d bytes from a cache of %d", len(e.path), len(b))
			}
		}
		c.keys()
	}
	for n := range len(body) {
		check(seal(body[:n]))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		b := bytes.Clone(body)
		for range 1 + r.IntN(4) {
			b[len(statCacheMagic)+r.IntN(len(b)-len(statCacheMagic))] = byte(r.Uint32())
		}
		check(seal(b))
	}
	bad := bytes.Clone(good)
	bad[len(bad)/2]++
	if c := loadStatCacheBytes(bad, secrets); len(c.entries) != 0 {
		t.Fatal("a cache whose checksum fails was read")
	}
}
