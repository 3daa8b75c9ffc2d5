// Package cas is sbxdb's content-addressed blob store: file and artifact
// bytes under keys sandbox-files/sha256/<hex> and sandbox-artifacts/sha256/<hex>
// of their uncompressed bytes, stored zstd-compressed (or raw where that does
// not pay) in the blob directory beside the database, written once, and
// verified against their key on every read.
//
// Small blobs are compressed together in blocks appended to pack files,
// and large ones get a file each (format.go); an index in the caller's bbolt file says where each blob is
// and when it was last uploaded. Writes go through a Batch, which makes all
// of its bytes durable with one barrier and then commits its index entries
// in one transaction. Store also has the object-store methods the contract's
// R2 binding uses: Put, Get, Head, List and Delete.
//
// cas knows nothing of checkpoints or reference counts.
package cas

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb/vfs"
	bolt "go.etcd.io/bbolt"
)

// DB runs the index's transactions. *bbolt.DB satisfies it; the engine
// passes an adapter that routes writes through its group commit.
type DB interface {
	View(fn func(*bolt.Tx) error) error
	Update(fn func(*bolt.Tx) error) error
}

// Gate decides whether a Store may still change the disk. The DB a Store
// is opened with may implement it, to share one decision with everything
// else written to its file; a Store whose DB does not keeps its own.
//
// After a failed fsync the state of a file is unknown: the kernel may have
// dropped the dirty pages the fsync was to write, so later writes through
// the same open store could build on bytes that are not on disk. The Store
// therefore reports every failed sync of a pack, a large blob file or a
// directory to its gate, and asks the gate before each change: once
// Refused returns an error, every write of the Store (a batch, a repack, a
// delete, an index transaction, any file created, renamed or removed)
// fails with it; reads go on. Opening the store again clears it: Open
// removes the packs and temporary files no index entry names, as after a
// crash (RemoveOrphans, the large files).
type Gate interface {
	// Refused returns the error every write must fail with, or nil.
	Refused() error
	// SyncFailed is told of a failed sync of one of the store's files or
	// directories; err matches ErrSyncFailed.
	SyncFailed(err error)
}

// ownGate is the Gate of a Store whose DB has none: the first failed sync
// refuses every later write.
type ownGate struct{ failed atomic.Pointer[error] }

func (g *ownGate) Refused() error {
	if p := g.failed.Load(); p != nil {
		return fmt.Errorf("store must be reopened: %w", *p)
	}
	return nil
}

func (g *ownGate) SyncFailed(err error) { g.failed.CompareAndSwap(nil, &err) }

// syncFailed reports a failed sync to the store's gate and returns the
// error for the caller: ErrSyncFailed wrapping err.
func (s *Store) syncFailed(err error) error {
	err = fmt.Errorf("cas: %w: %w", ErrSyncFailed, err)
	s.gate.SyncFailed(err)
	return err
}

// removeUnindexed removes a file a batch wrote and never indexed, even
// when the gate refuses writes: it undoes a failed write (a failed sync
// among them), leaving the store as it was, and no index entry can name
// it.
func (s *Store) removeUnindexed(path string) error { return s.opts.FS.Remove(path) }

// gatedDB is the index's DB with every write transaction asked of the
// gate first.
type gatedDB struct {
	DB
	gate Gate
}

func (g gatedDB) Update(fn func(*bolt.Tx) error) error {
	if err := g.gate.Refused(); err != nil {
		return err
	}
	return g.DB.Update(fn)
}

// gatedFS is the store's FS with every change asked of the gate first.
// Syncs are not changes, and files opened before the gate closed are not
// asked again: their batch cannot commit.
type gatedFS struct {
	vfs.FS
	gate Gate
}

func (g gatedFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if err := g.gate.Refused(); err != nil {
		return nil, err
	}
	return g.FS.OpenFile(name, flag, perm)
}

func (g gatedFS) CreateTemp(dir, pattern string) (vfs.File, error) {
	if err := g.gate.Refused(); err != nil {
		return nil, err
	}
	return g.FS.CreateTemp(dir, pattern)
}

