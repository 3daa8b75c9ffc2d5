package meta

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/sbxdb/sbxdb/chain"
)

// Every value sbxdb stores in bbolt is sealed: a format byte, the payload,
// and an xxhash64 of (bucket, key, payload). bbolt checksums its meta pages
// but not values, so without the seal a flipped bit in a data page would be
// returned as valid data. Hashing the bucket and key too catches a value that
// ended up under the wrong key.

const (
	recordVersion = 1
	sealSize      = 1 + 8
)

func sum(bucket, key, payload []byte) uint64 {
	var d xxhash.Digest // on the stack: this runs once per value read
	d.Reset()
	d.Write(bucket)
	d.Write([]byte{0})
	d.Write(key)
	d.Write([]byte{0})
	d.Write(payload)
	return d.Sum64()
}

// Seal returns the stored form of payload under bucket/key.
func Seal(bucket, key, payload []byte) []byte {
	out := make([]byte, 0, len(payload)+sealSize)
	out = append(out, recordVersion)
	out = append(out, payload...)
	return binary.LittleEndian.AppendUint64(out, sum(bucket, key, payload))
}

// Unseal verifies a stored value and returns its payload, which aliases
// value (and so is valid only inside the transaction that read it). A damaged
// value is an ErrCorrupt error naming the bucket and key.
func Unseal(bucket, key, value []byte) ([]byte, error) {
	if len(value) < sealSize || value[0] != recordVersion {
		return nil, corrupt(bucket, key, "bad record header")
	}
	payload := value[1 : len(value)-8]
	if binary.LittleEndian.Uint64(value[len(value)-8:]) != sum(bucket, key, payload) {
		return nil, corrupt(bucket, key, "checksum mismatch")
	}
	return payload, nil
}

func corrupt(bucket, key []byte, why string) error {
	return fmt.Errorf("%w: %s/%q: %s", chain.ErrCorrupt, bucket, key, why)
}

// Encoder appends the primitives of the binary record format. Every integer
// is a varint, every string and byte slice is length-prefixed.
type Encoder struct{ b []byte }

// Bytes returns what has been encoded.
func (e *Encoder) Bytes() []byte { return e.b }

func (e *Encoder) Uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *Encoder) Varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *Encoder) Byte(c byte)      { e.b = append(e.b, c) }
func (e *Encoder) String(s string) {
	e.Uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

// Fixed appends p with no length prefix: the reader knows its size.
func (e *Encoder) Fixed(p []byte) { e.b = append(e.b, p...) }

func (e *Encoder) Raw(p []byte) {
	e.Uvarint(uint64(len(p)))
	e.b = append(e.b, p...)
}

// Decoder reads what Encoder wrote. It never panics and never allocates
// more than its input justifies: a length longer than the remaining bytes is
// an error, and so is trailing data. The first error sticks.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder returns a Decoder over b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err returns the first error, or one for unread trailing bytes.
func (d *Decoder) Err() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	return d.err
}

func (d *Decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or malformed %s", what)
	}
	d.b = nil
}

