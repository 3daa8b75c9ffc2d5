package cas

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/vfs"
)

// Batch writes many blobs with one durability barrier. Add and AddReader
// may be called from many goroutines at once; Commit makes every new blob
// durable (fsync of the packs and large files written, then of their
// directories) and then commits all index entries in one transaction, so a
// crash at any point leaves either the whole batch indexed or none of it
// (bytes written but never indexed are dead and never read). Close without
// Commit, or a failed Commit, removes the batch's files.
//
// A key the store already holds, or that the batch already added, is not
// written again; its upload time is refreshed by Commit, so a sweep that
// honours an olderThan window does not take a blob a new checkpoint is
// about to name. Every key the batch adds or finds is also pinned
// (pins.go) until Close, so DeleteUnused cannot take it either, whatever the
// window: call Close once the checkpoint naming the keys has committed or
// failed.
type Batch struct {
	s *Store

	mu      sync.Mutex
	idle    sync.Cond           // on mu: signalled when sealing drops to 0
	added   map[string]entry    // new blobs, by key (whereNone until their block is written)
	refresh map[string]struct{} // existing blobs to freshen at Commit
	open    [2]*block           // the block being filled, per namespace
	sealing int                 // full blocks being compressed outside mu
	pack    *packWriter         // the pack being filled
	packs   []*packWriter       // every pack this batch wrote
	larges  map[string]string   // key → temp file of a new large blob, until renamed into place
	held    []string            // keys pinned by this batch, released by Close
	written int64               // bytes of the frames of new blobs, headers included
	enc     *zstd.Encoder       // compresses packed blobs and blocks, at level
	level   zstd.EncoderLevel   // recorded in the stats of the packs written
	closed  bool
	done    bool
	err     error // first write error; the batch can only be aborted

	uploaded []string // objects sync put (or tried to) in Options.Remote

	// AddDeferred's keys not yet looked up in the store, with the queue
	// of those not yet being looked up and its bytes; resolving counts
	// the resolves running outside mu (waitIdle waits for them too).
	deferred   map[string]struct{}
	queue      []queued
	queueBytes int
	resolving  int
	resolveMu  sync.Mutex // one resolve at a time
}

// queued is a blob of AddDeferred waiting for the lookup of its key.
type queued struct {
	ns   Namespace
	key  string
	sum  [32]byte
	data []byte // the batch's copy
}

// AddResult says what Add did with one blob.
type AddResult struct {
	Key  string
	Sum  [32]byte // sha256 of the raw bytes, the key's digest
	Size int64    // uncompressed bytes
	New  bool     // false: the store or this batch held the key already
}

// NewBatch starts a batch.
func (s *Store) NewBatch() *Batch {
	b := &Batch{s: s, added: map[string]entry{}, refresh: map[string]struct{}{}, larges: map[string]string{},
		deferred: map[string]struct{}{}, enc: s.enc, level: CaptureLevel}
	b.idle.L = &b.mu
	return b
}

// Written returns the bytes the batch has written for new blobs so far,
// frame headers included: after Commit, what the batch added to the store.
// A small blob's bytes are counted once the block holding it is written,
// which may be at Commit.
func (b *Batch) Written() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.written
}

// Add stores data (at most MaxPacked bytes) in a pack unless the key it
// hashes to is held already.
func (b *Batch) Add(ctx context.Context, ns Namespace, data []byte) (AddResult, error) {
	return b.add(ctx, ns, sha256.Sum256(data), data)
}

// add is Add for a caller that has hashed data already: sum must be its
// sha256.
func (b *Batch) add(ctx context.Context, ns Namespace, sum [32]byte, data []byte) (AddResult, error) {
	if len(data) > MaxPacked {
		return AddResult{}, fmt.Errorf("cas: Add of %d bytes: more than MaxPacked; use AddReader", len(data))
	}
	key := ns.Key(sum)
	res := AddResult{Key: key, Sum: sum, Size: int64(len(data))}
	if known, err := b.known(ctx, key); known || err != nil {
		return res, err
	}
	added, err := b.store(ns, key, sum, data)
	if err != nil {
		return res, &sbxdb.BlobError{Key: key, Err: err}
	}
	res.New = added
	return res, nil
}

