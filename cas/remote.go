package cas

// Remote blobs. A Store opened with Options.Remote keeps its packs and
// large blobs as objects in an object store (internal/objstore: a bucket
// that many servers share, their index being one shared database), under
// the names format.go gives. The bucket is the truth; the local blob
// directory is a staging area for a batch's files until they are uploaded
// and a cache of whole packs for reading.
//
// The invariants that make sharing safe:
//   - an object is uploaded before the index entry naming it commits
//     (Batch.sync is the barrier), so an entry never names an object that
//     was not there;
//   - a pack's name is a random id and a large blob's name a random suffix,
//     drawn for each upload: no object is ever written twice, so a cached
//     pack never goes stale, and deleting the object one entry named never
//     removes a newer upload of the same key by another server;
//   - objects are deleted only when the index no longer names them (a
//     committed delete, a failed batch's own uploads) or, for objects found
//     by listing, when they are also older than the orphan window: another
//     server's batch may have uploaded them and not yet committed. Open
//     deletes no object.
//
// Repacking is safe across servers (remote_repack.go): new packs are
// uploaded under new names before one index transaction moves the entries
// that still name the old ones, and an old pack's object is deleted only a
// window after that, by a later RemoveOrphans. The local blob directory
// caches packs up to Options.CacheSize (cache.go).
//
// The quarantine of unindexed files is local-only: it exists for a bbolt
// file that lost transactions its blob directory saw, which cannot happen
// with a shared database, and a cache missing packs is normal, not a sign
// of it.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/objstore"
)

// ErrRemoteUnsupported reports an operation a store with remote blobs
// refuses because it is not yet safe across servers sharing the bucket.
var ErrRemoteUnsupported = errors.New("cas: not supported with blobs in object storage")

func remoteUnsupported(op string) error {
	return fmt.Errorf("%w: %s", ErrRemoteUnsupported, op)
}

// errInObjectStorage is what a store without Remote says of an entry
// naming a remote object.
func errInObjectStorage(key string) error {
	return &sbxdb.BlobError{Key: key, Err: ErrFormat, Detail: "this store's blobs are in object storage; open it with its bucket"}
}

// DefaultRemotePackSize is the pack size of a store with remote blobs: a
// few MiB per object keeps a cache miss cheap and a batch's upload
// parallel.
const DefaultRemotePackSize = 8 << 20

// uploadParallel bounds the objects one batch uploads at once.
const uploadParallel = 4

// RemoteOrphanMinAge is the least age at which RemoveOrphans deletes an
// object the index does not name, whatever window it is given: the object
// may be another server's upload whose batch has not committed yet, and a
// batch commits within minutes of its first upload.
const RemoteOrphanMinAge = time.Hour

// remoteTimeout bounds the best-effort deletes of a failed batch's objects.
const remoteTimeout = 30 * time.Second

func packObject(id uint64) string { return fmt.Sprintf("packs/%016x.pack", id) }

func largeObject(ns Namespace, sum [32]byte, suffix uint64) string {
	h := hex.EncodeToString(sum[:])
	return fmt.Sprintf("large/%s/%s/%s.%016x", ns.dir(), h[:2], h, suffix)
}

// parsePackObject returns the id of a pack object's name.
func parsePackObject(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "packs/")
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, ".pack"); !ok || len(s) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 16, 64)
	return id, err == nil
}

// parseLargeObject returns the key and suffix of a large object's name.
func parseLargeObject(name string) (key string, suffix uint64, ok bool) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "large" {
		return "", 0, false
	}
	var ns Namespace
	switch parts[1] {
	case Files.dir():
		ns = Files
	case Artifacts.dir():
		ns = Artifacts
	default:
		return "", 0, false
	}
	h, sfx, found := strings.Cut(parts[3], ".")
	if !found || len(h) != 64 || len(sfx) != 16 || parts[2] != h[:2] {
		return "", 0, false
	}
	suffix, err := strconv.ParseUint(sfx, 16, 64)
	if err != nil {
		return "", 0, false
	}
	key = ns.Prefix() + h
	if _, _, err := ParseKey(key); err != nil {
		return "", 0, false
	}
	return key, suffix, true
}

