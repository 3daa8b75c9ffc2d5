package cas

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"
)

// packWindow is the zstd window of packed frames. A block is at most
// blockTarget+blockMemberMax bytes and a capture packs files of at most
// 1 MiB whole, so their frames fit in one window; a longer packed blob (up
// to MaxPacked) only finds no matches further back than this.
const packWindow = 1 << 20

// newPackEncoder returns the encoder of packed frames: EncodeAll only, at
// CaptureLevel, one encoder state per core, each holding a history of
// twice packWindow.
func newPackEncoder() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil,
		zstd.WithEncoderLevel(CaptureLevel),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithWindowSize(packWindow),
		zstd.WithEncoderCRC(false), // the sha256 of the raw bytes is checked instead
		zstd.WithZeroFrames(true))
}

// block gathers small blobs of one namespace until it is sealed into a
// block frame (format.go). Its buffers come from bufPool and go back by
// release once the frame is written.
//
// A sealed block holds its members in key order, whatever order the
// capture's workers added them in: the same blobs make the same frame, the
// same offsets and the same shares (blockShares), so a store's sizes do
// not depend on scheduling.
type block struct {
	ns      Namespace
	keys    []string
	sums    [][32]byte
	at      []uint64 // each member's offset in data
	table   []byte   // the member table's rows
	data    *[]byte  // the members' bytes, back to back
	payload *[]byte  // table ‖ data, built by seal
	out     *[]byte  // the compressed payload
}

func newBlock(ns Namespace) *block {
	blk := &block{ns: ns, data: getBuf(blockTarget + blockMemberMax)}
	*blk.data = (*blk.data)[:0]
	return blk
}

// add copies a blob into the block (the caller reuses its buffer).
func (blk *block) add(key string, sum [32]byte, data []byte) {
	blk.keys = append(blk.keys, key)
	blk.sums = append(blk.sums, sum)
	blk.at = append(blk.at, uint64(len(*blk.data)))
	blk.table = appendMemberRow(blk.table, sum, len(data))
	*blk.data = append(*blk.data, data...)
}

// size returns the size of member i.
func (blk *block) size(i int) int {
	if i+1 < len(blk.at) {
		return int(blk.at[i+1] - blk.at[i])
	}
	return len(*blk.data) - int(blk.at[i])
}

// seal returns the block's frame header and stored bytes, valid until
// release. A block of one blob is sealed as that blob's frame: a block
// would only add a member table.
func (blk *block) seal(enc *zstd.Encoder) (header, []byte) {
	blk.out = getBuf(len(*blk.data)/2 + 64)
	if len(blk.keys) == 1 {
		h := header{version: blobFrame, ns: blk.ns}
		copy(h.sum[:], blk.table)
		return h, compress(enc, &h, *blk.data, blk.out)
	}
	blk.sortMembers()
	blk.payload = getBuf(len(blk.table) + len(*blk.data))
	p := append(append((*blk.payload)[:0], blk.table...), *blk.data...)
	h := header{version: blockFrame, ns: blk.ns, members: uint32(len(blk.keys)), check: xxhash.Sum64(p)}
	return h, compress(enc, &h, p, blk.out)
}

// sortMembers puts the members in key order: it rebuilds keys, sums, at,
// table and data, the old data going back to the pool.
func (blk *block) sortMembers() {
	order := make([]int, len(blk.keys))
	for i := range order {
		order[i] = i
	}
	if slices.IsSortedFunc(order, func(a, b int) int { return strings.Compare(blk.keys[a], blk.keys[b]) }) {
		return
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(blk.keys[a], blk.keys[b]) })
	old := blk.data
	data := getBuf(len(*old))
	*data = (*data)[:0]
	keys, sums, at := make([]string, len(order)), make([][32]byte, len(order)), make([]uint64, len(order))
	table := make([]byte, 0, len(blk.table))
	for j, i := range order {
		member := (*old)[blk.at[i] : int(blk.at[i])+blk.size(i)]
		keys[j], sums[j], at[j] = blk.keys[i], blk.sums[i], uint64(len(*data))
		table = appendMemberRow(table, blk.sums[i], len(member))
		*data = append(*data, member...)
	}
	blk.keys, blk.sums, blk.at, blk.table, blk.data = keys, sums, at, table, data
	putBuf(old)
}

// release returns the block's buffers to the pool.
func (blk *block) release() {
	for _, p := range []*[]byte{blk.data, blk.payload, blk.out} {
		if p != nil {
			putBuf(p)
		}
	}
	blk.data, blk.payload, blk.out = nil, nil, nil
}

// compress sets h's codec and sizes for data and returns the bytes to
// store: data's zstd, in *out (which it may grow), or data itself where
// compression does not save at least 1/32, not worth a decode on read.
func compress(enc *zstd.Encoder, h *header, data []byte, out *[]byte) []byte {
	h.codec, h.raw, h.stored = codecRaw, uint64(len(data)), uint64(len(data))
	if len(data) < 64 {
		return data
	}
	z := enc.EncodeAll(data, (*out)[:0])
	*out = z
	if len(z) < len(data)-len(data)/32 {
		h.codec, h.stored = codecZstd, uint64(len(z))
		return z
	}
	return data
}

