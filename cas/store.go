// Package cas is sbxdb's content-addressed blob store: file and artifact
// bytes under keys sandbox-files/sha256/<hex> and sandbox-artifacts/sha256/<hex>
// of their uncompressed bytes, stored zstd-compressed (or raw where that does
// not pay) in the blob directory beside the database or in an object store
// (remote.go), written once, and verified against their key on every read.
//
// Small blobs are compressed together in blocks appended to pack files,
// and large ones get a file each (format.go); an index in the caller's
// metadata (internal/kv: the bbolt file or a shared database) says where
// each blob is and when it was last uploaded. Writes go through a Batch,
// which makes all of its bytes durable with one barrier and then commits
// its index entries in one transaction. Store also has the object-store methods the contract's
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
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/vfs"
)

// DB runs the index's transactions. kv.BoltDB satisfies it; the engine
// passes an adapter that routes writes through its group commit, to
// whichever metadata backend the store has.
type DB interface {
	View(fn func(kv.Tx) error) error
	Update(fn func(kv.Tx) error) error
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
	// Default DefaultPackSize, or DefaultRemotePackSize with Remote.
	PackSize int64
	// FS performs every change to the store's files. Default vfs.OS.
	FS vfs.FS
	// IndexMayBeOlder says the index may have lost transactions that the
	// blob directory has seen (the database opened on its older meta
	// page): pack and large files the index does not name are then moved
	// into quarantine, never removed (quarantine.go).
	// A store with Remote has no quarantine (remote.go): it is ignored.
	IndexMayBeOlder bool
	// Remote, when set, is the object store holding the blobs (remote.go):
	// the blob directory is then a staging area and a cache of packs,
	// and the index may be shared with other servers using the same
	// objects. Nil: the blobs are the blob directory's files. The caller
	// closes it after the Store.
	Remote objstore.Store
	// CacheSize bounds the bytes of the packs a store with Remote keeps in
	// its blob directory for reading (cache.go): beyond it, the least
	// recently used are removed. Default (0 or less):
	// DefaultCacheSize(dir).
	CacheSize int64
}

// MaxPacked is the largest blob Put and Batch.Add store in a pack; larger
// ones are written as a file of their own. Readers refuse packed entries
// claiming more, so a damaged index cannot make Get allocate without bound.
const MaxPacked = 4 << 20

// CaptureLevel is the zstd level at which batches compress packed blobs,
// blocks and large blobs: the fastest, so that compression keeps pace with
// reading the files. RecompressLevel is the level Repack with
// RepackOptions.Recompress rewrites colder packs and large files at, once,
// off the capture path: fewer bytes for several times the CPU per byte
// (docs/ARCHITECTURE.md, "Compression" and "Repack").
const (
	CaptureLevel    = zstd.SpeedFastest
	RecompressLevel = zstd.SpeedBetterCompression
)

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

	enc *zstd.Encoder // EncodeAll only, at CaptureLevel; safe for concurrent use
	// encs holds EncodeAll encoders of other levels (Repack's), made on
	// first use, under mu.
	encs map[zstd.EncoderLevel]*zstd.Encoder
	dec  *zstd.Decoder // DecodeAll of packed blobs, output bounded by MaxPacked

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
	// repackHook, if set (by tests), is called at each step of a remote
	// repack and of the removal of retired packs (remote_repack.go); an
	// error stops it there, as a kill would.
	repackHook func(step string) error

	pins pinSet

	// cache holds the packs of a writable store with Remote (cache.go);
	// nil otherwise.
	cache *packCache

	// fetchMu guards fetching, the downloads of packs into the cache in
	// progress (remote.go).
	fetchMu  sync.Mutex
	fetching map[uint64]*fetchCall

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
		if opts.Remote != nil {
			opts.PackSize = DefaultRemotePackSize
		}
	}
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	gate, ok := db.(Gate)
	if !ok {
		gate = &ownGate{}
	}
	s := &Store{dir: dir, db: gatedDB{db, gate}, opts: opts, fs: gatedFS{opts.FS, gate}, packs: map[uint64]*os.File{}, gate: gate,
		indexMayBeOlder: opts.IndexMayBeOlder && opts.Remote == nil}
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
		// A current index opens without a commit.
		current := false
		if err := db.View(func(tx kv.Tx) error { current = indexCurrent(tx); return nil }); err != nil {
			return nil, err
		}
		if !current {
			if err := db.Update(initIndex); err != nil {
				return nil, err
			}
		}
		if err := s.checkPlace(); err != nil {
			return nil, err
		}
		if err := s.removeOrphanPacks(); err != nil {
			return nil, err
		}
		if opts.Remote != nil {
			if opts.CacheSize <= 0 {
				s.opts.CacheSize = DefaultCacheSize(dir)
			}
			s.cache = newPackCache(dir, s.opts.CacheSize, opts.FS.Remove)
			if err := s.cache.load(); err != nil {
				return nil, err
			}
		}
	} else if err := db.View(checkFormat); err != nil {
		return nil, err
	} else if err := s.checkPlace(); err != nil {
		return nil, err
	}
	var err error
	s.enc, err = newPackEncoder()
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