func (g gatedFS) Mkdir(name string, perm fs.FileMode) error {
	return g.ask(func() error { return g.FS.Mkdir(name, perm) })
}

func (g gatedFS) MkdirAll(name string, perm fs.FileMode) error {
	return g.ask(func() error { return g.FS.MkdirAll(name, perm) })
}

func (g gatedFS) MkdirTemp(dir, pattern string) (string, error) {
	if err := g.gate.Refused(); err != nil {
		return "", err
	}
	return g.FS.MkdirTemp(dir, pattern)
}

func (g gatedFS) Chmod(name string, mode fs.FileMode) error {
	return g.ask(func() error { return g.FS.Chmod(name, mode) })
}

func (g gatedFS) Rename(oldpath, newpath string) error {
	return g.ask(func() error { return g.FS.Rename(oldpath, newpath) })
}

func (g gatedFS) Remove(name string) error {
	return g.ask(func() error { return g.FS.Remove(name) })
}

func (g gatedFS) Symlink(target, name string) error {
	return g.ask(func() error { return g.FS.Symlink(target, name) })
}

func (g gatedFS) ask(op func() error) error {
	if err := g.gate.Refused(); err != nil {
		return err
	}
	return op()
}

// Options configures a Store. The zero value gives the defaults.
type Options struct {
	// Now is the clock for upload times. Default time.Now.
	Now func() time.Time
	// ReadOnly refuses writes and creates nothing.
	ReadOnly bool
	// NoSync skips fsync. Unsafe: for tests and benchmarks only.
	NoSync bool
	// PackSize is the size at which a batch starts a new pack file.
	// Default 64 MiB.
	PackSize int64
	// FS performs every change to the store's files. Default vfs.OS.
	FS vfs.FS
	// IndexMayBeOlder says the index may have lost transactions that the
	// blob directory has seen (the database opened on its older meta
	// page): pack and large files the index does not name are then moved
	// into quarantine, never removed (quarantine.go).
	IndexMayBeOlder bool
}

// MaxPacked is the largest blob Put and Batch.Add store in a pack; larger
// ones are written as a file of their own. Readers refuse packed entries
// claiming more, so a damaged index cannot make Get allocate without bound.
const MaxPacked = 4 << 20

// DefaultPackSize is the size at which a batch starts a new pack.
const DefaultPackSize = 64 << 20

// Info describes a stored blob.
type Info struct {
	Key    string
	Size   int64 // uncompressed bytes
	Stored int64 // bytes on disk: a frame's without its header, or a block member's share of its frame, header included

	Uploaded time.Time // last Put or Batch commit naming the key
}

// Store is an open blob store. It is safe for concurrent use.
type Store struct {
	dir  string
	db   DB
	opts Options
	fs   vfs.FS

	enc *zstd.Encoder // EncodeAll only; safe for concurrent use
	dec *zstd.Decoder // DecodeAll of packed blobs, output bounded by MaxPacked

	streamEnc sync.Pool // *zstd.Encoder for large blobs, one goroutine each
	streamDec sync.Pool // *zstd.Decoder likewise

	mu    sync.Mutex
	packs map[uint64]*os.File // open pack files for reading

	// packsMu is held for reading from locating a packed blob until its
	// bytes are read, and for writing while Repack removes the packs it
	// rewrote: a reader never finds its pack gone under it.
	packsMu sync.RWMutex
	// packGen counts the Repacks that removed packs, under packsMu: a
	// reader that located blobs earlier and let go of the lock meanwhile
	// (ReadEach) locates them again if it changed.
	packGen uint64
	// repackMu lets one Repack run at a time.
	repackMu sync.Mutex

	pins pinSet

	// indexMayBeOlder is Options.IndexMayBeOlder, or set by Open when the
	// blob directory lacks a pack the index relies on: unindexed files are
	// quarantined instead of removed. Set before the store is shared.
	indexMayBeOlder bool
	// quarantinedAtOpen lists the files Open moved into quarantine.
	quarantinedAtOpen []string
	// quarantineMu makes choosing a free name in quarantine and moving a
	// file there one step.
	quarantineMu sync.Mutex

	// gate refuses every write once a sync has failed (see Gate); db and
	// fs ask it before each change.
	gate Gate
}