// The bounds of AddDeferred's queue: the keys of one lookup request, and
// the bytes held waiting for it.
const (
	deferMaxKeys  = kv.MaxGetMany
	deferMaxBytes = 32 << 20
)

// AddDeferred is Add for a caller that need not know at once whether the
// blob is new (a capture, which counts the new blobs of its batch at the
// end, NewBlobs): the key is looked up in the store with those of other
// deferred adds, in one read transaction and one request (GetMany) per
// deferMaxKeys keys or deferMaxBytes bytes queued, rather than one per
// blob, and the blob is then stored if missing, at the latest by Commit.
// data (at most MaxPacked bytes) is copied. The result's New is false. A
// failure of the lookup or of storing a blob queued is returned by the
// call that ran them (this one, a later one, or Commit) and fails the
// batch. The key is pinned before it is looked up, as Add's is.
func (b *Batch) AddDeferred(ctx context.Context, ns Namespace, data []byte) (AddResult, error) {
	if len(data) > MaxPacked {
		return AddResult{}, fmt.Errorf("cas: AddDeferred of %d bytes: more than MaxPacked; use AddReader", len(data))
	}
	if err := ctx.Err(); err != nil {
		return AddResult{}, err
	}
	sum := sha256.Sum256(data)
	key := ns.Key(sum)
	res := AddResult{Key: key, Sum: sum, Size: int64(len(data))}
	b.mu.Lock()
	if err := b.writable(); err != nil {
		b.mu.Unlock()
		return res, err
	}
	_, inBatch := b.added[key]
	_, fresh := b.refresh[key]
	_, waiting := b.deferred[key]
	if !inBatch && !fresh && !waiting {
		b.deferred[key] = struct{}{}
		b.queue = append(b.queue, queued{ns: ns, key: key, sum: sum, data: slices.Clone(data)})
		b.queueBytes += len(data)
	}
	full := len(b.queue) >= deferMaxKeys || b.queueBytes >= deferMaxBytes
	b.mu.Unlock()
	if full {
		return res, b.resolve(ctx)
	}
	return res, nil
}

// Settle looks up what AddDeferred queued and stores the blobs missing:
// from then on every key the batch was given is pinned, and either
// stored or in the batch, as after Add. Commit settles first; a caller
// relying on the pins before committing (a capture, before its checkpoint
// is appended) settles itself.
func (b *Batch) Settle(ctx context.Context) error { return b.resolve(ctx) }

// resolve pins and looks up the queued keys of AddDeferred in one read
// transaction, marks those stored for refreshing and stores the others'
// blobs, on up to GOMAXPROCS goroutines (full blocks are compressed by
// the goroutine that fills them). A failure fails the batch.
func (b *Batch) resolve(ctx context.Context) error {
	b.resolveMu.Lock()
	defer b.resolveMu.Unlock()
	b.mu.Lock()
	q := b.queue
	b.queue, b.queueBytes = nil, 0
	if len(q) == 0 {
		b.mu.Unlock()
		return nil
	}
	keys := make([]string, len(q))
	for i := range q {
		keys[i] = q[i].key
	}
	b.held = append(b.held, keys...)
	b.resolving++
	b.mu.Unlock()

	err := b.resolveQueued(ctx, q, keys)

	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.idle.Broadcast()
	b.resolving--
	for _, k := range keys {
		delete(b.deferred, k) // now in added or refresh, unless err
	}
	if err != nil && b.err == nil {
		b.err = err
	}
	return err
}