func initIndex(tx kv.Tx) error {
	for _, name := range [][]byte{bucketMeta, bucketIndex, bucketPacks} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyFormat); v == nil || len(v) == 1 && v[0] >= 1 && v[0] < FormatVersion {
		// Format 2 only added block frames and format 3 a level to the
		// pack stats: an older index reads as it is.
		return meta.Put(keyFormat, []byte{FormatVersion})
	}
	return checkFormat(tx)
}

// indexCurrent reports whether initIndex would change nothing: every
// bucket is there and the format is this build's.
func indexCurrent(tx kv.Tx) bool {
	for _, name := range [][]byte{bucketMeta, bucketIndex, bucketPacks} {
		if tx.Bucket(name) == nil {
			return false
		}
	}
	v := tx.Bucket(bucketMeta).Get(keyFormat)
	return len(v) == 1 && v[0] == FormatVersion
}

func checkFormat(tx kv.Tx) error {
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
	if s.cache != nil {
		s.cache.closeAll()
	}
	return nil
}

// CacheUsage returns the bytes and the number of packs in the pack cache
// of a store with Remote (cache.go): at most Options.CacheSize bytes but
// for packs being read.
func (s *Store) CacheUsage() (bytes int64, packs int) {
	if s.cache == nil {
		return 0, 0
	}
	return s.cache.usage()
}

// encoder returns an EncodeAll encoder at level.
func (s *Store) encoder(level zstd.EncoderLevel) (*zstd.Encoder, error) {
	if level == CaptureLevel {
		return s.enc, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.encs[level]; e != nil {
		return e, nil
	}
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(level),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithWindowSize(packWindow),
		zstd.WithEncoderCRC(false),
		zstd.WithZeroFrames(true))
	if err != nil {
		return nil, err
	}
	if s.encs == nil {
		s.encs = map[zstd.EncoderLevel]*zstd.Encoder{}
	}
	s.encs[level] = e
	return e, nil
}