// blockCache keeps the blocks most recently decoded through it, so a run of
// reads of blobs stored together (a deep check, a repack) decodes each
// block once rather than once per member. Every read still
// checks its blob's size and sha256. A cache never rereads a block it
// holds, so use one for one such run, not for the life of a store: a block
// damaged on disk after it was cached is found by the next run. It is safe
// for concurrent use.
type blockCache struct {
	mu     sync.Mutex
	blocks []*cachedBlock // most recently used last
}

// cachedBlock is a block decoded, or being decoded, by one reader: the
// others that want it meanwhile wait rather than decode it too (a deep
// check's readers take the members of one block one after another).
type cachedBlock struct {
	pack, offset uint64
	ready        chan struct{} // closed once blk and err are set
	blk          *decodedBlock
	err          error
}

// blockCacheSize is how many blocks a blockCache holds: at most about
// 3 MiB, room for the blocks that a check's or repack's readers are on.
const blockCacheSize = 16

// newBlockCache returns an empty cache.
func newBlockCache() *blockCache { return &blockCache{} }

// decodedBlock is a block's decoded payload and member table. It is never
// modified once made, so cached ones are read without a lock.
type decodedBlock struct {
	pack, offset uint64
	payload      []byte
	members      []member // by offset
}

// load returns the block at pack and offset, decoding it with decode
// unless the cache holds it or another reader is decoding it. A failed
// decode is not kept, and a reader that waited for one decodes for itself,
// so that its error names its own blob.
func (c *blockCache) load(pack, offset uint64, decode func() (*decodedBlock, error)) (*decodedBlock, error) {
	c.mu.Lock()
	for i, cb := range c.blocks {
		if cb.pack == pack && cb.offset == offset {
			copy(c.blocks[i:], c.blocks[i+1:])
			c.blocks[len(c.blocks)-1] = cb
			c.mu.Unlock()
			<-cb.ready
			if cb.err != nil {
				return decode()
			}
			return cb.blk, nil
		}
	}
	cb := &cachedBlock{pack: pack, offset: offset, ready: make(chan struct{})}
	if len(c.blocks) == blockCacheSize { // the least recently used goes; its waiters hold it
		copy(c.blocks, c.blocks[1:])
		c.blocks = c.blocks[:len(c.blocks)-1]
	}
	c.blocks = append(c.blocks, cb)
	c.mu.Unlock()
	cb.blk, cb.err = decode()
	close(cb.ready)
	if cb.err != nil {
		c.mu.Lock()
		if i := slices.Index(c.blocks, cb); i >= 0 {
			c.blocks = slices.Delete(c.blocks, i, i+1)
		}
		c.mu.Unlock()
	}
	return cb.blk, cb.err
}

// readMember reads, checks and returns the bytes of the block member e
// names, appended to out[:0] (nil allocates), decoding its block through c
// (nil: no cache).
func (s *Store) readMember(key string, ns Namespace, sum [32]byte, e *entry, out []byte, c *blockCache) ([]byte, error) {
	var blk *decodedBlock
	var err error
	if c == nil { // decoded into a pooled buffer, copied out below
		buf := getBuf(int(e.blockRaw) + decodeSlack)
		defer putBuf(buf)
		blk, err = s.decodeBlock(key, ns, sum, e, (*buf)[:0])
	} else { // kept by the cache, which other readers share
		blk, err = c.load(e.pack, e.offset, func() (*decodedBlock, error) {
			return s.decodeBlock(key, ns, sum, e, make([]byte, 0, e.blockRaw+decodeSlack))
		})
	}
	if err != nil {
		return nil, err
	}
	data, err := blk.member(key, sum, e)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = make([]byte, 0, e.raw+decodeSlack)
	}
	return append(out[:0], data...), nil
}

// decodeBlock reads and decodes the block frame e names into dst.
func (s *Store) decodeBlock(key string, ns Namespace, sum [32]byte, e *entry, dst []byte) (*decodedBlock, error) {
	fb, h, err := s.readFrame(key, ns, sum, e)
	if err != nil {
		return nil, err
	}
	defer putBuf(fb)
	payload, members, err := s.decodeBlockPayload(key, &h, e.blockRaw, (*fb)[headerSize:], dst)
	if err != nil {
		return nil, err
	}
	return &decodedBlock{pack: e.pack, offset: e.offset, payload: payload, members: members}, nil
}

// decodeBlockPayload decodes the stored bytes of the block frame whose
// header is h into dst (a copy, when they are raw: stored may be a pooled
// buffer), checks that they are raw bytes long and match the header's
// checksum, and returns them with the block's member table. Its errors
// name key.
func (s *Store) decodeBlockPayload(key string, h *header, raw uint64, stored, dst []byte) ([]byte, []member, error) {
	var payload []byte
	if h.codec == codecZstd {
		var err error
		if payload, err = s.dec.DecodeAll(stored, dst[:0]); err != nil {
			return nil, nil, corrupt(key, "block: zstd: "+err.Error())
		}
	} else {
		payload = append(dst[:0], stored...)
	}
	if uint64(len(payload)) != raw {
		return nil, nil, corrupt(key, fmt.Sprintf("block decodes to %d bytes, index says %d", len(payload), raw))
	}
	if xxhash.Sum64(payload) != h.check {
		return nil, nil, corrupt(key, "the block's bytes do not match its checksum")
	}
	members, err := decodeMembers(payload, h.members)
	if err != nil {
		return nil, nil, corrupt(key, err.Error())
	}
	return payload, members, nil
}