func (b *Batch) resolveQueued(ctx context.Context, q []queued, keys []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Pin before looking: once pinned, a key cannot be deleted without the
	// lookup seeing it gone (pins.go).
	b.s.pins.pin(keys)
	var found []bool
	err := b.s.db.View(func(tx kv.Tx) error {
		_, found, _ = lookupMany(tx, keys) // a damaged entry is overwritten with the new bytes, not trusted
		return nil
	})
	if err != nil {
		return err
	}
	var missing []*queued
	b.mu.Lock()
	for i := range q {
		if found[i] {
			b.refresh[q[i].key] = struct{}{}
		} else {
			missing = append(missing, &q[i])
		}
	}
	b.mu.Unlock()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range min(runtime.GOMAXPROCS(0), len(missing)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(missing) {
					return
				}
				m := missing[i]
				err := ctx.Err()
				if err == nil {
					if _, err = b.store(m.ns, m.key, m.sum, m.data); err != nil {
						err = &sbxdb.BlobError{Key: m.key, Err: err}
					}
				}
				m.data = nil
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					next.Store(int64(len(missing)))
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err = <-errs:
	default:
	}
	return err
}

// NewBlobs returns how many blobs the batch has stored that the store did
// not hold when it looked (each key once): after Commit, the blobs the
// batch added, as many as the adds whose result was New plus the
// AddDeferred calls that stored their blob.
func (b *Batch) NewBlobs() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.added)
}

// store writes a blob the batch does not know to hold: a large one to a
// frame of its own at once, a small one into the namespace's open block,
// which is compressed and written when it is full (by the goroutine that
// filled it, outside b.mu, so full blocks compress in parallel) or at
// Commit. It reports false if another goroutine added key meanwhile.
func (b *Batch) store(ns Namespace, key string, sum [32]byte, data []byte) (bool, error) {
	if len(data) > blockMemberMax {
		out := getBuf(len(data)/2 + 64)
		defer putBuf(out)
		h := header{version: blobFrame, ns: ns, sum: sum}
		stored := compress(b.enc, &h, data, out)
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.writable(); err != nil {
			return false, err
		}
		if _, dup := b.added[key]; dup {
			return false, nil
		}
		e, err := b.appendFrame(&h, stored)
		if err != nil {
			b.err = err
			return false, err
		}
		b.added[key] = e
		return true, nil
	}
	b.mu.Lock()
	if err := b.writable(); err != nil {
		b.mu.Unlock()
		return false, err
	}
	if _, dup := b.added[key]; dup {
		b.mu.Unlock()
		return false, nil
	}
	blk := b.open[ns]
	if blk == nil {
		blk = newBlock(ns)
		b.open[ns] = blk
	}
	blk.add(key, sum, data)
	b.added[key] = entry{where: whereNone}
	if len(*blk.data)+len(blk.table) < blockTarget { // the table counts: tiny blobs add more row than bytes
		b.mu.Unlock()
		return true, nil
	}
	b.open[ns] = nil
	b.sealing++
	b.mu.Unlock()

	h, stored := blk.seal(b.enc)
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.idle.Broadcast()
	defer blk.release()
	b.sealing--
	if err := b.writable(); err != nil {
		return false, err
	}
	if err := b.placeBlock(blk, &h, stored); err != nil {
		b.err = err
		return false, err
	}
	return true, nil
}

// flushBlocks seals and writes the open blocks. b.mu is held and no block
// is being sealed.
func (b *Batch) flushBlocks() error {
	for ns, blk := range b.open {
		if blk == nil {
			continue
		}
		b.open[ns] = nil
		h, stored := blk.seal(b.enc)
		err := b.placeBlock(blk, &h, stored)
		blk.release()
		if err != nil {
			b.err = err
			return err
		}
	}
	return nil
}

// placeBlock appends a sealed block's frame to the pack and indexes its
// members. b.mu is held.
func (b *Batch) placeBlock(blk *block, h *header, stored []byte) error {
	e, err := b.appendFrame(h, stored)
	if err != nil {
		return err
	}
	if h.version == blobFrame { // a block of one is written as its blob's frame
		b.added[blk.keys[0]] = e
		return nil
	}
	e.where, e.blockRaw = whereBlock, h.raw
	table := uint64(len(blk.table))
	weights := make([]uint64, len(blk.keys))
	for i := range blk.keys {
		size := uint64(blk.size(i))
		weights[i] = size + memberRowLen(size)
	}
	shares := blockShares(headerSize+h.stored, weights)
	for i, key := range blk.keys {
		e.at, e.raw, e.share = table+blk.at[i], uint64(blk.size(i)), shares[i]
		b.added[key] = e
	}
	return nil
}