func randomID() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// upload puts the batch's packs (finished) and large files in the object
// store, uploadParallel at a time, and turns the large blobs' entries into
// whereObject ones. Their temporary files are removed once uploaded; the
// packs stay as the cache. Any failure fails the whole upload; the names
// tried are in b.uploaded for removeFiles. b.mu is held.
func (b *Batch) upload(ctx context.Context) error {
	s := b.s
	type job struct{ name, path string }
	var jobs []job
	for _, p := range b.packs {
		jobs = append(jobs, job{packObject(p.id), p.path})
	}
	suffixes := map[string]uint64{}
	for _, key := range keysSorted(b.larges) {
		ns, sum, _ := ParseKey(key)
		sfx := randomID()
		suffixes[key] = sfx
		jobs = append(jobs, job{largeObject(ns, sum, sfx), b.larges[key]})
	}
	for _, j := range jobs {
		b.uploaded = append(b.uploaded, j.name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, uploadParallel)
	)
	for _, j := range jobs {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.putFile(ctx, j.name, j.path); err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		return first
	}
	for _, p := range b.packs {
		s.cache.add(p.id, nil, p.size, 0) // whole and uploaded: the cache's now
	}
	for key, sfx := range suffixes {
		e := b.added[key]
		e.where, e.object = whereObject, sfx
		b.added[key] = e
		s.removeUnindexed(b.larges[key])
		delete(b.larges, key)
	}
	return nil
}

// putFile uploads the file at path as object name.
func (s *Store) putFile(ctx context.Context, name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := s.opts.Remote.Put(ctx, name, f, fi.Size(), objstore.PutOptions{}); err != nil {
		return fmt.Errorf("cas: uploading %s: %w", name, err)
	}
	return nil
}

// deleteUploads removes a failed batch's objects, best effort: no index
// entry names them, and RemoveOrphans takes any left behind.
func (s *Store) deleteUploads(names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		s.opts.Remote.Delete(ctx, name)
	}
}

// fetchCall is one download of a pack into the cache, which concurrent
// readers of the pack wait for rather than download it again.
type fetchCall struct {
	done    chan struct{}
	waiters int // readers waiting, under fetchMu: each gets a reference
	p       *cachedPack
	err     error
}

// cachedPack returns pack id from the cache with a reference taken (the
// caller releases it), downloading it first if it is not cached, or
// waiting for the download in progress.
func (s *Store) cachedPack(id uint64) (*cachedPack, error) {
	if p := s.cache.acquire(id); p != nil {
		return p, nil
	}
	s.fetchMu.Lock()
	if c := s.fetching[id]; c != nil {
		c.waiters++
		s.fetchMu.Unlock()
		<-c.done
		return c.p, c.err
	}
	// A download registers its pack before it leaves fetching: a reader
	// that missed the cache and then the download finds it now.
	if p := s.cache.acquire(id); p != nil {
		s.fetchMu.Unlock()
		return p, nil
	}
	c := &fetchCall{done: make(chan struct{})}
	if s.fetching == nil {
		s.fetching = map[uint64]*fetchCall{}
	}
	s.fetching[id] = c
	s.fetchMu.Unlock()
	f, size, err := s.downloadPack(id)
	s.fetchMu.Lock()
	delete(s.fetching, id)
	if err == nil {
		// One reference for this reader and one for each waiter, taken
		// before any eviction can see the pack.
		c.p = s.cache.add(id, f, size, 1+c.waiters)
	}
	c.err = err
	s.fetchMu.Unlock()
	close(c.done)
	return c.p, c.err
}

