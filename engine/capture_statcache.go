package engine

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// The stat cache lets a capture skip reading files that did not change: for
// each file of the previous capture of the same workspace directory into the
// same thread it remembers (size, mtime, ctime, inode, mode) and the blob
// digest of the bytes read. A file whose stat is identical, and whose mtime
// is safely older than the moment that capture began, is not read again.
//
// "Safely older" is git's racy-clean rule: a file modified in the same
// timestamp tick as the capture that read it could change again without its
// mtime moving, so only an mtime more than racyWindow before the cached
// capture's start is trusted. Entries inside the window are re-hashed, and
// the cache rewritten, at the next capture.
//
// The cache is a plain file under <store>/cache, keyed by the sha256 of
// (thread id, absolute workspace path), written by rename and never synced:
// losing it, or finding it damaged (its xxhash64 trailer), costs a full
// re-hash and nothing else. It maps stats to content, never to checkpoint
// ids (SPEC §10 Q18), and a capture checks that every blob it takes from the
// cache is still stored before relying on it.
//
// Each entry holds the stat of the bytes its digest was made from: the
// capture's fstat of the open file once read, which equalled the stat
// before the read. A file that kept changing while it was read is left
// out, so it is read again next time.
//
// Limits: the cache trusts that a change to a file's bytes moves its
// mtime or ctime (or its size or inode). Writes through a shared mmap do
// not, while the written pages stay dirty: the kernel updates the times
// when a clean page is first written, not on later stores to a page
// already dirty, so such a write after a capture read the file can leave
// its stat as it was. Filesystems with coarse timestamps, or tools that
// set mtime back and write within one ctime tick, can do the same. Hosts
// that write files that way capture with CaptureInput.Rehash (sbxdb
// capture --rehash), which reads and hashes every file; blobs already
// stored are still not written twice.

// racyWindow covers filesystems whose timestamps are coarser than the
// clock (a jiffy on Linux, one or two seconds on others).
const racyWindow = 2 * time.Second

const statCacheMagic = "sbxstat1"

// fileStat is what the cache compares.
type fileStat struct {
	size  int64
	mtime int64 // ns
	ctime int64 // ns
	ino   uint64
	mode  uint32
}

type statEntry struct {
	path string
	st   fileStat
	sum  [32]byte
	key  string // the blob key of sum, made by keys
}

// statCache is one workspace's cache: entries sorted by path.
type statCache struct {
	taken    int64    // Unix ns at which the capture that wrote it began walking
	salt     [16]byte // random per file
	verifier [32]byte // sha256(salt, secrets fingerprint): see secretsVerifier
	entries  []statEntry
}

// statCacheDir is the directory, in the store's, of the stat caches.
const statCacheDir = "cache"

func statCachePath(storeDir, threadID, root string) string {
	h := sha256.New()
	h.Write([]byte(threadID))
	h.Write([]byte{0})
	h.Write([]byte(root))
	return filepath.Join(storeDir, statCacheDir, "stat-"+hex.EncodeToString(h.Sum(nil)[:16]))
}

// newStatCache returns the cache a capture leaves: every file of its walk
// (sorted by path, as the walk is) but those that changed while read, with
// the stat of the bytes stored and their digest, for a capture that began
// walking at taken under the secrets whose fingerprint is secrets.
func newStatCache(taken int64, secrets [32]byte, tree []walked) *statCache {
	c := &statCache{taken: taken}
	rand.Read(c.salt[:])
	c.verifier = secretsVerifier(c.salt, secrets)
	for i := range tree {
		if w := &tree[i]; w.kind == chain.KindFile && !w.unstable {
			c.entries = append(c.entries, statEntry{path: w.path, st: w.st, sum: w.sum})
		}
	}
	return c
}