// lookup returns the index entry of key; ok is false when there is none.
func lookup(tx kv.Tx, key string) (e entry, ok bool, err error) {
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

// lookupMany is lookup of each of keys, read in a bounded number of
// requests (kv.Bucket.GetMany): es[i] and ok[i] are keys[i]'s entry and
// whether it has one; errs, nil when every entry decoded, holds lookup's
// error of each damaged one by index.
func lookupMany(tx kv.Tx, keys []string) (es []entry, ok []bool, errs map[int]error) {
	es, ok = make([]entry, len(keys)), make([]bool, len(keys))
	b := tx.Bucket(bucketIndex)
	if b == nil || len(keys) == 0 {
		return es, ok, nil
	}
	bk := make([][]byte, len(keys))
	for i, k := range keys {
		bk[i] = []byte(k)
	}
	for i, v := range b.GetMany(bk) {
		if v == nil {
			continue
		}
		e, err := decodeEntry(keys[i], v)
		if err != nil {
			if errs == nil {
				errs = map[int]error{}
			}
			errs[i] = corrupt(keys[i], "index entry: "+err.Error())
			continue
		}
		es[i], ok[i] = e, true
	}
	return es, ok, errs
}

func (s *Store) entry(key string) (e entry, err error) {
	err = s.db.View(func(tx kv.Tx) error {
		var ok bool
		e, ok, err = lookup(tx, key)
		if err == nil && !ok {
			err = &sbxdb.BlobError{Key: key, Err: sbxdb.ErrBlobNotFound}
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
		err := s.db.Update(func(tx kv.Tx) error {
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

// walkKeys calls found(j, v) for each of n keys in byte order (key(j) is
// the j-th; equal keys may repeat), v being its value in b or nil, walking
// one cursor forward: up to 8 steps with Next before a Seek, so that a
// dense run of keys costs about one scan of their part of the index, and
// on a backend that reads ahead (internal/kv/pgkv) a query per read-ahead
// batch rather than one per key.
//
// An error from found stops the walk and is returned.
func walkKeys(b kv.Bucket, n int, key func(j int) string, found func(j int, v []byte) error) error {
	c := b.Cursor()
	var k, v []byte
	for j := range n {
		want := key(j)
		for step := 0; k != nil && string(k) < want; step++ {
			if step == 8 {
				k = nil
				break
			}
			k, v = c.Next()
		}
		if k == nil || string(k) < want {
			k, v = c.Seek([]byte(want))
		}
		var err error
		if k != nil && string(k) == want {
			err = found(j, v)
		} else {
			err = found(j, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

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
	err = s.db.View(func(tx kv.Tx) error {
		b := tx.Bucket(bucketIndex)
		if b == nil {
			missing = slices.Compact(slices.Clone(keys))
			return nil
		}
		return walkKeys(b, len(keys), func(i int) string { return keys[i] }, func(i int, v []byte) error {
			if i%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			key := keys[i]
			switch {
			case i > 0 && key == keys[i-1]:
			case v == nil:
				missing = append(missing, key)
			case staleBefore != noStaleCheck:
				if e, err := decodeEntry(key, v); err != nil {
					missing = append(missing, key)
				} else if e.uploaded < staleBefore {
					stale = append(stale, key)
				}
			}
			return nil
		})
	})
	return missing, stale, err
}

// List returns every blob whose key starts with prefix, in key byte order,
// with its upload time.
func (s *Store) List(ctx context.Context, prefix string) ([]Info, error) {
	var out []Info
	err := s.db.View(func(tx kv.Tx) error {
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

// InfoIn returns what the index, read in tx (a transaction of the DB the
// store was opened with), says of key; ok is false when it holds no entry.
// It changes nothing: a caller that relies on the blob refreshes its upload
// time through a Batch.
func InfoIn(tx kv.Tx, key string) (info Info, ok bool, err error) {
	e, ok, err := lookup(tx, key)
	if !ok || err != nil {
		return Info{}, false, err
	}
	return e.info(key), true, nil
}

// ListIn returns, in key byte order, up to limit blobs whose key starts
// with prefix and sorts after after, read in tx: one page of a listing
// whose memory is bounded by limit, not by the store.
func ListIn(tx kv.Tx, prefix, after string, limit int) ([]Info, error) {
	b := tx.Bucket(bucketIndex)
	if b == nil || limit <= 0 {
		return nil, nil
	}
	start := prefix
	if after >= prefix {
		start = after
	}
	var out []Info
	c := b.Cursor()
	for k, v := c.Seek([]byte(start)); k != nil && bytes.HasPrefix(k, []byte(prefix)) && len(out) < limit; k, v = c.Next() {
		if string(k) == after {
			continue
		}
		e, err := decodeEntry(string(k), v)
		if err != nil {
			return nil, corrupt(string(k), "index entry: "+err.Error())
		}
		out = append(out, e.info(string(k)))
	}
	return out, nil
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
		return &sbxdb.BlobError{Key: key, Err: sbxdb.ErrBlobKeyMismatch}
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
		return &sbxdb.BlobError{Key: key, Err: ErrReadOnly}
	}
	deleted, err := s.DeleteUnused(ctx, []string{key}, nil)
	if err == nil && len(deleted) == 0 && s.Pinned(key) {
		return &sbxdb.BlobError{Key: key, Err: ErrPinned}
	}
	return err
}

func addDead(tx kv.Tx, pack uint64, n uint64) error {
	b := tx.Bucket(bucketPacks)
	k := packKey(pack)
	st, err := decodePackStats(b.Get(k))
	if err != nil {
		return fmt.Errorf("%w: pack %016x stats: %v", sbxdb.ErrBlobCorrupt, pack, err)
	}
	st.dead += n
	return b.Put(k, st.encode())
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