// waitIdle waits until no full block is being sealed and no resolve is
// running. b.mu is held.
func (b *Batch) waitIdle() {
	for b.sealing > 0 || b.resolving > 0 {
		b.idle.Wait()
	}
}

// known reports whether key is in the batch or the store; a key in the
// store is marked for refreshing.
func (b *Batch) known(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b.mu.Lock()
	if err := b.writable(); err != nil {
		b.mu.Unlock()
		return false, err
	}
	_, inBatch := b.added[key]
	_, fresh := b.refresh[key]
	_, waiting := b.deferred[key]
	b.mu.Unlock()
	if inBatch || fresh || waiting {
		return true, nil
	}
	// Pin before looking: once pinned, the key cannot be deleted without
	// the lookup below seeing it gone (pins.go).
	b.s.pins.pin([]string{key})
	b.mu.Lock()
	b.held = append(b.held, key)
	b.mu.Unlock()
	var ok bool
	err := b.s.db.View(func(tx kv.Tx) (err error) {
		_, ok, err = lookup(tx, key)
		return err
	})
	if err != nil && !errors.Is(err, sbxdb.ErrBlobCorrupt) {
		return false, err
	}
	// A damaged entry is overwritten with the new bytes, not trusted.
	if ok {
		b.mu.Lock()
		b.refresh[key] = struct{}{}
		b.mu.Unlock()
	}
	return ok, nil
}

func (b *Batch) writable() error {
	if err := b.s.gate.Refused(); err != nil {
		return err
	}
	switch {
	case b.s.opts.ReadOnly:
		return ErrReadOnly
	case b.done:
		return errors.New("cas: batch already committed or aborted")
	case b.err != nil:
		return fmt.Errorf("cas: batch failed earlier: %w", b.err)
	}
	return nil
}

// appendFrame writes one frame to the current pack, starting a new pack
// when it is full. b.mu is held.
func (b *Batch) appendFrame(h *header, stored []byte) (entry, error) {
	if b.pack == nil || b.pack.size >= b.s.opts.PackSize {
		p, err := b.s.newPack()
		if err != nil {
			return entry{}, err
		}
		b.pack = p
		b.packs = append(b.packs, p)
	}
	p := b.pack
	hb := h.encode()
	off := p.size
	if _, err := p.w.Write(hb[:]); err != nil {
		return entry{}, err
	}
	if _, err := p.w.Write(stored); err != nil {
		return entry{}, err
	}
	p.size += headerSize + int64(len(stored))
	b.written += headerSize + int64(len(stored))
	return entry{where: wherePack, pack: p.id, offset: uint64(off), codec: h.codec, raw: h.raw, stored: h.stored}, nil
}

