package meta

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"strings"
)

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

// prefixed is the encoded size of l bytes with their length prefix.
func prefixed(l int) int { return uvarintSize(uint64(l)) + l }

// uvarintSize is the length of binary.AppendUvarint(nil, v): one byte per
// started group of 7 significant bits, at least one.
func uvarintSize(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func (e *Encoder) digest(key, prefix string) { e.b = appendDigest(e.b, key, prefix) }

// appendDigest appends the 32-byte digest of a valid blob key (checked by
// chain.ValidateContent).
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
