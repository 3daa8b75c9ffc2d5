package cas

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
)

// The blob layout, format version 2. This comment and docs/ARCHITECTURE.md
// are the one place it is written down.
//
// Files under the blob directory (<store>/blobs):
//
//	packs/<16 hex>.pack         append-only pack files: frames back to back,
//	                            written by one batch each, never rewritten
//	large/<ns>/<hh>/<64 hex>    one frame per file for blobs written as a
//	                            stream (ns is "files" or "artifacts", hh the
//	                            digest's first two hex digits)
//	tmp/                        large blobs being written, packs being
//	                            downloaded; emptied by Open
//	quarantine/<name>           pack (<16 hex>.pack) and large files
//	                            (<64 hex>.<ns>) the index did not name when
//	                            it may have been older than the files; kept
//	                            until check --repair (quarantine.go)
//
// A frame is a 64-byte header followed by the stored bytes. A blob frame
// (frame version 1) holds one blob:
//
//	0   magic "sbxb"
//	4   frame version (1)
//	5   codec: 0 raw, 1 zstd
//	6   namespace: 0 sandbox-files, 1 sandbox-artifacts
//	7   the zstd level of a large file's frame written by Repack's
//	    recompression (format 3); 0 otherwise
//	8   raw size, uint64 little-endian (the uncompressed length)
//	16  stored size, uint64 little-endian (the bytes after the header)
//	24  sha256 of the raw bytes (the key's digest)
//	56  xxhash64 of bytes 0..55, little-endian
//
// A block frame (frame version 2, written by format 2) holds several small
// blobs of one namespace, compressed together: source files compress about
// 10 % better with their neighbours as context than alone, and one header
// serves them all. Its header is a blob frame's with the raw size being
// the decoded payload's and, in place of the digest, a uint32 member count
// (little-endian, at 24), the xxhash64 of the decoded payload (at 28) and
// 20 zero bytes. The decoded payload is a member table, one row per member
// (its sha256, then its raw size as a uvarint), followed by the members'
// bytes back to back in table order. A block is full once its table and
// bytes reach blockTarget, so a read decodes at most blockTarget plus one
// member and its row; it checks the payload's xxhash64, so
// that any damage to a block fails every member alike, then the member's
// size and sha256.
//
// Every frame names its own keys, so the index can be rebuilt from the
// files. The header checksum catches a damaged header before its sizes are
// trusted; the sha256 of the decompressed bytes is checked on every read,
// so a damaged payload can never be returned as good.
//
// The index lives in the metadata the caller passes to Open (its DB: the
// bbolt file or a shared database):
//
//	cas_meta   "format" → FormatVersion, one byte
//	           "deletions" → uvarint, the transactions that deleted index
//	           entries (absent: none)
//	           "blobs" → "remote" when the blobs are in object storage
//	           (see below)
//	cas_index  key → entry (below), one per stored blob
//	cas_packs  be64(pack id) → pack stats: uvarint total bytes, uvarint dead
//	           bytes, then (format 3) the uvarint zstd level of its frames
//
// An index entry is: where byte (0 blob frame in a pack, 1 large file,
// 2 member of a block frame in a pack), then for 0 and 2 the pack id and
// the frame's offset (uvarints), then for 2 the block's decoded length,
// the member's offset in it and the member's share of the frame's bytes
// (uvarints; the shares of a block's members add up to its frame's size,
// so deleting them all marks the whole frame dead); then the frame's codec byte, the
// blob's raw size (uvarint), the frame's stored size (uvarint), the upload
// time (varint, Unix ms), and an xxhash64 of key and entry. A blob exists
// if and only if it has an index entry: bytes on disk that no entry names
// (a crash between writing and committing) are dead and never read.
//
// A store opened with a remote object store (Options.Remote, remote.go)
// keeps the same frames in objects instead, and its blob directory is only
// a staging area and a cache of packs:
//
//	packs/<16 hex>.pack                 a pack, as above
//	large/<ns>/<hh>/<64 hex>.<16 hex>   a large blob's frame; the suffix
//	                                    is random, drawn for each upload
//
// Its index says so in cas_meta ("blobs" → "remote", set by the first
// writable open with Remote of an empty index): a store opened without
// Remote refuses such an index (ErrFormat), and one opened with Remote
// refuses an index of local blobs, which the bucket does not hold. It
// indexes its large blobs with where 3 (large blob in an object): the
// where byte, then the object's suffix (uvarint), then the fields common
// to every entry as above. A store without Remote never writes where 3,
// and refuses to read such an entry (ErrFormat: the blobs are in object
// storage). The suffix makes every upload of a key a new object, so a
// delete of the object one entry named can never remove an object that
// another server uploaded, and a newer entry names, for the same key.
//
// Format 1 had no block frames and no where 2; format 2 recorded no level
// in the pack stats (its packs were written at zstd.SpeedDefault). A
// format-1 or format-2 store is read as it is, and its first writable open
// stamps format 3, which older builds refuse (ErrFormat) rather than read
// pack stats they cannot decode.