func (d *Decoder) Uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *Decoder) Varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *Decoder) Byte() byte {
	if len(d.b) == 0 {
		d.fail("byte")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// Count reads a element count, bounded by the bytes left: every element
// takes at least minSize bytes, so a forged count cannot force a huge
// allocation.
func (d *Decoder) Count(minSize int) int {
	n := d.Uvarint()
	if n > uint64(len(d.b)/minSize) {
		d.fail("count")
		return 0
	}
	return int(n)
}

func (d *Decoder) take(n uint64, what string) []byte {
	if n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

// Fixed reads n bytes that have no length prefix (Encoder.Fixed wrote
// them); the result aliases the input.
func (d *Decoder) Fixed(n int) []byte { return d.take(uint64(n), "fixed bytes") }

func (d *Decoder) String() string { return string(d.take(d.Uvarint(), "string")) }

// Raw returns a copy of a length-prefixed byte slice.
func (d *Decoder) Raw() []byte {
	p := d.take(d.Uvarint(), "bytes")
	if p == nil {
		return nil
	}
	return append([]byte{}, p...)
}

// The whole-checkpoint encoding: the record of store format 1, read now only
// to migrate such a store (record.go has formats 2 and 3), and the measure of what
// a checkpoint takes stored whole (RecordSize, MaxRecordBytes).
//
//
//	id, threadId, parentId, reason, label, sourceRunId  strings
//	createdAt                                           varint
//	files:     count, then per entry: kind byte ('f','d','l'), flags byte
//	           (bit 0 executable), path; file: 32-byte digest, size uvarint;
//	           symlink: target
//	artifacts: count, then artifactId, name, mimeType, 32-byte digest,
//	           size uvarint, createdAt varint
//	conversation: count, then each message's bytes
//
// Blob keys are stored as their 32-byte digest: the kind implies the prefix.

const flagExecutable = 1

// prefixed is the encoded size of l bytes with their length prefix.
func prefixed(l int) int { return uvarintSize(uint64(l)) + l }

func uvarintSize(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// EncodeCheckpoint returns the binary payload of a valid checkpoint.
func EncodeCheckpoint(cp *chain.Checkpoint) []byte {
	// Sized exactly: a record may be hundreds of megabytes (MaxRecordBytes),
	// and growing the buffer by appending would copy it repeatedly.
	e := &Encoder{b: make([]byte, 0, chain.RecordSize(cp))}
	for _, s := range []string{cp.ID, cp.ThreadID, cp.ParentID, string(cp.Reason), cp.Label, cp.SourceRunID} {
		e.String(s)
	}
	e.Varint(cp.CreatedAt)
	e.Uvarint(uint64(len(cp.Files)))
	for i := range cp.Files {
		f := &cp.Files[i]
		var flags byte
		if f.Executable {
			flags |= flagExecutable
		}
		switch f.Kind {
		case chain.KindFile:
			e.Byte('f')
			e.Byte(flags)
			e.String(f.Path)
			e.digest(f.BlobKey, chain.FilePrefix)
			e.Uvarint(uint64(f.Size))
		case chain.KindDir:
			e.Byte('d')
			e.Byte(flags)
			e.String(f.Path)
		case chain.KindSymlink:
			e.Byte('l')
			e.Byte(flags)
			e.String(f.Path)
			e.String(f.Target)
		}
	}
	encodeArtifacts(e, cp.Artifacts)
	e.Uvarint(uint64(len(cp.Conversation)))
	for _, m := range cp.Conversation {
		e.Raw(m)
	}
	return e.b
}

func (e *Encoder) digest(key, prefix string) { e.b = appendDigest(e.b, key, prefix) }

// appendDigest appends the 32-byte digest of a valid blob key (checked by
// ValidateContent).
func appendDigest(b []byte, key, prefix string) []byte {
	var d [32]byte
	hex.Decode(d[:], []byte(key[len(prefix):]))
	return append(b, d[:]...)
}

// digest returns prefix and the hex of the next 32 bytes as a blob key, in
// one allocation: a manifest may hold a million keys.
func (d *Decoder) digest(prefix string) string {
	p := d.take(32, "digest")
	if p == nil {
		return ""
	}
	var h [64]byte
	hex.Encode(h[:], p)
	var b strings.Builder
	b.Grow(len(prefix) + len(h))
	b.WriteString(prefix)
	b.Write(h[:])
	return b.String()
}

// DecodeCheckpoint decodes a payload written by EncodeCheckpoint.
func DecodeCheckpoint(p []byte) (*chain.Checkpoint, error) {
	d := NewDecoder(p)
	cp := &chain.Checkpoint{}
	cp.ID, cp.ThreadID, cp.ParentID = d.String(), d.String(), d.String()
	cp.Reason = chain.Reason(d.String())
	cp.Label, cp.SourceRunID = d.String(), d.String()
	cp.CreatedAt = d.Varint()
	cp.Files = make([]chain.Entry, d.Count(3))
	for i := range cp.Files {
		f := &cp.Files[i]
		*f = d.entry()
		if f.Kind == chain.KindFile { // format 1 keeps a file's digest and size inline
			f.BlobKey = d.digest(chain.FilePrefix)
			f.Size = int64(d.Uvarint())
		}
	}
	cp.Artifacts = decodeArtifacts(d)
	cp.Conversation = decodeMessages(d)
	if err := d.Err(); err != nil {
		return nil, err
	}
	return cp, nil
}

// entry reads a manifest entry's kind byte, flags and path, and a
// symlink's target: what both record formats write in that order. A
// file's digest and size are the caller's to read (inline in format 1, in
// content chunks since format 2, or inline in the record in format 3).
func (d *Decoder) entry() (f chain.Entry) {
	kind, flags := d.Byte(), d.Byte()
	f.Path = d.String()
	f.Executable = flags&flagExecutable != 0
	switch kind {
	case 'f':
		f.Kind = chain.KindFile
	case 'd':
		f.Kind = chain.KindDir
	case 'l':
		f.Kind = chain.KindSymlink
		f.Target = d.String()
	default:
		d.fail("entry kind")
	}
	return f
}

// skip reads past a length-prefixed string without copying it.
func (d *Decoder) skip(what string) { d.take(d.Uvarint(), what) }

// EncodeMessages returns the payload of a message list (a transcript).
func EncodeMessages(msgs []json.RawMessage) []byte {
	e := &Encoder{b: make([]byte, 0, chain.TranscriptSize(msgs))}
	e.Uvarint(uint64(len(msgs)))
	for _, m := range msgs {
		e.Raw(m)
	}
	return e.b
}

// DecodeMessages decodes a payload written by EncodeMessages. An empty list
// decodes as a non-nil empty slice.
func DecodeMessages(p []byte) ([]json.RawMessage, error) {
	d := NewDecoder(p)
	msgs := decodeMessages(d)
	return msgs, d.Err()
}

func decodeMessages(d *Decoder) []json.RawMessage {
	msgs := make([]json.RawMessage, d.Count(1))
	for i := range msgs {
		msgs[i] = d.Raw()
	}
	return msgs
}