// downloadPack copies pack id's object to a temporary file and renames it
// into packs/: a cached pack is always whole. It returns the file, open
// for reading, and its size. The cache is written through the ungated
// file system: reads go on when the gate refuses writes, and a cached
// copy changes nothing the index relies on.
func (s *Store) downloadPack(id uint64) (*os.File, int64, error) {
	ctx := context.Background()
	rc, err := s.opts.Remote.Open(ctx, packObject(id), 0, -1)
	if err != nil {
		return nil, 0, err
	}
	defer rc.Close()
	tmp, err := s.opts.FS.CreateTemp(filepath.Join(s.dir, "tmp"), "pack-*")
	if err != nil {
		return nil, 0, err
	}
	n, err := io.Copy(tmp, rc)
	if err == nil && !s.opts.NoSync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	path := filepath.Join(s.dir, packPath(id))
	if err == nil {
		err = s.opts.FS.Rename(tmp.Name(), path)
	}
	if err != nil {
		s.opts.FS.Remove(tmp.Name())
		return nil, 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	return f, n, nil
}

// objectReaderAt reads a pack by ranged requests: a read-only store
// creates no cache.
type objectReaderAt struct {
	st   objstore.Store
	name string
}

func (o objectReaderAt) ReadAt(p []byte, off int64) (int, error) {
	rc, err := o.st.Open(context.Background(), o.name, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.ReadFull(rc, p)
}

// openObject opens the object of a whereObject entry.
func (s *Store) openObject(ctx context.Context, key string, ns Namespace, sum [32]byte, e *entry) (io.ReadCloser, error) {
	if s.opts.Remote == nil {
		return nil, errInObjectStorage(key)
	}
	rc, err := s.opts.Remote.Open(ctx, largeObject(ns, sum, e.object), 0, -1)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, corrupt(key, "indexed object is missing")
		}
		return nil, &sbxdb.BlobError{Key: key, Err: err}
	}
	return rc, nil
}

// sourceReader remembers the error its reader returned, so that a failure
// to fetch bytes (a network error) is not mistaken for damage when a
// decoder reports it.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// remoteListing is what one listing of the bucket found.
type remoteListing struct {
	packs   map[uint64]objstore.Info
	objects map[string]objstore.Info // large objects by name
}