// Open opens the blob store in dir (created unless read-only) with its
// index in db.
func Open(dir string, db DB, opts Options) (*Store, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PackSize <= 0 {
		opts.PackSize = DefaultPackSize
	}
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	gate, ok := db.(Gate)
	if !ok {
		gate = &ownGate{}
	}
	s := &Store{dir: dir, db: gatedDB{db, gate}, opts: opts, fs: gatedFS{opts.FS, gate}, packs: map[uint64]*os.File{}, gate: gate,
		indexMayBeOlder: opts.IndexMayBeOlder}
	s.pins.cond.L = &s.pins.mu
	if !opts.ReadOnly {
		for _, d := range []string{"packs", "large", "tmp"} {
			if err := s.fs.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				return nil, err
			}
		}
		// Files in tmp/ belong to batches that never committed.
		if ents, err := os.ReadDir(filepath.Join(dir, "tmp")); err == nil {
			for _, e := range ents {
				s.fs.Remove(filepath.Join(dir, "tmp", e.Name()))
			}
		}
		if err := db.Update(initIndex); err != nil {
			return nil, err
		}
		if err := s.removeOrphanPacks(); err != nil {
			return nil, err
		}
	} else if err := db.View(checkFormat); err != nil {
		return nil, err
	}
	var err error
	s.enc, err = zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithEncoderCRC(false), // the sha256 of the raw bytes is checked instead
		zstd.WithZeroFrames(true))
	if err != nil {
		return nil, err
	}
	s.dec, err = zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithDecoderMaxMemory(MaxPacked),
		zstd.WithDecodeAllCapLimit(true)) // output bounded by the size the index records
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ErrFormat reports a blob index written by a newer build.
var ErrFormat = errors.New("cas: unsupported blob format")

func initIndex(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketMeta, bucketIndex, bucketPacks} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyFormat); v == nil || len(v) == 1 && v[0] == 1 {
		// Format 2 only added block frames: a format-1 index reads as it is.
		return meta.Put(keyFormat, []byte{FormatVersion})
	}
	return checkFormat(tx)
}

func checkFormat(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return nil // a store that never held a blob
	}
	if v := meta.Get(keyFormat); len(v) != 1 || v[0] < 1 || v[0] > FormatVersion {
		return fmt.Errorf("%w: blob index has format %v, this build reads 1 to %d", ErrFormat, v, FormatVersion)
	}
	return nil
}

// Dir returns the blob directory.
func (s *Store) Dir() string { return s.dir }

// Close closes the files the store holds open. Batches must be finished.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, f := range s.packs {
		f.Close()
		delete(s.packs, id)
	}
	return nil
}

// lookup returns the index entry of key; ok is false when there is none.
func lookup(tx *bolt.Tx, key string) (e entry, ok bool, err error) {
	b := tx.Bucket(bucketIndex)
	if b == nil {
		return e, false, nil
	}
	v := b.Get([]byte(key))
	if v == nil {
		return e, false, nil
	}
	e, err = decodeEntry(key, v)
	if err != nil {
		return e, false, corrupt(key, "index entry: "+err.Error())
	}
	return e, true, nil
}

func (s *Store) entry(key string) (e entry, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		var ok bool
		e, ok, err = lookup(tx, key)
		if err == nil && !ok {
			err = &Error{Key: key, Err: ErrNotFound}
		}
		return err
	})
	return e, err
}

func (e *entry) info(key string) Info {
	stored := e.stored
	if e.where == whereBlock {
		stored = e.share
	}
	return Info{Key: key, Size: int64(e.raw), Stored: int64(stored), Uploaded: time.UnixMilli(e.uploaded)}
}