// FormatVersion is the blob layout this build reads and writes.
const FormatVersion = 3

const (
	frameMagic = "sbxb"
	blobFrame  = 1 // frame version of a frame holding one blob
	blockFrame = 2 // frame version of a block of small blobs
	headerSize = 64

	codecRaw  = 0
	codecZstd = 1

	whereNone  = 0xff // a block member whose block is not written yet
	wherePack  = 0
	whereLarge = 1
	whereBlock = 2
	// whereObject: a large blob in a remote object of its own (remote.go).
	whereObject = 3
)

// Blobs of at most blockMemberMax bytes are gathered into block frames; a
// batch writes a block once its members reach blockTarget bytes. Measured
// on the benchmark's 20,000-file tree (bench/README.md), 128 KiB blocks
// store its small files in 11 % fewer bytes than a frame each, where 64 KiB
// blocks save 9 % and 256 KiB ones 12 %: the size bounds what one cat of a
// small file decodes.
const (
	blockTarget    = 128 << 10
	blockMemberMax = 64 << 10
)

var (
	bucketMeta  = []byte("cas_meta")
	bucketIndex = []byte("cas_index")
	bucketPacks = []byte("cas_packs")
	keyFormat   = []byte("format")
	keyBlobs    = []byte("blobs") // "remote" when they are in object storage
	// keyDeletions counts the transactions that deleted index entries
	// (deletions.go).
	keyDeletions = []byte("deletions")
)

// Namespace is one of the two key spaces (SPEC §6.1): equal bytes stored as
// a file and as an artifact are two blobs.
type Namespace byte

// The namespaces; their key prefixes are chain.FilePrefix and
// chain.ArtifactPrefix.
const (
	Files     Namespace = 0
	Artifacts Namespace = 1
)

// Prefix returns the key prefix of ns.
func (ns Namespace) Prefix() string {
	if ns == Artifacts {
		return chain.ArtifactPrefix
	}
	return chain.FilePrefix
}

func (ns Namespace) dir() string {
	if ns == Artifacts {
		return "artifacts"
	}
	return "files"
}

// Key returns the key of the blob in ns whose raw bytes have sha256 sum.
func (ns Namespace) Key(sum [32]byte) string {
	return ns.Prefix() + hex.EncodeToString(sum[:])
}

// ParseKey splits a blob key into its namespace and digest. Only lowercase
// hex is a key, as in the contract's regular expressions.
func ParseKey(key string) (Namespace, [32]byte, error) {
	var sum [32]byte
	if err := sbxdb.CheckBlobKey(key); err != nil {
		return 0, sum, err
	}
	ns, h := Files, key[len(chain.FilePrefix):]
	if strings.HasPrefix(key, chain.ArtifactPrefix) {
		ns, h = Artifacts, key[len(chain.ArtifactPrefix):]
	}
	hex.Decode(sum[:], []byte(h))
	return ns, sum, nil
}

// largePath is the file of a large blob, relative to the blob directory.
func largePath(ns Namespace, sum [32]byte) string {
	h := hex.EncodeToString(sum[:])
	return filepath.Join("large", ns.dir(), h[:2], h)
}

func packPath(id uint64) string {
	return filepath.Join("packs", fmt.Sprintf("%016x.pack", id))
}

// header is a decoded frame header.
type header struct {
	version byte // blobFrame or blockFrame
	codec   byte
	ns      Namespace
	raw     uint64
	stored  uint64
	sum     [32]byte // blob frame: the blob's digest
	members uint32   // block frame: the member count
	level   byte     // blob frame of a large file: its recompression level, or 0
	check   uint64   // block frame: xxhash64 of the decoded payload
}

func (h *header) encode() [headerSize]byte {
	var b [headerSize]byte
	copy(b[0:4], frameMagic)
	b[4] = h.version
	b[5] = h.codec
	b[6] = byte(h.ns)
	b[7] = h.level
	binary.LittleEndian.PutUint64(b[8:], h.raw)
	binary.LittleEndian.PutUint64(b[16:], h.stored)
	if h.version == blockFrame {
		binary.LittleEndian.PutUint32(b[24:], h.members)
		binary.LittleEndian.PutUint64(b[28:], h.check)
	} else {
		copy(b[24:56], h.sum[:])
	}
	binary.LittleEndian.PutUint64(b[56:], xxhash.Sum64(b[:56]))
	return b
}

