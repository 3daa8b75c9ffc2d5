package cas

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cespare/xxhash/v2"
)

// The blob layout, format version 1. This comment and docs/ARCHITECTURE.md
// are the one place it is written down.
//
// Files under the blob directory (<store>/blobs):
//
//	packs/<16 hex>.pack         append-only pack files: frames back to back,
//	                            written by one batch each, never rewritten
//	large/<ns>/<hh>/<64 hex>    one frame per file for blobs written as a
//	                            stream (ns is "files" or "artifacts", hh the
//	                            digest's first two hex digits)
//	tmp/                        large blobs being written; emptied by Open
//
// A frame is a 64-byte header followed by the stored bytes:
//
//	0   magic "sbxb"
//	4   frame version (1)
//	5   codec: 0 raw, 1 zstd
//	6   namespace: 0 sandbox-files, 1 sandbox-artifacts
//	7   reserved, 0
//	8   raw size, uint64 little-endian (the uncompressed length)
//	16  stored size, uint64 little-endian (the bytes after the header)
//	24  sha256 of the raw bytes (the key's digest)
//	56  xxhash64 of bytes 0..55, little-endian
//
// A frame names its own key, so the index can be rebuilt from the files. The
// header checksum catches a damaged header before its sizes are trusted; the
// sha256 of the decompressed bytes is checked on every read, so a damaged
// payload can never be returned as good.
//
// The index lives in the bbolt file the caller passes to Open:
//
//	cas_meta   "format" → uvarint FormatVersion
//	cas_index  key → entry (below), one per stored blob
//	cas_packs  be64(pack id) → pack stats: uvarint total bytes, uvarint dead bytes
//
// An index entry is: where byte (0 pack, 1 large), pack id uvarint (pack
// only), frame offset uvarint (pack only), codec byte, raw size uvarint,
// stored size uvarint, upload time varint (Unix ms), then an xxhash64 of
// key and entry. A blob exists if and only if it has an index entry: bytes
// on disk that no entry names (a crash between writing and committing) are
// dead and never read.

// FormatVersion is the blob layout this build reads and writes.
const FormatVersion = 1

const (
	frameMagic   = "sbxb"
	frameVersion = 1
	headerSize   = 64

	codecRaw  = 0
	codecZstd = 1

	whereNone  = 0xff
	wherePack  = 0
	whereLarge = 1
)

var (
	bucketMeta  = []byte("cas_meta")
	bucketIndex = []byte("cas_index")
	bucketPacks = []byte("cas_packs")
	keyFormat   = []byte("format")
)

// Namespace is one of the two key spaces (SPEC §6.1): equal bytes stored as
// a file and as an artifact are two blobs.
type Namespace byte

// The namespaces and their key prefixes.
const (
	Files     Namespace = 0
	Artifacts Namespace = 1

	FilesPrefix     = "sandbox-files/sha256/"
	ArtifactsPrefix = "sandbox-artifacts/sha256/"
)

// Prefix returns the key prefix of ns.
func (ns Namespace) Prefix() string {
	if ns == Artifacts {
		return ArtifactsPrefix
	}
	return FilesPrefix
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
	var ns Namespace
	var h string
	switch {
	case len(key) == len(FilesPrefix)+64 && key[:len(FilesPrefix)] == FilesPrefix:
		ns, h = Files, key[len(FilesPrefix):]
	case len(key) == len(ArtifactsPrefix)+64 && key[:len(ArtifactsPrefix)] == ArtifactsPrefix:
		ns, h = Artifacts, key[len(ArtifactsPrefix):]
	default:
		return 0, sum, &Error{Key: key, Err: ErrInvalidKey, Detail: "want sandbox-files/sha256/<64 hex> or sandbox-artifacts/sha256/<64 hex>"}
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return 0, sum, &Error{Key: key, Err: ErrInvalidKey, Detail: "digest must be lowercase hex"}
		}
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
	codec  byte
	ns     Namespace
	raw    uint64
	stored uint64
	sum    [32]byte
}

func (h *header) encode() [headerSize]byte {
	var b [headerSize]byte
	copy(b[0:4], frameMagic)
	b[4] = frameVersion
	b[5] = h.codec
	b[6] = byte(h.ns)
	binary.LittleEndian.PutUint64(b[8:], h.raw)
	binary.LittleEndian.PutUint64(b[16:], h.stored)
	copy(b[24:56], h.sum[:])
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
	if b[4] != frameVersion || b[5] > codecZstd || b[6] > byte(Artifacts) || b[7] != 0 {
		return h, fmt.Errorf("unknown frame version %d or codec %d", b[4], b[5])
	}
	h.codec, h.ns = b[5], Namespace(b[6])
	h.raw = binary.LittleEndian.Uint64(b[8:])
	h.stored = binary.LittleEndian.Uint64(b[16:])
	copy(h.sum[:], b[24:56])
	if h.codec == codecRaw && h.raw != h.stored {
		return h, errHeader
	}
	return h, nil
}

// entry is a decoded index entry.
type entry struct {
	where    byte
	pack     uint64
	offset   uint64
	codec    byte
	raw      uint64
	stored   uint64
	uploaded int64 // Unix ms
}

func (e *entry) encode(key string) []byte {
	b := make([]byte, 0, 48)
	b = append(b, e.where)
	if e.where == wherePack {
		b = binary.AppendUvarint(b, e.pack)
		b = binary.AppendUvarint(b, e.offset)
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
	if e.where == wherePack {
		e.pack = uv()
		e.offset = uv()
	}
	if len(r) == 0 {
		return e, errEntry
	}
	e.codec, r = r[0], r[1:]
	e.raw = uv()
	e.stored = uv()
	v, n := binary.Varint(r)
	if n <= 0 || n != len(r) || e.where > whereLarge || e.codec > codecZstd {
		return e, errEntry
	}
	// A packed blob is at most MaxPacked: readers size buffers from these
	// fields, so an entry claiming more (with a forged checksum) is damage,
	// not an allocation (found by FuzzBlobFile).
	if e.where == wherePack && (e.raw > MaxPacked || e.stored > MaxPacked+MaxPacked/8) {
		return e, errEntry
	}
	e.uploaded = v
	return e, nil
}

func packKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// packStats is the value of cas_packs: what a pack holds and how much of it
// no index entry names any more (the rewrite threshold of issue 4 reads it).
type packStats struct{ total, dead uint64 }

func (p packStats) encode() []byte {
	b := binary.AppendUvarint(nil, p.total)
	return binary.AppendUvarint(b, p.dead)
}

func decodePackStats(b []byte) (packStats, error) {
	var p packStats
	var n int
	if p.total, n = binary.Uvarint(b); n <= 0 {
		return p, errEntry
	}
	b = b[n:]
	if p.dead, n = binary.Uvarint(b); n <= 0 || n != len(b) {
		return p, errEntry
	}
	return p, nil
}
