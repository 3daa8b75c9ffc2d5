package capture

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
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

// StatCacheDir is the directory, in the store's, of the stat caches.
const StatCacheDir = "cache"

// StatCachePath is the stat cache of the captures of threadID from the
// workspace at root (absolute) into the store in storeDir.
func StatCachePath(storeDir, threadID, root string) string {
	h := sha256.New()
	h.Write([]byte(threadID))
	h.Write([]byte{0})
	h.Write([]byte(root))
	return filepath.Join(storeDir, StatCacheDir, "stat-"+hex.EncodeToString(h.Sum(nil)[:16]))
}

// encodeStatCache returns the cache a capture leaves, encoded: every file
// of its walk (sorted by path, as the walk is) but those that changed
// while read, with the stat of the bytes stored and their digest, for a
// capture that began walking at taken under the secrets whose fingerprint
// is secrets. It is built in one buffer sized up front.
func encodeStatCache(taken int64, secrets [32]byte, tree []*walked) []byte {
	var salt [16]byte
	rand.Read(salt[:])
	verifier := secretsVerifier(salt, secrets)
	n, size := 0, 0
	for _, w := range tree {
		if w.kind == chain.KindFile && !w.unstable {
			n++
			size += len(w.path) + maxStatEntry
		}
	}
	b := make([]byte, 0, len(statCacheMagic)+3*binary.MaxVarintLen64+len(salt)+len(verifier)+size+8)
	b = append(b, statCacheMagic...)
	b = binary.AppendVarint(b, taken)
	b = append(b, salt[:]...)
	b = append(b, verifier[:]...)
	b = binary.AppendUvarint(b, uint64(n))
	for _, w := range tree {
		if w.kind == chain.KindFile && !w.unstable {
			b = appendStatEntry(b, w.path, &w.st, &w.sum)
		}
	}
	return binary.LittleEndian.AppendUint64(b, xxhash.Sum64(b))
}

// maxStatEntry bounds an entry's encoded size beyond its path's bytes: the
// path's length, five varints, the digest.
const maxStatEntry = 6*binary.MaxVarintLen64 + 32

func appendStatEntry(b []byte, path string, st *fileStat, sum *[32]byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(path)))
	b = append(b, path...)
	b = binary.AppendVarint(b, st.size)
	b = binary.AppendVarint(b, st.mtime)
	b = binary.AppendVarint(b, st.ctime)
	b = binary.AppendUvarint(b, st.ino)
	b = binary.AppendUvarint(b, uint64(st.mode))
	return append(b, sum[:]...)
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
	if err != nil {
		return &statCache{}
	}
	return loadStatCacheBytes(b, secrets)
}

// loadStatCacheBytes decodes an encoded cache (see loadStatCache), which
// takes b: the entries' paths are substrings of b, which must never be
// written again. Decoding allocates the entry slice, nothing per entry.
func loadStatCacheBytes(b []byte, secrets [32]byte) *statCache {
	if len(b) < len(statCacheMagic)+8 || string(b[:len(statCacheMagic)]) != statCacheMagic {
		return &statCache{}
	}
	body := b[:len(b)-8]
	if binary.LittleEndian.Uint64(b[len(b)-8:]) != xxhash.Sum64(body) {
		return &statCache{}
	}
	// b is never written again: its string view saves copying it.
	d := &statDecoder{b: body, s: unsafe.String(unsafe.SliceData(body), len(body)), pos: len(statCacheMagic)}
	c := &statCache{taken: d.varint()}
	copy(c.salt[:], d.fixed(16))
	copy(c.verifier[:], d.fixed(32))
	if d.bad || c.verifier != secretsVerifier(c.salt, secrets) {
		return &statCache{}
	}
	// Every entry takes at least 1+5+32 bytes: a forged count cannot
	// force a large allocation.
	n := d.uvarint()
	if n > uint64(len(body)-d.pos)/(1+5+32) {
		return &statCache{}
	}
	c.entries = make([]statEntry, n)
	for i := range c.entries {
		e := &c.entries[i]
		e.path = d.str()
		e.st.size = d.varint()
		e.st.mtime = d.varint()
		e.st.ctime = d.varint()
		e.st.ino = d.uvarint()
		e.st.mode = uint32(d.uvarint())
		copy(e.sum[:], d.fixed(32))
	}
	if d.bad || d.pos != len(body) {
		return &statCache{}
	}
	return c
}

// statDecoder reads what encodeStatCache wrote: b and s hold the same
// bytes, and strings are cut from s. Past the first malformed field it
// returns zero values and sets bad; it never panics.
type statDecoder struct {
	b   []byte
	s   string
	pos int
	bad bool
}

func (d *statDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b[d.pos:])
	if n <= 0 {
		d.bad, d.pos = true, len(d.b)
		return 0
	}
	d.pos += n
	return v
}

func (d *statDecoder) varint() int64 {
	v, n := binary.Varint(d.b[d.pos:])
	if n <= 0 {
		d.bad, d.pos = true, len(d.b)
		return 0
	}
	d.pos += n
	return v
}

// take returns the position of the next n bytes and skips them.
func (d *statDecoder) take(n uint64) (int, bool) {
	if n > uint64(len(d.b)-d.pos) {
		d.bad, d.pos = true, len(d.b)
		return 0, false
	}
	at := d.pos
	d.pos += int(n)
	return at, true
}

func (d *statDecoder) fixed(n int) []byte {
	at, ok := d.take(uint64(n))
	if !ok {
		return nil
	}
	return d.b[at : at+n]
}

func (d *statDecoder) str() string {
	n := d.uvarint()
	at, ok := d.take(n)
	if !ok {
		return ""
	}
	return d.s[at : at+int(n)]
}

// save writes the cache atomically (rename); errors are ignored because a
// missing cache only costs time.
func (c *statCache) save(path string) {
	b := make([]byte, 0, 1024)
	b = append(b, statCacheMagic...)
	b = binary.AppendVarint(b, c.taken)
	b = append(b, c.salt[:]...)
	b = append(b, c.verifier[:]...)
	b = binary.AppendUvarint(b, uint64(len(c.entries)))
	for i := range c.entries {
		b = appendStatEntry(b, c.entries[i].path, &c.entries[i].st, &c.entries[i].sum)
	}
	b = binary.LittleEndian.AppendUint64(b, xxhash.Sum64(b))
	if tmp := writeStatCacheTemp(path, b); tmp != "" {
		os.Rename(tmp, path)
	}
}

// writeStatCacheTemp writes an encoded cache beside path, to be renamed
// over it, and returns the file written, or "" if it could not be.
func writeStatCacheTemp(path string, b []byte) string {
	os.MkdirAll(filepath.Dir(path), 0o755)
	tmp := path + ".tmp"
	if os.WriteFile(tmp, b, 0o600) != nil {
		os.Remove(tmp)
		return ""
	}
	return tmp
}

// keys returns the blob key of every entry, in entry order, and keeps each
// in its entry for lookup. The keys are cut from one string, allocated
// once.
func (c *statCache) keys() []string {
	prefix := cas.Files.Prefix()
	size := len(prefix) + hex.EncodedLen(32)
	arena := make([]byte, len(c.entries)*size)
	for i := range c.entries {
		k := arena[i*size : (i+1)*size]
		copy(k, prefix)
		hex.Encode(k[len(prefix):], c.entries[i].sum[:])
	}
	all := unsafe.String(unsafe.SliceData(arena), len(arena)) // arena is never written again
	keys := make([]string, len(c.entries))
	for i := range c.entries {
		c.entries[i].key = all[i*size : (i+1)*size]
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