// AddReader stores the bytes of r as a large blob (a file of its own),
// streaming: memory does not grow with the blob. The bytes are hashed,
// compressed (unless a trial on the first MiB shows it does not pay) and
// written to a temporary file in one pass; if the key turns out to be held
// already, the file is dropped.
func (b *Batch) AddReader(ctx context.Context, ns Namespace, r io.Reader) (AddResult, error) {
	if err := ctx.Err(); err != nil {
		return AddResult{}, err
	}
	b.mu.Lock()
	err := b.writable()
	b.mu.Unlock()
	if err != nil {
		return AddResult{}, err
	}
	tmp, err := b.s.fs.CreateTemp(filepath.Join(b.s.dir, "tmp"), "large-*")
	if err != nil {
		return AddResult{}, err
	}
	h, err := b.s.writeLarge(ctx, tmp, ns, r)
	if err == nil && !b.s.opts.NoSync {
		if err = tmp.Sync(); err != nil {
			err = b.s.syncFailed(err)
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.s.removeUnindexed(tmp.Name())
		return AddResult{}, err
	}
	key := ns.Key(h.sum)
	res := AddResult{Key: key, Sum: h.sum, Size: int64(h.raw)}
	known, err := b.known(ctx, key)
	if err == nil && !known {
		b.mu.Lock()
		err = b.writable() // committed or closed meanwhile: too late to join
		if _, dup := b.larges[key]; err == nil && !dup {
			b.larges[key] = tmp.Name()
			b.added[key] = entry{where: whereLarge, codec: h.codec, raw: h.raw, stored: h.stored}
			b.written += headerSize + int64(h.stored)
			res.New = true
		}
		b.mu.Unlock()
	}
	if !res.New {
		b.s.removeUnindexed(tmp.Name())
	}
	return res, err
}

// trialSize is how much of a large blob is compressed on trial to decide
// whether compressing it pays.
const trialSize = 1 << 20

// largeWindow is the zstd window of a large blob's stream: each streaming
// encoder holds twice this in history.
const largeWindow = 1 << 20

// largeChunk is the most a large blob's copy reads at once when it is
// stored raw (when compressed, the encoder reads one zstd block at a time):
// the context is checked between reads.
const largeChunk = 256 << 10

// trialBufs holds the trialSize buffers of writeLarge, one per goroutine
// storing a large blob.
var trialBufs = sync.Pool{New: func() any { b := make([]byte, trialSize); return &b }}

// writeLarge writes one frame holding the bytes of r to f and returns its
// header. The first trialSize bytes are compressed into f as the start of
// the stream; if they did not shrink by at least 1/32, f is rewritten with
// them raw and the rest is copied raw. Otherwise the rest is read straight
// into the encoder's block buffer. Either way each byte is hashed as it is
// read and memory does not grow with the blob.
func (s *Store) writeLarge(ctx context.Context, f vfs.File, ns Namespace, r io.Reader) (header, error) {
	h := header{version: blobFrame, ns: ns, codec: codecZstd}
	var zero [headerSize]byte
	if _, err := f.Write(zero[:]); err != nil {
		return h, err
	}
	digest := sha256.New()
	src := io.TeeReader(objstore.ContextReader(ctx, r), digest)
	bp := trialBufs.Get().(*[]byte)
	defer trialBufs.Put(bp)
	n, err := io.ReadFull(src, *bp)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return h, err
	}
	first, ended := (*bp)[:n], err != nil
	enc, err := s.largeEncoder()
	if err != nil {
		return h, err
	}
	defer s.streamEnc.Put(enc)
	counted := &countWriter{w: f}
	enc.Reset(counted)
	raw := int64(n)
	_, err = enc.Write(first)
	if err == nil && ended {
		err = enc.Close()
	}
	if err != nil {
		return h, err
	}
	if counted.n >= int64(n-n/32) { // not worth a decode on read: store it raw
		h.codec = codecRaw
		if err := rewind(f); err != nil {
			return h, err
		}
		counted = &countWriter{w: f}
		if _, err := counted.Write(first); err != nil {
			return h, err
		}
		if !ended {
			var m int64
			m, err = io.CopyBuffer(counted, src, first[:largeChunk])
			raw += m
		}
	} else if !ended {
		var m int64
		m, err = enc.ReadFrom(src)
		raw += m
		if err == nil {
			err = enc.Close()
		}
	}
	if err != nil {
		return h, err
	}
	h.raw, h.stored = uint64(raw), uint64(counted.n)
	copy(h.sum[:], digest.Sum(nil))
	hb := h.encode()
	_, err = f.WriteAt(hb[:], 0)
	return h, err
}

// largeEncoder returns a streaming encoder for writeLarge, to be put back
// in s.streamEnc.
func (s *Store) largeEncoder() (*zstd.Encoder, error) {
	if enc, _ := s.streamEnc.Get().(*zstd.Encoder); enc != nil {
		return enc, nil
	}
	return zstd.NewWriter(nil, zstd.WithEncoderLevel(CaptureLevel), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(largeWindow), zstd.WithEncoderCRC(false))
}

// rewind empties f back to its frame header, positioned after it.
func rewind(f vfs.File) error {
	if err := f.Truncate(headerSize); err != nil {
		return err
	}
	_, err := f.Seek(headerSize, io.SeekStart)
	return err
}

