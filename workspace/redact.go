package workspace

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"slices"
)

// Redactor overwrites every occurrence of each secret with zero bytes
// (SPEC §6.3, §10 Q21). Matches are found on the original bytes, so
// overlapping and adjacent matches, of the same secret or of different ones,
// all count, and the union of their ranges is zeroed: with secrets "abc" and
// "bcd", "abcd" becomes four zero bytes, and with "aa", so does "aaa" become
// three. Zeroing never changes the length, so a blob's size is that of the
// file.
//
// A Redactor is immutable and safe for concurrent use. A nil *Redactor is
// valid and redacts nothing.
type Redactor struct {
	secrets [][]byte // distinct, non-empty, sorted by bytes
	maxLen  int      // length of the longest secret
	fp      [32]byte
}

// NewRedactor returns a Redactor for secrets, dropping empty strings and
// duplicates. It returns nil when none remain, so a capture without secrets
// pays nothing.
func NewRedactor(secrets []string) *Redactor {
	distinct := make([]string, 0, len(secrets))
	for _, s := range secrets {
		if s != "" {
			distinct = append(distinct, s)
		}
	}
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	if len(distinct) == 0 {
		return nil
	}
	r := &Redactor{secrets: make([][]byte, len(distinct))}
	h := sha256.New()
	var n [8]byte
	for i, s := range distinct {
		r.secrets[i] = []byte(s)
		r.maxLen = max(r.maxLen, len(s))
		// The length prefix keeps {"ab","c"} and {"a","bc"} apart.
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write(r.secrets[i])
	}
	h.Sum(r.fp[:0])
	return r
}

// Len returns the number of distinct secrets; 0 for a nil Redactor.
func (r *Redactor) Len() int {
	if r == nil {
		return 0
	}
	return len(r.secrets)
}

// Fingerprint returns the SHA-256 of the sorted distinct secrets, each
// preceded by its length as a big-endian uint64, or the zero value for a nil
// Redactor. Equal fingerprints mean equal secret sets, so a cache of redacted
// content (such as digests keyed by file identity) can be keyed or
// invalidated by it without holding the secrets.
//
// It is an unsalted hash, and a short secret could be recovered from it by
// guessing: keep it in memory or private local state, never in snapshots,
// the instance store or the event log, where secrets must not go.
func (r *Redactor) Fingerprint() [32]byte {
	if r == nil {
		return [32]byte{}
	}
	return r.fp
}

// Redact zeroes every secret occurrence in b, in place. It does not allocate
// for up to 32 secrets.
func (r *Redactor) Redact(b []byte) {
	if r == nil {
		return
	}
	r.zero(b, len(b), 0)
}

// smallSecrets is how many secrets zero tracks without allocating.
const smallSecrets = 32

// zero redacts the window b: it finds every occurrence of every secret that
// starts before limit, on the original bytes of b, and zeroes the union of
// those occurrences and of [0, carry), clipped to b[:limit]. Bytes from limit
// on are left as they were, because a streaming caller still has to search
// them. It returns how many bytes from limit on are covered by an occurrence
// found here, which the caller carries into the next window.
//
// Occurrences are visited in order of their start by merging one cursor per
// secret, and zeroing is deferred until the merged range [cs, ce) is closed
// by an occurrence that starts after it. Every later search starts beyond
// that occurrence, so no search ever reads a byte already zeroed; this is
// what makes in-place redaction see the original bytes without a copy.
func (r *Redactor) zero(b []byte, limit, carry int) int {
	var small [smallSecrets]int
	next := small[:0]
	if len(r.secrets) > smallSecrets {
		next = make([]int, 0, len(r.secrets))
	}
	for _, s := range r.secrets {
		next = append(next, index(b, s, 0, limit))
	}
	cs, ce := 0, carry
	for {
		k := -1
		for i, pos := range next {
			if pos >= 0 && (k < 0 || pos < next[k]) {
				k = i
			}
		}
		if k < 0 {
			break
		}
		pos, s := next[k], r.secrets[k]
		if pos > ce {
			clear(b[cs:min(ce, limit)])
			cs, ce = pos, pos+len(s)
		} else {
			ce = max(ce, pos+len(s))
		}
		// Searching from pos+1, not pos+len(s), finds overlapping
		// occurrences of the same secret ("aa" twice in "aaa").
		next[k] = index(b, s, pos+1, limit)
	}
	if cs < limit {
		clear(b[cs:min(ce, limit)])
	}
	return max(ce-limit, 0)
}