// Head returns what the index says of key, or an error matching ErrNotFound.
// It reads no blob bytes. Like a Put of bytes already stored, a Head of a
// stored key is a dedup hit (SPEC §5.2: a host heads a key and skips the
// upload): on a writable store, an upload time older than RefreshAfter is
// refreshed, so a sweep's OlderThan window protects the blob.
func (s *Store) Head(ctx context.Context, key string) (Info, error) {
	if _, _, err := ParseKey(key); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	e, err := s.entry(key)
	if err != nil {
		return Info{}, err
	}
	now := s.opts.Now().UnixMilli()
	if !s.opts.ReadOnly && e.uploaded < now-RefreshAfter.Milliseconds() {
		err := s.db.Update(func(tx *bolt.Tx) error {
			cur, ok, err := lookup(tx, key)
			if err != nil || !ok {
				return err
			}
			cur.uploaded = now
			e = cur
			return tx.Bucket(bucketIndex).Put([]byte(key), cur.encode(key))
		})
		if err != nil {
			return Info{}, err
		}
	}
	return e.info(key), nil
}

const noStaleCheck = math.MinInt64

// RefreshAfter is how old an upload time may get before a dedup hit that
// does not write the blob (a Head, a capture's stat-cache hit) refreshes
// it. Refreshing on every hit would rewrite a workspace's worth of index
// entries on every unchanged capture; an hour keeps a blob in use younger
// than any sensible sweep window (the CLI's example is 24 h).
const RefreshAfter = time.Hour

// Missing returns the keys of keys that the store does not hold, sorted, in
// one read transaction. It sorts keys (in place).
func (s *Store) Missing(ctx context.Context, keys []string) ([]string, error) {
	missing, _, err := s.scan(ctx, keys, noStaleCheck)
	return missing, err
}

// scan sorts keys (in place) and walks the index with one cursor, stepping
// forward when the next key is near and seeking when it is far, so checking
// a workspace's worth of keys costs about one scan of their part of the
// index rather than a root-to-leaf search per key. It returns the keys not
// stored and, unless staleBefore is noStaleCheck, those stored with an
// upload time before it (Unix ms). A key whose entry is damaged counts as
// not stored when staleness is asked for (a batch then stores the bytes
// again, replacing the entry) and as stored otherwise (Missing: the key is
// there, and check reports the damage).
func (s *Store) scan(ctx context.Context, keys []string, staleBefore int64) (missing, stale []string, err error) {
	slices.Sort(keys)
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIndex)
		if b == nil {
			missing = slices.Compact(slices.Clone(keys))
			return nil
		}
		c := b.Cursor()
		var k, v []byte
		for i, key := range keys {
			if i%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if i > 0 && key == keys[i-1] {
				continue
			}
			// Up to 8 steps forward before falling back to a seek.
			for step := 0; k != nil && string(k) < key; step++ {
				if step == 8 {
					k = nil
					break
				}
				k, v = c.Next()
			}
			if k == nil || string(k) < key {
				k, v = c.Seek([]byte(key))
			}
			if k == nil || string(k) != key {
				missing = append(missing, key)
				continue
			}
			if staleBefore != noStaleCheck {
				if e, err := decodeEntry(key, v); err != nil {
					missing = append(missing, key)
				} else if e.uploaded < staleBefore {
					stale = append(stale, key)
				}
			}
		}
		return nil
	})
	return missing, stale, err
}

// List returns every blob whose key starts with prefix, in key byte order,
// with its upload time.
func (s *Store) List(ctx context.Context, prefix string) ([]Info, error) {
	var out []Info
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIndex)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek([]byte(prefix)); k != nil && bytes.HasPrefix(k, []byte(prefix)); k, v = c.Next() {
			if len(out)%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			e, err := decodeEntry(string(k), v)
			if err != nil {
				return corrupt(string(k), "index entry: "+err.Error())
			}
			out = append(out, e.info(string(k)))
		}
		return nil
	})
	return out, err
}

// Get returns the verified bytes of key: an error matching ErrNotFound when
// it is not stored, ErrCorrupt when what is stored does not hash to the key
// or has the wrong size. It never returns wrong bytes.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	s.packsMu.RLock()
	ns, sum, e, err := s.locate(ctx, key)
	if err == nil && e.packed() {
		defer s.packsMu.RUnlock()
		return s.readPacked(key, ns, sum, &e, nil, nil)
	}
	s.packsMu.RUnlock()
	if err != nil {
		return nil, err
	}
	r, err := s.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := bytes.NewBuffer(make([]byte, 0, min(r.size, 64<<20)))
	if _, err := io.Copy(buf, r); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Put stores data under key unless the store holds it already, in which