var errHeader = errors.New("damaged frame header")

func decodeHeader(b []byte) (header, error) {
	var h header
	if len(b) < headerSize || string(b[0:4]) != frameMagic {
		return h, errHeader
	}
	if binary.LittleEndian.Uint64(b[56:]) != xxhash.Sum64(b[:56]) {
		return h, errHeader
	}
	if b[4] < blobFrame || b[4] > blockFrame || b[5] > codecZstd || b[6] > byte(Artifacts) ||
		b[7] > byte(zstd.SpeedBestCompression) || b[7] != 0 && b[4] != blobFrame {
		return h, fmt.Errorf("unknown frame version %d or codec %d", b[4], b[5])
	}
	h.version, h.codec, h.ns, h.level = b[4], b[5], Namespace(b[6]), b[7]
	h.raw = binary.LittleEndian.Uint64(b[8:])
	h.stored = binary.LittleEndian.Uint64(b[16:])
	if h.version == blockFrame {
		h.members = binary.LittleEndian.Uint32(b[24:])
		h.check = binary.LittleEndian.Uint64(b[28:])
		if h.members == 0 || string(b[36:56]) != string(make([]byte, 20)) {
			return h, errHeader
		}
	} else {
		copy(h.sum[:], b[24:56])
	}
	if h.codec == codecRaw && h.raw != h.stored {
		return h, errHeader
	}
	return h, nil
}

// entry is a decoded index entry.
type entry struct {
	where    byte
	pack     uint64 // wherePack, whereBlock: the pack and the frame's offset
	offset   uint64
	blockRaw uint64 // whereBlock: the block's decoded length
	at       uint64 // whereBlock: the member's offset in it
	share    uint64 // whereBlock: the frame bytes the member accounts for
	object   uint64 // whereObject: the object name's random suffix
	codec    byte   // the frame's
	raw      uint64 // the blob's size
	stored   uint64 // the frame's, header excluded
	uploaded int64  // Unix ms
}

// packed reports whether the blob lives in a pack.
func (e *entry) packed() bool { return e.where == wherePack || e.where == whereBlock }

// footprint is the bytes on disk a blob accounts for: its frame, or a
// block member's share of its block's frame. A pack's dead bytes add up
// the footprints of its deleted blobs.
func (e *entry) footprint() uint64 {
	if e.where == whereBlock {
		return e.share
	}
	return headerSize + e.stored
}

// blockShares splits a block frame of frameSize bytes among its members in
// proportion to the payload bytes each accounts for (its table row and its
// bytes; weights add up to the payload's length): share i is the
// difference of the rounded-down cumulative splits, so the shares add up
// to frameSize exactly.
func blockShares(frameSize uint64, weights []uint64) []uint64 {
	var total uint64
	for _, w := range weights {
		total += w
	}
	shares := make([]uint64, len(weights))
	var cum, prev uint64
	for i, w := range weights {
		cum += w
		next := frameSize * cum / total
		shares[i], prev = next-prev, next
	}
	return shares
}

func (e *entry) encode(key string) []byte {
	b := make([]byte, 0, 56)
	b = append(b, e.where)
	if e.where == whereObject {
		b = binary.AppendUvarint(b, e.object)
	}
	if e.packed() {
		b = binary.AppendUvarint(b, e.pack)
		b = binary.AppendUvarint(b, e.offset)
	}
	if e.where == whereBlock {
		b = binary.AppendUvarint(b, e.blockRaw)
		b = binary.AppendUvarint(b, e.at)
		b = binary.AppendUvarint(b, e.share)
	}
	b = append(b, e.codec)
	b = binary.AppendUvarint(b, e.raw)
	b = binary.AppendUvarint(b, e.stored)
	b = binary.AppendVarint(b, e.uploaded)
	return binary.LittleEndian.AppendUint64(b, entrySum(key, b))
}

func entrySum(key string, b []byte) uint64 {
	d := xxhash.New()
	d.WriteString(key)
	d.Write([]byte{0})
	d.Write(b)
	return d.Sum64()
}

var errEntry = errors.New("damaged index entry")

