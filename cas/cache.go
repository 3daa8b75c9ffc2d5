package cas

// The pack cache of a store with remote blobs: whole packs downloaded from
// the bucket (and those a batch wrote and uploaded) kept in packs/ for
// reading, bounded by Options.CacheSize. Packs beyond the bound are
// removed least recently used first.
//
// Properties:
//   - a pack is in the cache only whole: a download is renamed into place
//     after it is complete, and a batch's pack is registered after its
//     upload; every read of a cached pack is verified as any read is
//     (frame header, size, sha256), so a damaged cached copy is reported,
//     never returned;
//   - a pack being read is never removed: each reader holds a reference
//     from packFile until its ReadAt returns, and eviction skips packs
//     with references (it does not rely on an open file surviving its
//     unlink). The bound can therefore be passed by the packs in use at
//     that moment; the pass that runs when the last reference goes
//     restores it;
//   - the order survives a restart: a pack's file modification time is set
//     when it is used (at most once a second per pack), and Open rebuilds
//     the order from the files' modification times. A remote store judges
//     a pack's coldness by its object's time in the bucket, never by its
//     cached file.

import (
	"container/list"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultCacheSizeMax is the largest default pack cache: the default is
// this or a tenth of the blob directory's file system, whichever is
// smaller (DefaultCacheSize).
const DefaultCacheSizeMax = 2 << 30

// DefaultCacheSize returns the default pack cache bound for a blob
// directory at dir: DefaultCacheSizeMax, or a tenth of its file system's
// size if that is smaller (and known).
func DefaultCacheSize(dir string) int64 {
	if n := diskSize(dir); n > 0 && n/10 < DefaultCacheSizeMax {
		return max(n/10, DefaultRemotePackSize)
	}
	return DefaultCacheSizeMax
}

// diskSize returns the size of the file system holding dir, or 0 if it
// is not known. dir or its nearest existing parent is asked.
func diskSize(dir string) int64 {
	for d := dir; ; d = filepath.Dir(d) {
		if n, ok := statfsSize(d); ok {
			return n
		}
		if filepath.Dir(d) == d {
			return 0
		}
	}
}

// cachedPack is one pack in the cache.
type cachedPack struct {
	id      uint64
	size    int64
	f       *os.File // opened on first use
	refs    int      // readers between packFile and their release
	drop    bool     // remove once unreferenced: its object is gone
	elem    *list.Element
	touched time.Time // when its file's mtime was last set
}

// packCache is the LRU of cached packs. Its mutex is never held while
// waiting on anything but the file system.
type packCache struct {
	dir    string             // the blob directory
	remove func(string) error // Options.FS's, ungated: evicting changes nothing the index relies on
	bound  int64
	mu     sync.Mutex
	size   int64
	lru    list.List // of *cachedPack, most recently used first
	packs  map[uint64]*cachedPack
}

func newPackCache(dir string, bound int64, remove func(string) error) *packCache {
	return &packCache{dir: dir, bound: bound, remove: remove, packs: map[uint64]*cachedPack{}}
}

// load registers the pack files in packs/ (Open calls it after removing
// the unlisted ones), least recently modified last, and evicts beyond the
// bound.
func (c *packCache) load() error {
	ents, err := os.ReadDir(filepath.Join(c.dir, "packs"))
	if err != nil {
		return err
	}
	type file struct {
		id   uint64
		size int64
		mod  time.Time
	}
	var files []file
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".pack")
		if !ok || len(name) != 16 {
			continue
		}
		id, err := strconv.ParseUint(name, 16, 64)
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, file{id, fi.Size(), fi.ModTime()})
	}
	slices.SortFunc(files, func(a, b file) int { return b.mod.Compare(a.mod) }) // newest first
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range files {
		p := &cachedPack{id: f.id, size: f.size, touched: f.mod}
		p.elem = c.lru.PushBack(p)
		c.packs[f.id] = p
		c.size += f.size
	}
	c.evictLocked()
	return nil
}

func (c *packCache) path(id uint64) string { return filepath.Join(c.dir, packPath(id)) }

// acquire returns pack id's open file with a reference taken, or nil if
// the pack is not cached (or its file cannot be opened: it is forgotten).
func (c *packCache) acquire(id uint64) *cachedPack {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.packs[id]
	if p == nil || p.drop {
		return nil
	}
	if p.f == nil {
		f, err := os.Open(c.path(id))
		if err != nil {
			c.removeLocked(p)
			return nil
		}
		p.f = f
	}
	p.refs++
	c.useLocked(p)
	return p
}

// useLocked makes p the most recently used pack and, at most once a
// second, records that in its file's mtime for the next Open.
func (c *packCache) useLocked(p *cachedPack) {
	if c.lru.Front() != p.elem {
		c.lru.MoveToFront(p.elem)
	}
	if now := time.Now(); now.Sub(p.touched) >= time.Second {
		p.touched = now
		os.Chtimes(c.path(p.id), now, now) // best effort: only the order after a restart
	}
}

// add registers pack id's file (whole in packs/), size bytes, with refs
// references taken, as the most recently used, and evicts beyond the
// bound. f may be nil (opened on first use).
func (c *packCache) add(id uint64, f *os.File, size int64, refs int) *cachedPack {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.packs[id]; p != nil { // registered already (a pack is written once)
		if f != nil {
			if p.f == nil {
				p.f = f
			} else {
				f.Close()
			}
		}
		p.refs += refs
		c.useLocked(p)
		c.evictLocked()
		return p
	}
	p := &cachedPack{id: id, size: size, f: f, refs: refs, touched: time.Now()}
	p.elem = c.lru.PushFront(p)
	c.packs[id] = p
	c.size += size
	c.evictLocked()
	return p
}

// release drops a reference taken by acquire or add.
func (c *packCache) release(p *cachedPack) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.refs--
	if p.refs == 0 && p.drop {
		c.removeLocked(p)
	}
	c.evictLocked()
}

// drop removes pack id's file, at once or when its last reader is done:
// its object is gone, or no index entry names it any more.
func (c *packCache) drop(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.packs[id]; p != nil {
		p.drop = true
		if p.refs == 0 {
			c.removeLocked(p)
		}
		return
	}
	c.remove(c.path(id)) // a file not registered (a repack's leftover)
}

// evictLocked removes unreferenced packs, least recently used first,
// while the cache is beyond its bound.
func (c *packCache) evictLocked() {
	for e := c.lru.Back(); e != nil && c.size > c.bound; {
		p := e.Value.(*cachedPack)
		e = e.Prev()
		if p.refs == 0 {
			c.removeLocked(p)
		}
	}
}

// removeLocked closes and removes p's file and forgets it. p has no
// references.
func (c *packCache) removeLocked(p *cachedPack) {
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
	c.remove(c.path(p.id))
	if c.packs[p.id] == p {
		delete(c.packs, p.id)
		c.lru.Remove(p.elem)
		c.size -= p.size
	}
}

// usage returns the bytes and packs the cache holds.
func (c *packCache) usage() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size, len(c.packs)
}

// closeAll closes the open files (Store.Close).
func (c *packCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.packs {
		if p.f != nil && p.refs == 0 {
			p.f.Close()
			p.f = nil
		}
	}
}
