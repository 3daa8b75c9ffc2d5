// Package boltcheck checks the page structure of a bbolt database file
// before bbolt opens it, reading the raw file with bounds checks (no mmap,
// no unsafe).
//
// bbolt trusts the page ids, flags, overflow counts and element offsets it
// reads. With NoFreelistSync it rebuilds the freelist at Open by walking
// every reachable page in a goroutine of its own; a damaged page makes that
// goroutine panic, fault past the end of a truncated file, or loop over
// billions of page ids, and a panic in a goroutine the caller does not own
// kills the process: no recover can catch it. Verify walks the same pages
// first and refuses the file if bbolt's walk could go wrong. The cost is
// one read of the tree, about what bbolt's own walk at Open costs.
//
// The invariants mirror bbolt's own checker (tx_check.go):
//   - the meta page is chosen as bbolt chooses it (the valid one with the
//     higher transaction id), and its page size and high-water mark are
//     plausible and within the file;
//   - every page id is in bounds (at least 2, below the high-water mark),
//     matches its position in the file, and its overflow pages stay below
//     the high-water mark;
//   - every page reached is a branch or a leaf, and none is reached twice;
//   - a branch has at least one element, and every element, key and value
//     lies inside its page;
//   - keys strictly increase within a page and lie within the range their
//     branch element gives them;
//   - a nested bucket's value holds a root page id or an inline leaf page,
//     checked the same way.
//
// With a synced freelist (the freelist page the meta page names), Verify
// also checks that page: in bounds, ids sorted, unique, below the
// high-water mark, and none of them a page the tree reaches. bbolt reads
// that page at a writable Open and allocates from it; a page listed free
// but in use would be overwritten by the next commit.
//
// Quick checks only what bbolt reads at Open when its freelist is synced:
// the meta pages and the freelist page. Its cost does not depend on the
// tree's size; it says nothing about the tree.
//
// boltcheck reads the file only: taking bbolt's lock, so that no writer
// changes the file during the walk, is the caller's part.
//
// The record of a clean close (cleanclose.go), a file beside the database
// naming its stat and newest meta page, lets an Open check with Quick
// alone and defer the walk: TrustCleanClose, WriteCleanClose,
// RemoveCleanClose.
package boltcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

// ErrCorrupt is matched (errors.Is) by every error Verify returns: the
// file's pages do not check out. The error's text says which page and how.
var ErrCorrupt = errors.New("boltcheck: damaged page structure")

// corruptError is a finding of the walk. Its text is the finding alone, so
// a caller can wrap it in an error of its own without repeating itself.
type corruptError struct{ err error }

func (e corruptError) Error() string        { return e.err.Error() }
func (e corruptError) Is(target error) bool { return target == ErrCorrupt }

// Verify checks the pages of the bbolt file f, size bytes long, reachable
// from the meta page bbolt would open at. An error matches ErrCorrupt.
//
// It returns a note when one of the two meta pages does not check out:
// bbolt then opens at the other one's transaction, silently. After a crash
// in the middle of a commit that is its recovery, and only that commit (not
// acknowledged) is lost; otherwise the damage cost the last commit. Either
// way the next commit overwrites the evidence, so a caller keeps the note.
func Verify(f io.ReaderAt, size int64) (note string, err error) {
	w := &pageWalker{f: f, size: size}
	m, err := w.readMeta()
	if err != nil {
		return "", corruptError{err}
	}
	if err := w.verify(m); err != nil {
		return "", corruptError{err}
	}
	return w.metaNote, nil
}

// VerifyAt is Verify of the tree and freelist m names (a meta page Quick
// or a bbolt transaction read) rather than of the file's newest meta page.
// A caller that holds a read transaction at m.TxID walks a tree no writer
// changes meanwhile: bbolt overwrites no page such a transaction reaches.
func VerifyAt(f io.ReaderAt, size int64, m Meta) error {
	return VerifyAtPaced(f, size, m, nil)
}

// VerifyAtPaced is VerifyAt calling pace, when set, after each page read
// with the bytes read. An error from pace stops the walk and is returned
// as it is: it does not match ErrCorrupt, since no damage was found.
func VerifyAtPaced(f io.ReaderAt, size int64, m Meta, pace func(bytes int64) error) error {
	w := &pageWalker{f: f, size: size, pace: pace}
	mm := meta{pageSize: m.PageSize, root: m.Root, freelist: m.Freelist, hwm: m.HWM, txid: m.TxID, valid: true}
	if err := w.checkMeta(mm); err != nil {
		return corruptError{err}
	}
	if err := w.verify(mm); err != nil {
		if s, ok := err.(stopped); ok {
			return s.err
		}
		return corruptError{err}
	}
	return nil
}

// stopped is an error of pageWalker.pace, passed through the walk.
type stopped struct{ err error }