func decodeEntry(key string, b []byte) (entry, error) {
	var e entry
	if len(b) < 9 {
		return e, errEntry
	}
	body := b[:len(b)-8]
	if binary.LittleEndian.Uint64(b[len(b)-8:]) != entrySum(key, body) {
		return e, errEntry
	}
	r := body
	uv := func() uint64 {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			r = nil
			return 0
		}
		r = r[n:]
		return v
	}
	e.where, r = r[0], r[1:]
	if e.where == whereObject {
		e.object = uv()
	}
	if e.packed() {
		e.pack = uv()
		e.offset = uv()
	}
	if e.where == whereBlock {
		e.blockRaw = uv()
		e.at = uv()
		e.share = uv()
	}
	if len(r) == 0 {
		return e, errEntry
	}
	e.codec, r = r[0], r[1:]
	e.raw = uv()
	e.stored = uv()
	v, n := binary.Varint(r)
	if n <= 0 || n != len(r) || e.where > whereObject || e.codec > codecZstd {
		return e, errEntry
	}
	// A packed blob or block is at most MaxPacked: readers size buffers
	// from these fields, so an entry claiming more (with a forged
	// checksum) is damage, not an allocation.
	if e.packed() && (e.raw > MaxPacked || e.stored > MaxPacked+MaxPacked/8) {
		return e, errEntry
	}
	if e.where == whereBlock && (e.blockRaw > MaxPacked || e.at > e.blockRaw || e.raw > e.blockRaw-e.at || e.share > headerSize+e.stored) {
		return e, errEntry
	}
	e.uploaded = v
	return e, nil
}

func packKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// packStats is the value of cas_packs: what a pack holds, how much of it
// no index entry names any more (the repack threshold reads it) and the
// zstd level its frames were compressed at (repack's recompression reads
// it). A level of 0 is not recorded: the pack predates format 3, whose
// writer compressed at zstd.SpeedDefault (see packStats.at).
type packStats struct {
	total, dead uint64
	level       zstd.EncoderLevel
}

// at returns the level the pack's frames were compressed at.
func (p packStats) at() zstd.EncoderLevel {
	if p.level == 0 {
		return zstd.SpeedDefault
	}
	return p.level
}

func (p packStats) encode() []byte {
	b := binary.AppendUvarint(nil, p.total)
	b = binary.AppendUvarint(b, p.dead)
	if p.level != 0 {
		b = binary.AppendUvarint(b, uint64(p.level))
	}
	return b
}

func decodePackStats(b []byte) (packStats, error) {
	var p packStats
	var n int
	if p.total, n = binary.Uvarint(b); n <= 0 {
		return p, errEntry
	}
	b = b[n:]
	if p.dead, n = binary.Uvarint(b); n <= 0 {
		return p, errEntry
	}
	if b = b[n:]; len(b) == 0 {
		return p, nil // format 2: no level
	}
	lv, n := binary.Uvarint(b)
	if n != len(b) || lv < uint64(zstd.SpeedFastest) || lv > uint64(zstd.SpeedBestCompression) {
		return p, errEntry
	}
	p.level = zstd.EncoderLevel(lv)
	return p, nil
}

// member is one row of a block's member table, with the offset of its
// bytes in the decoded payload.
type member struct {
	sum  [32]byte
	size uint64
	at   uint64
}

// appendMemberRow appends one row of a member table.
func appendMemberRow(b []byte, sum [32]byte, size int) []byte {
	b = append(b, sum[:]...)
	return binary.AppendUvarint(b, uint64(size))
}

// memberRowLen is the length of the table row of a member of size bytes.
func memberRowLen(size uint64) uint64 {
	var b [binary.MaxVarintLen64]byte
	return 32 + uint64(binary.PutUvarint(b[:], size))
}

// decodeMembers decodes the member table at the start of a block's decoded
// payload and checks that its members fill the rest exactly.
func decodeMembers(payload []byte, count uint32) ([]member, error) {
	if uint64(count) > uint64(len(payload))/33 {
		return nil, errors.New("block member count exceeds its bytes")
	}
	ms := make([]member, count)
	r := payload
	var total uint64
	for i := range ms {
		if len(r) < 33 {
			return nil, errors.New("block member table is truncated")
		}
		copy(ms[i].sum[:], r)
		v, n := binary.Uvarint(r[32:])
		if n <= 0 || v > uint64(len(payload)) {
			return nil, errors.New("block member table is damaged")
		}
		ms[i].size, total = v, total+v
		r = r[32+n:]
	}
	at := uint64(len(payload) - len(r))
	if total != uint64(len(r)) {
		return nil, fmt.Errorf("block members add up to %d bytes, the block holds %d", total, len(r))
	}
	for i := range ms {
		ms[i].at, at = at, at+ms[i].size
	}
	return ms, nil
}