// secretsVerifier tells whether a cache was taken under the same secrets
// (digests of redacted files depend on them) without storing the secrets'
// plain fingerprint: it is salted, so equal secrets do not look equal across
// caches. Like any verifier it allows testing a guess; the secrets it guards
// are credentials, long enough not to be guessed, and the file is 0600.
func secretsVerifier(salt [16]byte, secrets [32]byte) [32]byte {
	return sha256.Sum256(append(salt[:], secrets[:]...))
}

// loadStatCache returns the cache at path, or an empty one when it is
// missing, damaged or was taken under other secrets.
func loadStatCache(path string, secrets [32]byte) *statCache {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < len(statCacheMagic)+8 || string(b[:len(statCacheMagic)]) != statCacheMagic {
		return &statCache{}
	}
	body := b[:len(b)-8]
	if binary.LittleEndian.Uint64(b[len(b)-8:]) != xxhash.Sum64(body) {
		return &statCache{}
	}
	d := meta.NewDecoder(body[len(statCacheMagic):])
	c := &statCache{taken: d.Varint()}
	copy(c.salt[:], d.Fixed(16))
	copy(c.verifier[:], d.Fixed(32))
	if c.verifier != secretsVerifier(c.salt, secrets) {
		return &statCache{}
	}
	n := d.Count(1 + 5 + 32)
	c.entries = make([]statEntry, 0, n)
	for range n {
		var e statEntry
		e.path = d.String()
		e.st.size = d.Varint()
		e.st.mtime = d.Varint()
		e.st.ctime = d.Varint()
		e.st.ino = d.Uvarint()
		e.st.mode = uint32(d.Uvarint())
		copy(e.sum[:], d.Fixed(32))
		c.entries = append(c.entries, e)
	}
	if d.Err() != nil {
		return &statCache{}
	}
	return c
}

// save writes the cache atomically (rename); errors are ignored because a
// missing cache only costs time.
func (c *statCache) save(path string) {
	e := &meta.Encoder{}
	e.Varint(c.taken)
	e.Fixed(c.salt[:])
	e.Fixed(c.verifier[:])
	e.Uvarint(uint64(len(c.entries)))
	for i := range c.entries {
		x := &c.entries[i]
		e.String(x.path)
		e.Varint(x.st.size)
		e.Varint(x.st.mtime)
		e.Varint(x.st.ctime)
		e.Uvarint(x.st.ino)
		e.Uvarint(uint64(x.st.mode))
		e.Fixed(x.sum[:])
	}
	var buf bytes.Buffer
	buf.WriteString(statCacheMagic)
	buf.Write(e.Bytes())
	buf.Write(binary.LittleEndian.AppendUint64(nil, xxhash.Sum64(buf.Bytes())))
	os.MkdirAll(filepath.Dir(path), 0o755)
	tmp := path + ".tmp"
	if os.WriteFile(tmp, buf.Bytes(), 0o600) == nil {
		os.Rename(tmp, path)
	}
}

// keys returns the blob key of every entry, in entry order, and keeps each
// in its entry for lookup.
func (c *statCache) keys() []string {
	keys := make([]string, len(c.entries))
	for i := range c.entries {
		c.entries[i].key = cas.Files.Key(c.entries[i].sum)
		keys[i] = c.entries[i].key
	}
	return keys
}

// lookup returns the cached digest and key of a file whose stat is st, if
// they may be trusted (the key is "" unless keys was called). Lookups must
// come in increasing path order (a merge with the sorted walk); cursor
// keeps the position.
func (c *statCache) lookup(cursor *int, path string, st fileStat) ([32]byte, string, bool) {
	for *cursor < len(c.entries) && c.entries[*cursor].path < path {
		*cursor++
	}
	if *cursor == len(c.entries) {
		return [32]byte{}, "", false
	}
	e := &c.entries[*cursor]
	if e.path != path || e.st != st || st.mtime >= c.taken-int64(racyWindow) {
		return [32]byte{}, "", false
	}
	return e.sum, e.key, true
}