// Commit makes the batch's new blobs durable and indexes them, and refreshes
// the upload time of the known keys it met. After Commit (successful or not)
// the batch is finished. If a key the batch meant to refresh was deleted
// meanwhile, Commit fails and indexes nothing: the caller was about to rely
// on a blob that is gone.
func (b *Batch) Commit(ctx context.Context) error { return b.CommitWith(ctx, nil) }

// CommitWith is Commit that also runs fn in the transaction indexing the
// batch, before the index entries are written: the checkpoint naming the
// blobs commits with them, or neither does. fn must return any error of its
// own checks before it writes. A batch that wrote and met nothing, with a
// nil fn, costs no transaction.
func (b *Batch) CommitWith(ctx context.Context, fn func(tx kv.Tx) error) error {
	if err := b.resolve(ctx); err != nil { // AddDeferred's queue
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waitIdle()
	if err := b.writable(); err != nil {
		return err
	}
	err := b.flushBlocks()
	b.done = true
	if err == nil {
		err = b.sync(ctx)
	}
	indexed := false // the last run of the transaction body got to the end
	if err == nil && (fn != nil || len(b.packs) > 0 || len(b.added) > 0 || len(b.refresh) > 0) {
		err = b.s.db.Update(func(tx kv.Tx) error {
			indexed = false // the body may run twice (a shared transaction retried alone)
			if fn != nil {
				if err := fn(tx); err != nil {
					return err
				}
			}
			if err := b.index(tx); err != nil {
				return err
			}
			indexed = true
			return nil
		})
	}
	// An error from the body means nothing was committed. An error from
	// the commit itself (a failed write or fsync of the database) leaves
	// the outcome unknown: the pages may reach the file anyway. The packs
	// then stay; Open removes those no index entry names.
	if err != nil && !indexed {
		b.removeFiles()
	}
	return err
}

// sync makes the batch's bytes durable: packs flushed and fsynced, large
// files (synced when written) renamed into place, and every directory that
// gained a name synced. With Options.Remote, durable means uploaded: the
// packs and large files are put in the object store (remote.go), the packs
// staying as the cache.
func (b *Batch) sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := b.s
	for _, p := range b.packs {
		if err := p.finish(s); err != nil {
			return err
		}
	}
	if s.opts.Remote != nil {
		return b.upload(ctx)
	}
	dirs := map[string]bool{}
	if len(b.packs) > 0 {
		dirs[filepath.Join(s.dir, "packs")] = true
	}
	for key, tmp := range b.larges {
		ns, sum, _ := ParseKey(key)
		dst := filepath.Join(s.dir, largePath(ns, sum))
		if err := s.fs.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := s.fs.Rename(tmp, dst); err != nil {
			return err
		}
		delete(b.larges, key) // in place: a failure from here on leaves it (see removeFiles)
		for d := filepath.Dir(dst); len(d) > len(s.dir); d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	if !s.opts.NoSync {
		for d := range dirs {
			if err := s.fs.SyncDir(d); err != nil {
				return s.syncFailed(err)
			}
		}
	}
	return nil
}

// index registers the batch's packs, indexes its new blobs and refreshes
// the upload times of the known ones, in tx.
func (b *Batch) index(tx kv.Tx) error {
	now := b.s.opts.Now().UnixMilli()
	idx, packs := tx.Bucket(bucketIndex), tx.Bucket(bucketPacks)
	for _, p := range b.packs {
		if err := packs.Put(packKey(p.id), packStats{total: uint64(p.size), level: b.level}.encode()); err != nil {
			return err
		}
	}
	refresh := keysSorted(b.refresh)
	es, ok, bad := lookupMany(tx, refresh)
	for i, key := range refresh {
		if err := bad[i]; err != nil {
			return err
		}
		if !ok[i] {
			return &sbxdb.BlobError{Key: key, Err: sbxdb.ErrBlobNotFound, Detail: "deleted while the batch was written; retry"}
		}
		e := es[i]
		e.uploaded = now
		if err := idx.Put([]byte(key), e.encode(key)); err != nil {
			return err
		}
	}
	added := keysSorted(b.added)
	olds, stored, _ := lookupMany(tx, added) // a damaged entry is replaced by ours
	for i, key := range added {
		e := b.added[key]
		// Another batch may have stored the key meanwhile. A packed copy
		// of ours is then dead; a large one was renamed over the same
		// path, so our entry describes the file now there.
		if old := olds[i]; stored[i] && e.packed() {
			if err := addDead(tx, e.pack, e.footprint()); err != nil {
				return err
			}
			old.uploaded = now
			if err := idx.Put([]byte(key), old.encode(key)); err != nil {
				return err
			}
			continue
		}
		e.uploaded = now
		if err := idx.Put([]byte(key), e.encode(key)); err != nil {
			return err
		}
	}
	return nil
}

// Pin pins keys the caller will rely on without adding their bytes (an
// artifact stored earlier) and returns those the store does not hold,
// sorted: their bytes must be added. The pins last until Close. Keys whose
// upload time is older than RefreshAfter are refreshed by Commit.
func (b *Batch) Pin(ctx context.Context, keys []string) (missing []string, err error) {
	missing, stale, err := b.Lookup(ctx, keys)
	if err == nil {
		b.Refresh(stale)
	}
	return missing, err
}

// Lookup is Pin that leaves refreshing to the caller: it pins keys and
// returns, sorted, those the store does not hold (or holds under a damaged
// index entry, which storing the bytes again replaces) and those whose
// upload time is older than RefreshAfter. A capture looks up every key its
// stat cache holds while it walks the tree, and then refreshes only the
// stale keys of the files it found: a blob the new checkpoint does not
// name keeps its upload time.
func (b *Batch) Lookup(ctx context.Context, keys []string) (missing, stale []string, err error) {
	b.mu.Lock()
	if err := b.writable(); err != nil {
		b.mu.Unlock()
		return nil, nil, err
	}
	b.held = append(b.held, keys...)
	b.mu.Unlock()
	b.s.pins.pin(keys)
	staleBefore := b.s.opts.Now().Add(-RefreshAfter).UnixMilli()
	return b.s.scan(ctx, slices.Clone(keys), staleBefore)
}

// Refresh marks keys the batch relies on (returned stale by Lookup) to have
// their upload time refreshed by Commit.
func (b *Batch) Refresh(keys []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		b.refresh[k] = struct{}{}
	}
}