func (s stopped) Error() string { return s.err.Error() }

// verify walks the tree from m's root, then checks m's freelist against
// the pages the tree reaches.
func (w *pageWalker) verify(m meta) error {
	if _, err := w.tree(m.root, nil, nil); err != nil {
		return err
	}
	ids, err := w.freelist(m.freelist)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if w.reached(id) {
			return fmt.Errorf("page %d is both free and in use", id)
		}
	}
	return nil
}

// NoFreelist is Meta.Freelist of a file whose freelist is not synced:
// bbolt rebuilds it at a writable Open by walking every page.
const NoFreelist = ^uint64(0)

// Meta is a bbolt meta page: the transaction a file opens at.
type Meta struct {
	PageSize uint32
	Root     uint64 // the root bucket's page
	Freelist uint64 // the freelist's page, or NoFreelist
	HWM      uint64 // high-water mark: first page id not in use
	TxID     uint64
	Checksum uint64 // the meta page's own checksum
}

// Quick returns the meta page bbolt would open f at, having checked what
// bbolt reads before any transaction: both meta pages are valid (one that
// is not is reported as an error here, not as a note: Verify tells a
// crash from damage) and plausible, and the freelist page is well formed.
// It reads two meta pages and the freelist, not the tree.
func Quick(f io.ReaderAt, size int64) (Meta, error) {
	w := &pageWalker{f: f, size: size}
	m, err := w.readMeta()
	if err == nil && w.metaNote != "" {
		err = errors.New(w.metaNote)
	}
	if err == nil {
		_, err = w.freelist(m.freelist)
	}
	if err != nil {
		return Meta{}, corruptError{err}
	}
	return Meta{PageSize: m.pageSize, Root: m.root, Freelist: m.freelist, HWM: m.hwm, TxID: m.txid, Checksum: m.checksum}, nil
}

// freelist reads and checks the freelist page id, and returns the page ids
// it lists; none for NoFreelist.
func (w *pageWalker) freelist(id uint64) ([]uint64, error) {
	if id == NoFreelist {
		return nil, nil
	}
	p, err := w.page(id)
	if _, ok := err.(stopped); ok {
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("freelist: %v", err)
	}
	le := binary.LittleEndian
	if flags := le.Uint16(p[8:]); flags != freelistFlag {
		return nil, fmt.Errorf("freelist page %d has type flags %#x", id, flags)
	}
	start, count := int64(pageHeaderSize), uint64(le.Uint16(p[10:]))
	if count == 0xFFFF { // the count overflowed into the first element
		if len(p) < pageHeaderSize+8 {
			return nil, fmt.Errorf("freelist page %d truncated", id)
		}
		start, count = pageHeaderSize+8, le.Uint64(p[pageHeaderSize:])
	}
	if count > uint64(len(p)-int(start))/8 {
		return nil, fmt.Errorf("freelist page %d: %d ids overflow the page", id, count)
	}
	ids := make([]uint64, count)
	for i := range ids {
		ids[i] = le.Uint64(p[start+int64(i)*8:])
		switch {
		case ids[i] < 2 || ids[i] >= w.hwm:
			return nil, fmt.Errorf("freelist page %d lists page %d, out of bounds (high-water mark %d)", id, ids[i], w.hwm)
		case i > 0 && ids[i] <= ids[i-1]:
			return nil, fmt.Errorf("freelist page %d: ids out of order", id)
		case ids[i] >= id && ids[i] <= id+uint64(le.Uint32(p[12:])):
			return nil, fmt.Errorf("freelist page %d lists itself", id)
		}
	}
	return ids, nil
}

// On-disk sizes of bbolt's file format (version 2).
const (
	pageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	elementSize    = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	metaSumOffset  = 56 // the meta checksum covers the bytes before it
	bboltMagic     = 0xED0CDAED
	bboltVersion   = 2
	branchFlag     = 0x01
	leafFlag       = 0x02
	freelistFlag   = 0x10
	bucketLeafFlag = 0x01
	inBucketSize   = 16 // root pgid u64, sequence u64
)

type pageWalker struct {
	f        io.ReaderAt
	size     int64
	pageSize int64
	hwm      uint64   // high-water mark: first page id not in use
	seen     []uint64 // a bit per page below hwm: reached by the walk (checkMeta sizes it)
	metaNote string   // set when one meta page is damaged
	// pace, when set, is called after each page read (VerifyAtPaced).
	pace func(bytes int64) error
}

type meta struct {
	pageSize   uint32
	root, hwm  uint64
	freelist   uint64
	txid       uint64
	checksum   uint64
	valid      bool
	fileOffset int64
}