// case it writes no bytes and refreshes the key's upload time. A key that is
// not the sha256 of data is refused with ErrKeyMismatch.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	ns, sum, err := ParseKey(key)
	if err != nil {
		return err
	}
	if sha256.Sum256(data) != sum {
		return &Error{Key: key, Err: ErrKeyMismatch}
	}
	b := s.NewBatch()
	defer b.Close()
	if len(data) <= MaxPacked {
		_, err = b.add(ctx, ns, sum, data)
	} else {
		_, err = b.AddReader(ctx, ns, bytes.NewReader(data))
	}
	if err != nil {
		return err
	}
	return b.Commit(ctx)
}

// Delete removes key. Deleting a key that is not stored is not an error,
// as with an object store; deleting one a batch in progress has pinned is
// ErrPinned. A packed blob's bytes become dead space in its pack; a large
// blob's file is removed after the index commits.
func (s *Store) Delete(ctx context.Context, key string) error {
	if _, _, err := ParseKey(key); err != nil {
		return err
	}
	if s.opts.ReadOnly {
		return &Error{Key: key, Err: ErrReadOnly}
	}
	deleted, err := s.DeleteUnused(ctx, []string{key}, nil)
	if err == nil && len(deleted) == 0 && s.Pinned(key) {
		return &Error{Key: key, Err: ErrPinned}
	}
	return err
}

func addDead(tx *bolt.Tx, pack uint64, n uint64) error {
	b := tx.Bucket(bucketPacks)
	k := packKey(pack)
	st, err := decodePackStats(b.Get(k))
	if err != nil {
		return fmt.Errorf("%w: pack %016x stats: %v", ErrCorrupt, pack, err)
	}
	st.dead += n
	return b.Put(k, st.encode())
}

// packFile returns an open pack file for reading.
func (s *Store) packFile(id uint64) (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.packs[id]; f != nil {
		return f, nil
	}
	f, err := os.Open(filepath.Join(s.dir, packPath(id)))
	if err != nil {
		return nil, err
	}
	s.packs[id] = f
	return f, nil
}

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
	return s.openLarge(key, ns, sum, &e)
}

// openLarge returns a streaming, verifying reader of the large blob e names.
func (s *Store) openLarge(key string, ns Namespace, sum [32]byte, e *entry) (*Reader, error) {
	f, err := os.Open(filepath.Join(s.dir, largePath(ns, sum)))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, corrupt(key, "indexed file is missing")
		}
		return nil, &Error{Key: key, Err: err}
	}
	var hb [headerSize]byte
	if _, err := io.ReadFull(f, hb[:]); err != nil {
		f.Close()
		return nil, corrupt(key, "truncated frame header")
	}
	if _, err := checkFrame(key, ns, sum, e, hb[:]); err != nil {
		f.Close()
		return nil, err
	}
	r, err := s.streamingReader(key, sum, e.raw, e.codec, io.LimitReader(f, int64(e.stored)))
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closers = append(r.closers, f)
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
// bounds-exact copies, measured about 2x slower on this data, when it does
// not. The output stays bounded: at most raw+decodeSlack bytes, and any
// length but raw is corrupt.
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
	f, err := s.packFile(e.pack)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, header{}, corrupt(key, fmt.Sprintf("pack %016x is missing", e.pack))
		}
		return nil, header{}, &Error{Key: key, Err: err}
	}
	fb := getBuf(headerSize + int(e.stored))
	if n, err := f.ReadAt(*fb, int64(e.offset)); n != len(*fb) {
		putBuf(fb)
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

// Reader reads one blob's bytes, verifying them (see Store.Open).
type Reader struct {
	key     string
	size    int64
	r       io.Reader
	want    [32]byte
	verify  hash.Hash
	zstd    bool // a read error is a decoding error: the bytes are damaged
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
		if r.zstd {
			err = corrupt(r.key, "zstd: "+err.Error())
		} else {
			err = &Error{Key: r.key, Err: err}
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

// keysSorted is a helper for deterministic commits.
func keysSorted[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