// Close finishes the batch: if it was not committed, the files it wrote are
// removed and nothing is indexed; in any case its pins are released. Call it
// once the checkpoint naming the batch's keys has committed or failed.
// Calling it again does nothing.
func (b *Batch) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.waitIdle()
	b.closed = true
	if !b.done {
		b.done = true
		b.removeFiles()
	}
	b.s.pins.unpin(b.held)
	b.held = nil
}

// removeFiles removes what an uncommitted batch wrote. Large files already
// renamed into place are left: a committed batch may have put the same key
// there, and an unindexed file is never read.
func (b *Batch) removeFiles() {
	for _, p := range b.packs {
		p.f.Close()
		if b.s.cache != nil {
			b.s.cache.drop(p.id) // registered once uploaded
		}
		b.s.removeUnindexed(p.path)
	}
	for _, tmp := range b.larges {
		b.s.removeUnindexed(tmp)
	}
	if len(b.uploaded) > 0 {
		b.s.deleteUploads(b.uploaded) // unique names: no other batch's
		b.uploaded = nil
	}
}

// packWriter appends frames to one new pack file.
type packWriter struct {
	id   uint64
	path string
	f    vfs.File
	w    *bufio.Writer
	size int64
}

func (s *Store) newPack() (*packWriter, error) {
	var idb [8]byte
	rand.Read(idb[:])
	id := binary.LittleEndian.Uint64(idb[:])
	path := filepath.Join(s.dir, packPath(id))
	f, err := s.fs.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return &packWriter{id: id, path: path, f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

// finish flushes the pack, fsyncs it (unless s is NoSync: a failure is
// reported as s.syncFailed does) and closes it.
func (p *packWriter) finish(s *Store) error {
	if err := p.w.Flush(); err != nil {
		return err
	}
	if !s.opts.NoSync {
		if err := p.f.Sync(); err != nil {
			return s.syncFailed(err)
		}
	}
	return p.f.Close()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