func (w *pageWalker) metaAt(off int64) meta {
	var b [pageHeaderSize + 64]byte
	if n, _ := w.f.ReadAt(b[:], off); n < len(b) {
		return meta{}
	}
	m := b[pageHeaderSize:]
	h := fnv.New64a()
	h.Write(m[:metaSumOffset])
	le := binary.LittleEndian
	return meta{
		pageSize: le.Uint32(m[8:]),
		root:     le.Uint64(m[16:]),
		freelist: le.Uint64(m[32:]),
		hwm:      le.Uint64(m[40:]),
		txid:     le.Uint64(m[48:]),
		checksum: le.Uint64(m[metaSumOffset:]),
		valid: le.Uint32(m[0:]) == bboltMagic && le.Uint32(m[4:]) == bboltVersion &&
			le.Uint64(m[metaSumOffset:]) == h.Sum64(),
		fileOffset: off,
	}
}

// readMeta picks the meta page bbolt would use (the valid one with the
// higher transaction id) and checks it.
func (w *pageWalker) readMeta() (meta, error) {
	m0, m1 := w.metas()
	best := m0
	if !m0.valid || m1.valid && m1.txid > m0.txid {
		best = m1
	}
	if m0.valid != m1.valid && best.valid {
		bad := 0
		if m0.valid {
			bad = 1
		}
		w.metaNote = fmt.Sprintf("meta page %d did not check out; the store opened at transaction %d from the other. "+
			"At most the last commit before it may be lost: after a crash during that commit, it was not acknowledged", bad, best.txid)
	}
	if err := w.checkMeta(best); err != nil {
		return meta{}, err
	}
	return best, nil
}

// metas reads both meta pages, finding the second as bbolt does.
func (w *pageWalker) metas() (m0, m1 meta) {
	m0 = w.metaAt(0)
	if m0.valid {
		m1 = w.metaAt(int64(m0.pageSize))
	} else {
		for i := range 15 { // bbolt probes page sizes from 1 KiB to 16 MiB
			if m1 = w.metaAt(1024 << i); m1.valid {
				break
			}
		}
	}
	return m0, m1
}

// MetaOf returns f's meta page of transaction txid, checked as Quick
// checks the newest one, and false if neither meta page holds it (bbolt
// overwrote it: each commit writes the older of the two).
func MetaOf(f io.ReaderAt, size int64, txid uint64) (Meta, bool, error) {
	w := &pageWalker{f: f, size: size}
	m0, m1 := w.metas()
	m := m0
	if !m0.valid || m0.txid != txid {
		m = m1
	}
	if !m.valid || m.txid != txid {
		return Meta{}, false, nil
	}
	if err := w.checkMeta(m); err != nil {
		return Meta{}, false, corruptError{err}
	}
	return Meta{PageSize: m.pageSize, Root: m.root, Freelist: m.freelist, HWM: m.hwm, TxID: m.txid, Checksum: m.checksum}, true, nil
}

// checkMeta checks that m is plausible for the file and sets the walk's
// page size and high-water mark from it.
func (w *pageWalker) checkMeta(m meta) error {
	switch {
	case !m.valid:
		return errors.New("no valid meta page")
	case m.pageSize < 1024 || m.pageSize > 1<<24 || m.pageSize&(m.pageSize-1) != 0:
		return fmt.Errorf("meta page size %d", m.pageSize)
	case m.hwm < 3 || int64(m.hwm) > w.size/int64(m.pageSize):
		return fmt.Errorf("high-water mark page %d beyond the file's %d bytes", m.hwm, w.size)
	}
	w.pageSize, w.hwm = int64(m.pageSize), m.hwm
	w.seen = make([]uint64, (m.hwm+63)/64)
	return nil
}

// reached reports whether the walk reached page id, below the high-water
// mark.
func (w *pageWalker) reached(id uint64) bool { return w.seen[id/64]&(1<<(id%64)) != 0 }

// page reads page id with its overflow pages, checking its header.
func (w *pageWalker) page(id uint64) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page %d out of bounds (high-water mark %d)", id, w.hwm)
	}
	// One read of the page; its overflow pages, if any, in a second.
	p := make([]byte, w.pageSize)
	if _, err := w.f.ReadAt(p, int64(id)*w.pageSize); err != nil && err != io.EOF {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	le := binary.LittleEndian
	overflow := uint64(le.Uint32(p[12:]))
	switch {
	case le.Uint64(p[0:]) != id:
		return nil, fmt.Errorf("page %d claims to be page %d", id, le.Uint64(p[0:]))
	case overflow >= w.hwm-id:
		return nil, fmt.Errorf("page %d overflows past the high-water mark", id)
	}
	for i := uint64(0); i <= overflow; i++ {
		if w.reached(id + i) {
			return nil, fmt.Errorf("page %d is referenced twice", id+i)
		}
		w.seen[(id+i)/64] |= 1 << ((id + i) % 64)
	}
	if overflow > 0 {
		p = append(p, make([]byte, int64(overflow)*w.pageSize)...)
		if _, err := w.f.ReadAt(p[w.pageSize:], int64(id+1)*w.pageSize); err != nil && err != io.EOF {
			return nil, fmt.Errorf("page %d: %v", id, err)
		}
	}
	if w.pace != nil {
		if err := w.pace(int64(len(p))); err != nil {
			return nil, stopped{err}
		}
	}
	return p, nil
}