// index returns the start of the first occurrence of s in b at or after
// from that starts before limit, or -1.
func index(b, s []byte, from, limit int) int {
	end := min(len(b), limit+len(s)-1)
	if end-from < len(s) {
		return -1
	}
	i := bytes.Index(b[from:end], s)
	if i < 0 {
		return -1
	}
	return from + i
}

// readChunk is how many bytes a redacting reader asks of its source at a
// time, beyond the bytes it holds back.
const readChunk = 32 << 10

// maxEmptyReads is how many consecutive (0, nil) reads of the source a
// redacting reader tolerates before failing with io.ErrNoProgress, as bufio
// does, so a broken source cannot spin it forever.
const maxEmptyReads = 100

// Reader returns a reader of src's bytes with every secret zeroed. Its output
// is byte-identical to Redact applied to all of src at once, however src
// splits its data between reads: it holds back the last len(longest)-1
// bytes of each chunk, unredacted, until the following bytes show whether a
// secret spans the boundary. Memory is bounded by about 32 KiB plus the
// longest secret, whatever the length of src.
//
// When src fails with an error other than io.EOF, the held-back bytes are
// dropped rather than returned, as they may be the start of a secret whose
// end was never read; the error is returned once the redacted bytes before
// them have been read. A nil Redactor returns src itself.
func (r *Redactor) Reader(src io.Reader) io.Reader {
	if r == nil {
		return src
	}
	return &redactReader{r: r, src: src}
}

// redactReader is the reader returned by Redactor.Reader. Its buffer holds
// buf[rd:ready], redacted bytes not yet returned, then buf[ready:n], original
// bytes held back, of which the first carry must be zeroed when they are
// released because an occurrence already found covers them.
type redactReader struct {
	r            *Redactor
	src          io.Reader
	buf          []byte
	rd, ready, n int
	carry        int
	holdBack     int   // len(longest secret) - 1
	err          error // sticky error of src, returned once buf is drained
}

func (z *redactReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for z.rd == z.ready {
		if z.err != nil {
			return 0, z.err
		}
		z.fill()
	}
	n := copy(p, z.buf[z.rd:z.ready])
	z.rd += n
	return n, nil
}

// fill reads once from src and redacts the bytes that the new data makes
// final. It is called only when every redacted byte has been returned.
func (z *redactReader) fill() {
	if z.buf == nil {
		z.holdBack = z.r.maxLen - 1
		z.buf = make([]byte, z.holdBack+readChunk)
	}
	// Move the held-back bytes to the front; they are fewer than the
	// buffer, so there is always room to read.
	z.n = copy(z.buf, z.buf[z.ready:z.n])
	z.rd, z.ready = 0, 0
	var m int
	for range maxEmptyReads {
		m, z.err = z.src.Read(z.buf[z.n:])
		if m > 0 || z.err != nil {
			break
		}
	}
	if m == 0 && z.err == nil {
		z.err = io.ErrNoProgress
	}
	z.n += m
	limit := z.n - z.holdBack
	if z.err == io.EOF {
		// Nothing follows: every byte is final, as for Redact on the
		// whole input.
		limit = z.n
	}
	if limit > 0 {
		z.carry = z.r.zero(z.buf[:z.n], limit, z.carry)
		z.ready = limit
	}
	if z.err != nil && z.err != io.EOF {
		// The held-back bytes were searched as context above but are
		// never released: they may begin a secret that src never
		// finished.
		z.n = z.ready
	}
}