// listRemote lists packs/ and large/.
func (s *Store) listRemote(ctx context.Context) (*remoteListing, error) {
	l := &remoteListing{packs: map[uint64]objstore.Info{}, objects: map[string]objstore.Info{}}
	err := s.opts.Remote.List(ctx, "packs/", func(i objstore.Info) error {
		if id, ok := parsePackObject(i.Name); ok {
			l.packs[id] = i
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = s.opts.Remote.List(ctx, "large/", func(i objstore.Info) error {
		if _, _, ok := parseLargeObject(i.Name); ok {
			l.objects[i.Name] = i
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// remoteOrphan is an object no index entry names.
type remoteOrphan struct {
	name string
	key  string // a large object's key; "" for a pack
	pack uint64
	mod  time.Time
}

// remoteOrphans lists the bucket and returns the objects the index does
// not name: packs that cas_packs does not list, cas_retired does not hold
// (remote_repack.go: they go a window after their retirement) and no entry
// names, large objects whose key's entry names another object or none.
func (s *Store) remoteOrphans(ctx context.Context) ([]remoteOrphan, error) {
	// Retired before the listing: a pack retired after it was read is in
	// the listing and in cas_retired both.
	retired, err := s.retiredPacks()
	if err != nil {
		return nil, err
	}
	l, err := s.listRemote(ctx)
	if err != nil {
		return nil, err
	}
	fresh, err := s.retiredPacks()
	if err != nil {
		return nil, err
	}
	maps.Copy(retired, fresh)
	var out []remoteOrphan
	err = s.db.View(func(tx kv.Tx) error {
		out = out[:0]
		packs := tx.Bucket(bucketPacks)
		unlisted := map[uint64]bool{}
		for id := range l.packs {
			if _, ok := retired[id]; ok {
				continue
			}
			if packs == nil || packs.Get(packKey(id)) == nil {
				unlisted[id] = true
			}
		}
		if len(unlisted) > 0 {
			// Rare (a failed batch's leftovers): one pass over the index
			// keeps a pack that entries name though its record is gone.
			err := forEachEntry(ctx, tx, func(_ string, e *entry, err error) error {
				if err == nil && e.packed() {
					delete(unlisted, e.pack)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		for id := range unlisted {
			out = append(out, remoteOrphan{name: packObject(id), pack: id, mod: l.packs[id].Modified})
		}
		for name, info := range l.objects {
			key, sfx, _ := parseLargeObject(name)
			e, ok, err := lookup(tx, key)
			if err != nil || ok && e.where == whereObject && e.object == sfx {
				continue // named (or damaged: Check reports it)
			}
			out = append(out, remoteOrphan{name: name, key: key, mod: info.Modified})
		}
		return nil
	})
	return out, err
}

// removeRemoteOrphans is RemoveOrphans for a store with remote blobs: the
// packs a repack retired long enough ago (removeRetired), then the objects
// no entry names.
func (s *Store) removeRemoteOrphans(ctx context.Context, olderThan time.Duration) (int, error) {
	removed, err := s.removeRetired(ctx, olderThan)
	if err != nil {
		return removed, err
	}
	found, err := s.remoteOrphans(ctx)
	if err != nil {
		return removed, err
	}
	olderThan = max(olderThan, RemoteOrphanMinAge)
	now := s.opts.Now()
	for _, o := range found {
		if now.Sub(o.mod) <= olderThan {
			continue
		}
		if o.key == "" {
			if err := s.opts.Remote.Delete(ctx, o.name); err != nil {
				return removed, fmt.Errorf("cas: removing orphan object %s: %w", o.name, err)
			}
			s.dropCachedPack(o.pack)
			removed++
			continue
		}
		if !s.pins.markDying(o.key) {
			continue
		}
		var named bool
		err := s.db.View(func(tx kv.Tx) error {
			_, sfx, _ := parseLargeObject(o.name)
			e, ok, err := lookup(tx, o.key)
			named = ok && e.where == whereObject && e.object == sfx
			return err
		})
		if err == nil && !named {
			err = s.opts.Remote.Delete(ctx, o.name)
			if err == nil {
				removed++
			}
		}
		s.pins.unmarkDying([]string{o.key})
		if err != nil {
			return removed, &sbxdb.BlobError{Key: o.key, Err: err, Detail: "removing an orphan object"}
		}
	}
	return removed, nil
}

// dropCachedPack removes the local copy of a pack whose object is gone
// (or that no entry names any more), once no reader is inside it.
func (s *Store) dropCachedPack(id uint64) {
	if s.cache != nil {
		s.cache.drop(id)
	}
}

// removeLarge removes the file or object of a deleted large blob.
func (s *Store) removeLarge(ctx context.Context, ns Namespace, sum [32]byte, e *entry) error {
	if e.where == whereObject {
		if s.opts.Remote == nil {
			return nil // not this store's to remove: the entry is gone
		}
		return s.opts.Remote.Delete(ctx, largeObject(ns, sum, e.object))
	}
	err := s.fs.Remove(filepath.Join(s.dir, largePath(ns, sum)))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// stillIndexed reports whether key's entry is still e: Check's listing of
// the bucket lacking an object an entry named is damage only if no delete
// has removed the entry since.
func (s *Store) stillIndexed(key string, e *entry) bool {
	cur, err := s.entry(key)
	return err == nil && cur == *e
}

// remoteMark is cas_meta's keyBlobs value for an index of remote blobs.
var remoteMark = []byte("remote")

// checkPlace checks that the index and the store agree on where the blobs
// are (format.go), marking an empty index as remote on the first writable
// open with Remote: a server started without the bucket would otherwise
// index local packs no other server can read, and one started with it on
// an index of local blobs would find none of them in the bucket.
func (s *Store) checkPlace() error {
	var remote, empty bool
	place := func(tx kv.Tx) error {
		meta := tx.Bucket(bucketMeta)
		remote = meta != nil && string(meta.Get(keyBlobs)) == string(remoteMark)
		empty = true
		for _, name := range [][]byte{bucketIndex, bucketPacks} {
			if b := tx.Bucket(name); b != nil {
				if k, _ := b.Cursor().First(); k != nil {
					empty = false
				}
			}
		}
		return nil
	}
	if err := s.db.View(place); err != nil {
		return err
	}
	switch {
	case remote && s.opts.Remote == nil:
		return fmt.Errorf("%w: this store's blobs are in object storage; open it with its bucket", ErrFormat)
	case remote || s.opts.Remote == nil:
		return nil
	case !empty:
		return fmt.Errorf("%w: the blob index holds blobs of the local blob directory, which the bucket does not hold", ErrFormat)
	case s.opts.ReadOnly:
		return nil
	}
	return s.db.Update(func(tx kv.Tx) error {
		if err := place(tx); err != nil || remote {
			return err
		}
		if !empty {
			return fmt.Errorf("%w: the blob index holds blobs of the local blob directory, which the bucket does not hold", ErrFormat)
		}
		return tx.Bucket(bucketMeta).Put(keyBlobs, remoteMark)
	})
}
