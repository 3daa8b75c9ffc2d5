package cas

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/sbxdb/sbxdb"
)

// packFile returns an open pack file for reading, and the function to
// call once the read is done. With Remote, a pack is read from the bounded
// cache (cache.go), downloaded into it first if missing (by one reader,
// the others waiting), or, on a read-only store, which creates no files,
// read by ranged requests. A pack's bytes never change, so a cached copy
// is never stale.
func (s *Store) packFile(id uint64) (io.ReaderAt, func(), error) {
	if s.opts.Remote != nil {
		if s.opts.ReadOnly {
			return objectReaderAt{s.opts.Remote, packObject(id)}, func() {}, nil
		}
		p, err := s.cachedPack(id)
		if err != nil {
			return nil, nil, err
		}
		return p.f, func() { s.cache.release(p) }, nil
	}
	s.mu.Lock()
	if f := s.packs[id]; f != nil {
		s.mu.Unlock()
		return f, func() {}, nil
	}
	s.mu.Unlock()
	f, err := os.Open(filepath.Join(s.dir, packPath(id)))
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.packs[id]; g != nil { // opened meanwhile by another reader
		f.Close()
		return g, func() {}, nil
	}
	s.packs[id] = f
	return f, func() {}, nil
}

// locate checks key and returns where the index says its blob is.
func (s *Store) locate(ctx context.Context, key string) (Namespace, [32]byte, entry, error) {
	ns, sum, err := ParseKey(key)
	if err != nil {
		return ns, sum, entry{}, err
	}
	if err := ctx.Err(); err != nil {
		return ns, sum, entry{}, err
	}
	e, err := s.entry(key)
	return ns, sum, e, err
}

// bufPool holds buffers for packed frames and their decoded bytes, all at
// most MaxPacked plus a little.
var bufPool sync.Pool

func getBuf(n int) *[]byte {
	p, _ := bufPool.Get().(*[]byte)
	if p == nil || cap(*p) < n {
		b := make([]byte, n)
		p = &b
	}
	*p = (*p)[:n]
	return p
}

func putBuf(p *[]byte) { bufPool.Put(p) }

// checkFrame decodes a frame header and checks it against the key and the
// index entry.
func checkFrame(key string, ns Namespace, sum [32]byte, e *entry, hb []byte) (header, error) {
	h, err := decodeHeader(hb)
	if err != nil {
		return h, corrupt(key, err.Error())
	}
	want := header{version: blobFrame, codec: e.codec, ns: ns, raw: e.raw, stored: e.stored, sum: sum}
	if e.where == whereLarge {
		// A large file's frame is the word on its own codec and stored
		// size: Repack's recompression renames a new frame over the file
		// before the index learns its size (see recompressLarge).
		want.codec, want.stored, want.level = h.codec, h.stored, h.level
	}
	if e.where == whereBlock {
		want.version, want.raw, want.sum, want.members, want.check = blockFrame, e.blockRaw, [32]byte{}, h.members, h.check
	}
	if h != want {
		return h, corrupt(key, "frame header does not match the index")
	}
	return h, nil
}

// decodeSlack is room past the raw size in a packed blob's output buffer.
// klauspost/compress decodes with whole-block copies that may overrun a
// match by up to 32 bytes when the buffer has that slack, and falls back to
// slower bounds-exact copies when it does not. The output stays bounded: at
// most raw+decodeSlack bytes, and any length but raw is corrupt.
const decodeSlack = 32

// readPacked reads, decodes and verifies a packed blob into out (appending
// to out[:0]; nil allocates), decoding a block through c (nil: none). out
// needs a capacity of the raw size plus decodeSlack to be used as it is.
func (s *Store) readPacked(key string, ns Namespace, sum [32]byte, e *entry, out []byte, c *blockCache) ([]byte, error) {
	if e.where == whereBlock {
		return s.readMember(key, ns, sum, e, out, c)
	}
	fb, _, err := s.readFrame(key, ns, sum, e)
	if err != nil {
		return nil, err
	}
	defer putBuf(fb)
	return s.decodeFrame(key, sum, e, *fb, out)
}

// readFrame reads the frame of a packed blob or block into a pooled buffer
// (the caller puts it back) and checks its header against the key and the
// entry.
func (s *Store) readFrame(key string, ns Namespace, sum [32]byte, e *entry) (*[]byte, header, error) {
	if e.raw > MaxPacked || e.stored > MaxPacked+MaxPacked/8 || e.blockRaw > MaxPacked {
		return nil, header{}, corrupt(key, "index entry claims an oversized packed blob")
	}
	f, release, err := s.packFile(e.pack)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, header{}, corrupt(key, fmt.Sprintf("pack %016x is missing", e.pack))
		}
		return nil, header{}, &sbxdb.BlobError{Key: key, Err: err}
	}
	fb := getBuf(headerSize + int(e.stored))
	n, err := f.ReadAt(*fb, int64(e.offset))
	release()
	if n != len(*fb) {
		putBuf(fb)
		switch _, ranged := f.(objectReaderAt); {
		case ranged && errors.Is(err, fs.ErrNotExist):
			return nil, header{}, corrupt(key, fmt.Sprintf("pack %016x is missing", e.pack))
		case ranged && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF):
			return nil, header{}, &sbxdb.BlobError{Key: key, Err: err} // could not read, not damage
		}
		return nil, header{}, corrupt(key, fmt.Sprintf("pack %016x is truncated: %v", e.pack, err))
	}
	h, err := checkFrame(key, ns, sum, e, (*fb)[:headerSize])
	if err != nil {
		putBuf(fb)
		return nil, h, err
	}
	return fb, h, nil
}

// decodeFrame decodes a checked frame's bytes into out and verifies their
// size and sha256.
func (s *Store) decodeFrame(key string, sum [32]byte, e *entry, frame, out []byte) ([]byte, error) {
	if out == nil {
		out = make([]byte, 0, e.raw+decodeSlack)
	}
	var data []byte
	if e.codec == codecZstd {
		var err error
		data, err = s.dec.DecodeAll(frame[headerSize:], out[:0])
		if err != nil {
			return nil, corrupt(key, "zstd: "+err.Error())
		}
	} else {
		data = append(out[:0], frame[headerSize:]...) // the frame buffer goes back to the pool
	}
	if uint64(len(data)) != e.raw {
		return nil, corrupt(key, fmt.Sprintf("%d bytes, index says %d", len(data), e.raw))
	}
	if sha256.Sum256(data) != sum {
		return nil, corrupt(key, "sha256 of the bytes does not match the key")
	}
	return data, nil
}
