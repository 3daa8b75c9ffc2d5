package cas

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb"
)

// Open returns a reader of key's verified bytes. For a large blob the bytes
// are streamed and checked as they go: the Read that would return io.EOF
// returns an ErrCorrupt error instead if the bytes did not hash to the key
// or had the wrong length, so a caller must treat everything it read as
// unverified until Read returns io.EOF.
func (s *Store) Open(ctx context.Context, key string) (*Reader, error) {
	return s.openCached(ctx, key, nil)
}

// openCached is Open decoding through c (nil: none): a run of reads of many
// small blobs in pack order passes one cache (see blockCache).
func (s *Store) openCached(ctx context.Context, key string, c *blockCache) (*Reader, error) {
	s.packsMu.RLock()
	ns, sum, e, err := s.locate(ctx, key)
	if err == nil && e.packed() {
		defer s.packsMu.RUnlock()
		// The bytes live in a pooled buffer until Close: a restore reads
		// thousands of packed blobs, and a fresh buffer each was zeroed and
		// collected each time.
		buf := getBuf(int(e.raw) + decodeSlack)
		data, err := s.readPacked(key, ns, sum, &e, (*buf)[:0], c)
		if err != nil {
			putBuf(buf)
			return nil, err
		}
		return &Reader{key: key, size: int64(len(data)), r: bytes.NewReader(data), release: func() { putBuf(buf) }}, nil
	}
	s.packsMu.RUnlock()
	if err != nil {
		return nil, err
	}
	return s.openLarge(ctx, key, ns, sum, &e)
}

// openLarge returns a streaming, verifying reader of the large blob e names:
// a file of its own, or a remote object, streamed as it is read.
func (s *Store) openLarge(ctx context.Context, key string, ns Namespace, sum [32]byte, e *entry) (*Reader, error) {
	var f io.ReadCloser
	var src *sourceReader
	if e.where == whereObject {
		rc, err := s.openObject(ctx, key, ns, sum, e)
		if err != nil {
			return nil, err
		}
		src = &sourceReader{r: rc}
		f = struct {
			io.Reader
			io.Closer
		}{src, rc}
	} else {
		file, err := os.Open(filepath.Join(s.dir, largePath(ns, sum)))
		if err != nil {
			if os.IsNotExist(err) {
				return nil, corrupt(key, "indexed file is missing")
			}
			return nil, &sbxdb.BlobError{Key: key, Err: err}
		}
		f = file
	}
	var hb [headerSize]byte
	if _, err := io.ReadFull(f, hb[:]); err != nil {
		f.Close()
		if src != nil && src.err != nil {
			return nil, &sbxdb.BlobError{Key: key, Err: src.err}
		}
		return nil, corrupt(key, "truncated frame header")
	}
	h, err := checkFrame(key, ns, sum, e, hb[:])
	if err != nil {
		f.Close()
		return nil, err
	}
	r, err := s.streamingReader(key, sum, h.raw, h.codec, io.LimitReader(f, int64(h.stored)))
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closers = append(r.closers, f)
	r.src = src
	return r, nil
}

// streamingReader returns a Reader of the blob key whose stored bytes
// (raw bytes long once decoded, by codec) body yields: it decodes them as
// they stream, through a pooled zstd decoder, and verifies them as Read
// does.
func (s *Store) streamingReader(key string, sum [32]byte, raw uint64, codec byte, body io.Reader) (*Reader, error) {
	r := &Reader{key: key, size: int64(raw), want: sum, verify: sha256.New()}
	switch codec {
	case codecRaw:
		r.r = body
	case codecZstd:
		d, _ := s.streamDec.Get().(*zstd.Decoder)
		if d == nil {
			var err error
			d, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(64<<20))
			if err != nil {
				return nil, err
			}
		}
		if err := d.Reset(body); err != nil {
			return nil, corrupt(key, err.Error())
		}
		r.r, r.zstd = d, true
		r.release = func() { d.Reset(nil); s.streamDec.Put(d) }
	}
	return r, nil
}

// Reader reads one blob's bytes, verifying them (see Store.Open).
type Reader struct {
	key    string
	size   int64
	r      io.Reader
	want   [32]byte
	verify hash.Hash
	zstd   bool // a read error is a decoding error: the bytes are damaged
	// src, if set, records the error of fetching the stored bytes (a
	// remote object's stream): such an error is not damage.
	src     *sourceReader
	n       int64
	err     error
	closers []io.Closer
	release func()
	// ctx, if set, is checked before each read from the underlying file:
	// a large blob streams in chunks, and its reader stops between two
	// of them once ctx ends (ReadEach sets it).
	ctx context.Context
}

// Size returns the blob's length in bytes (what the index records).
func (r *Reader) Size() int64 { return r.size }

// Key returns the blob's key.
func (r *Reader) Key() string { return r.key }

func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.ctx != nil {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			return 0, err
		}
	}
	n, err := r.r.Read(p)
	if r.verify != nil {
		r.verify.Write(p[:n])
	}
	r.n += int64(n)
	switch {
	case r.n > r.size:
		r.err = corrupt(r.key, fmt.Sprintf("more than the %d bytes the index records", r.size))
		return 0, r.err
	case err == io.EOF && r.verify != nil:
		if r.n != r.size {
			r.err = corrupt(r.key, fmt.Sprintf("%d bytes, index says %d", r.n, r.size))
		} else if !bytes.Equal(r.verify.Sum(nil), r.want[:]) {
			r.err = corrupt(r.key, "sha256 of the bytes does not match the key")
		} else {
			r.err = io.EOF
		}
		return n, r.err
	case err != nil && err != io.EOF:
		if r.src != nil && r.src.err != nil {
			err = &sbxdb.BlobError{Key: r.key, Err: r.src.err}
		} else if r.zstd {
			err = corrupt(r.key, "zstd: "+err.Error())
		} else {
			err = &sbxdb.BlobError{Key: r.key, Err: err}
		}
		r.err = err
	}
	return n, err
}

// WriteTo writes the rest of the blob's bytes to w (io.WriterTo, so io.Copy
// uses it). A packed blob's bytes, verified and in memory already, go to w
// in one call, without the copy through a buffer io.Copy would make; a
// large blob's are streamed through a pooled buffer and verified as Read
// verifies them, the reader's context checked before each chunk. Errors
// reading the blob are *Error values, as from Read, or the context's error;
// errors from w are returned as they are.
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	if br, ok := r.r.(*bytes.Reader); ok && r.verify == nil && r.err == nil {
		n, err := br.WriteTo(w)
		r.n += n
		return n, err
	}
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	// Both sides hidden: io.CopyBuffer would otherwise call w's ReadFrom
	// (an *os.File has one), which copies through a new 32 KiB buffer.
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, *buf)
}

// copyBufs holds the buffers WriteTo streams large blobs through: 256 KiB,
// so each write takes as much as one Read gives (a raw large blob fills
// the buffer, the zstd decoder gives up to 64 KiB).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// Close releases the reader's file.
func (r *Reader) Close() error {
	for _, c := range r.closers {
		c.Close()
	}
	r.closers = nil
	if r.release != nil {
		r.release()
		r.release = nil
	}
	return nil
}