// tree checks the branch or leaf page id and everything below it; its keys
// must lie in [minClosed, maxOpen). It returns the largest key seen.
func (w *pageWalker) tree(id uint64, minClosed, maxOpen []byte) ([]byte, error) {
	p, err := w.page(id)
	if err != nil {
		return nil, err
	}
	return w.node(p, id, minClosed, maxOpen)
}

// node checks one page image (read from the file, or inline in a bucket
// value).
func (w *pageWalker) node(p []byte, id uint64, minClosed, maxOpen []byte) ([]byte, error) {
	if len(p) < pageHeaderSize {
		return nil, fmt.Errorf("page %d shorter than its header", id)
	}
	le := binary.LittleEndian
	flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
	if flags != branchFlag && flags != leafFlag {
		return nil, fmt.Errorf("page %d has type flags %#x, not branch or leaf", id, flags)
	}
	if pageHeaderSize+count*elementSize > len(p) {
		return nil, fmt.Errorf("page %d: %d elements overflow the page", id, count)
	}
	if flags == branchFlag && count == 0 {
		// bbolt indexes a branch's first element without looking: its
		// freelist walk would panic.
		return nil, fmt.Errorf("page %d is a branch without elements", id)
	}
	// element returns element i's key and value (a leaf's; none for a
	// branch), both checked to lie inside the page. Offsets are relative to
	// the element itself.
	element := func(i int) (key, val []byte, err error) {
		e := pageHeaderSize + i*elementSize
		var pos, ksize, vsize int64
		if flags == leafFlag {
			pos, ksize, vsize = int64(le.Uint32(p[e+4:])), int64(le.Uint32(p[e+8:])), int64(le.Uint32(p[e+12:]))
		} else {
			pos, ksize = int64(le.Uint32(p[e:])), int64(le.Uint32(p[e+4:]))
		}
		start := int64(e) + pos
		if start+ksize+vsize > int64(len(p)) {
			return nil, nil, fmt.Errorf("page %d element %d lies outside the page", id, i)
		}
		return p[start : start+ksize], p[start+ksize : start+ksize+vsize], nil
	}
	running, maxKey := minClosed, []byte(nil)
	for i := range count {
		k, v, err := element(i)
		if err != nil {
			return nil, err
		}
		if err := keyOrder(id, i, k, running, maxOpen); err != nil {
			return nil, err
		}
		e := pageHeaderSize + i*elementSize
		if flags == leafFlag {
			if le.Uint32(p[e:])&bucketLeafFlag != 0 {
				if err := w.bucketValue(id, v); err != nil {
					return nil, err
				}
			}
			running, maxKey = k, k
			continue
		}
		next := maxOpen // the child's keys lie below the next branch key
		if i+1 < count {
			if next, _, err = element(i + 1); err != nil {
				return nil, err
			}
		}
		sub, err := w.tree(le.Uint64(p[e+8:]), k, next)
		if err != nil {
			return nil, err
		}
		running, maxKey = sub, sub
	}
	return maxKey, nil
}

// bucketValue checks a nested bucket: a root page, or an inline leaf page.
func (w *pageWalker) bucketValue(id uint64, v []byte) error {
	if len(v) < inBucketSize {
		return fmt.Errorf("page %d: bucket header truncated", id)
	}
	if root := binary.LittleEndian.Uint64(v); root != 0 {
		_, err := w.tree(root, nil, nil)
		return err
	}
	inline := v[inBucketSize:]
	if len(inline) < pageHeaderSize || binary.LittleEndian.Uint16(inline[8:]) != leafFlag {
		return fmt.Errorf("page %d: inline bucket is not a leaf", id)
	}
	_, err := w.node(inline, id, nil, nil)
	return err
}

// keyOrder applies bbolt's rule: the first key is at least the range's
// minimum, later keys strictly increase, and all are below maxOpen.
func keyOrder(id uint64, i int, k, running, maxOpen []byte) error {
	if running != nil {
		c := bytes.Compare(running, k)
		if c > 0 || i > 0 && c == 0 {
			return fmt.Errorf("page %d element %d: keys out of order", id, i)
		}
	}
	if maxOpen != nil && bytes.Compare(k, maxOpen) >= 0 {
		return fmt.Errorf("page %d element %d: key beyond its branch range", id, i)
	}
	return nil
}
