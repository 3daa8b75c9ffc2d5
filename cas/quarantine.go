package cas

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Quarantine and healing.
//
// Bytes on disk that no index entry names are normally dead: a batch or a
// repack wrote them and crashed (or failed) before its index commit, and
// Open (packs) or RemoveOrphans (large files) removes them. That rule
// assumes the index is at least as new as the files. It is not when the
// database has lost transactions that the blob directory has seen: bbolt
// opened it on its older meta page (a torn or damaged newest meta page), or
// a copy of the database was put back beside newer blobs. A repack whose
// commit was lost leaves its new pack unlisted while the index still names
// the old packs it removed; deleting the new pack would destroy the only
// copy of every blob it moved.
//
// So an unindexed pack or large file is moved into quarantine/ rather than
// removed whenever the index may be older than the files:
//
//   - Options.IndexMayBeOlder says so (the engine sets it after a meta-page
//     fallback, until check --repair has run);
//   - or cas_packs registers a pack whose file is gone, or an index entry
//     names a pack with no file: the blob directory has lost files that
//     the index still relies on, which only a newer index (a repack it no
//     longer knows of) or damage explains.
//
// Neither happens after an ordinary crash (a kill leaves the database's
// meta pages whole, and every committed pack keeps its file), so crash
// leftovers are still removed at once and the quarantine does not grow
// through them. Every frame names its own keys, so what is in quarantine
// can be verified and indexed again: Quarantined lists it, Reindex stores
// every intact blob the index lacks through a normal batch and then
// removes the file. DropDamaged removes the index entries of blobs that
// no longer read back intact, so that the next write of the same bytes
// stores them again instead of deduplicating against the damage.
//
// Quarantined files are named by what they were: <16 hex>.pack for a pack,
// <64 hex>.files or <64 hex>.artifacts for a large blob's file, with .1,
// .2, … added when the name is taken. Both hold frames back to back (a
// large file is one frame); the frames, not the names, say which blobs a
// file holds.

// quarantineDir is the quarantine directory, relative to the blob directory.
const quarantineDir = "quarantine"

// QuarantinedFile is a file in the quarantine and what it holds.
type QuarantinedFile struct {
	// Name is the file's path relative to the blob directory
	// (quarantine/<name>).
	Name string `json:"name"`
	// Blobs counts the blobs that read back intact.
	Blobs int `json:"blobs"`
	// Unindexed counts those of them the index has no entry for: what
	// Reindex would store.
	Unindexed int `json:"unindexed"`
	// Damaged counts blobs that did not read back intact; a damaged frame
	// header hides the rest of the file, counted as one.
	Damaged int `json:"damaged,omitempty"`
}

// QuarantinedAtOpen returns the files (relative to the blob directory) that
// Open moved into quarantine rather than remove, because the index may be
// older than the blob directory.
func (s *Store) QuarantinedAtOpen() []string { return slices.Clone(s.quarantinedAtOpen) }

// quarantine moves the file at rel (relative to the blob directory) into
// quarantine under name, or name.1, name.2, … when that is taken, and
// returns its new relative path. A file in quarantine is never replaced:
// it may be the only intact copy of its blobs (a damaged copy of the same
// large blob can be quarantined after it).
func (s *Store) quarantine(rel, name string) (string, error) {
	dir := filepath.Join(s.dir, quarantineDir)
	if err := s.fs.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	s.quarantineMu.Lock()
	defer s.quarantineMu.Unlock()
	free := name
	for n := 1; ; n++ {
		if _, err := os.Lstat(filepath.Join(dir, free)); errors.Is(err, fs.ErrNotExist) {
			break
		} else if err != nil {
			return "", err
		}
		free = name + "." + strconv.Itoa(n)
	}
	name = free
	if err := s.fs.Rename(filepath.Join(s.dir, rel), filepath.Join(dir, name)); err != nil {
		return "", err
	}
	if !s.opts.NoSync {
		if err := s.fs.SyncDir(dir); err != nil {
			return "", err
		}
		if err := s.fs.SyncDir(filepath.Dir(filepath.Join(s.dir, rel))); err != nil {
			return "", err
		}
	}
	return filepath.Join(quarantineDir, name), nil
}

// quarantineLarge moves the large blob file of key into quarantine.
func (s *Store) quarantineLarge(ns Namespace, sum [32]byte) (string, error) {
	rel := largePath(ns, sum)
	return s.quarantine(rel, filepath.Base(rel)+"."+ns.dir())
}

// quarantinedNames lists the quarantine directory, sorted.
func (s *Store) quarantinedNames() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, quarantineDir))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Quarantined reads every file in quarantine back, verifying each blob, and
// says what each holds.
func (s *Store) Quarantined(ctx context.Context) ([]QuarantinedFile, error) {
	names, err := s.quarantinedNames()
	if err != nil {
		return nil, err
	}
	var out []QuarantinedFile
	for _, name := range names {
		q := QuarantinedFile{Name: filepath.Join(quarantineDir, name)}
		var keys []string
		q.Damaged, err = s.eachFrameBlob(ctx, filepath.Join(s.dir, q.Name), func(key string, _ Namespace, r *Reader) error {
			if _, err := io.Copy(io.Discard, r); err != nil {
				return err
			}
			keys = append(keys, key)
			return nil
		})
		if err != nil {
			return nil, err
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		missing, err := s.Missing(ctx, keys)
		if err != nil {
			return nil, err
		}
		q.Blobs, q.Unindexed = len(keys), len(missing)
		out = append(out, q)
	}
	return out, nil
}

// ReindexStats says what Reindex did.
type ReindexStats struct {
	Files   int `json:"files"`   // quarantined files emptied and removed
	Blobs   int `json:"blobs"`   // blobs stored again from them
	Damaged int `json:"damaged"` // blobs in them that did not read back intact (dropped with their file)
	// Kept lists files left in quarantine: they hold an intact copy of a
	// blob whose indexed copy is damaged and pinned by a write in
	// progress, so it could not be replaced yet.
	Kept []string `json:"kept,omitempty"`
}

// Reindex stores again every intact blob in quarantine that the index
// lacks, or whose indexed copy no longer reads back intact (that entry is
// dropped first, as DropDamaged drops it), through a normal batch, one per
// file; once its batch has committed, the file is removed. Every blob is
// verified against its key before it is stored; damaged ones are counted
// and go with their file.
func (s *Store) Reindex(ctx context.Context) (ReindexStats, error) {
	var st ReindexStats
	if s.opts.ReadOnly {
		return st, ErrReadOnly
	}
	// Replacing a damaged large blob moves its file into quarantine too:
	// the directory is listed again until it offers nothing new.
	seen := map[string]bool{}
	for {
		names, err := s.quarantinedNames()
		if err != nil {
			return st, err
		}
		names = slices.DeleteFunc(names, func(n string) bool { return seen[n] })
		if len(names) == 0 {
			break
		}
		for _, name := range names {
			seen[name] = true
			rel := filepath.Join(quarantineDir, name)
			stored, damaged, keep, err := s.reindexFile(ctx, rel)
			if err != nil {
				return st, fmt.Errorf("cas: re-indexing %s: %w", rel, err)
			}
			st.Blobs += stored
			st.Damaged += damaged
			if keep {
				st.Kept = append(st.Kept, rel)
				continue
			}
			if err := s.fs.Remove(filepath.Join(s.dir, rel)); err != nil && !os.IsNotExist(err) {
				return st, err
			}
			st.Files++
		}
	}
	if st.Files > 0 && !s.opts.NoSync {
		if err := s.fs.SyncDir(filepath.Join(s.dir, quarantineDir)); err != nil {
			return st, err
		}
	}
	return st, nil
}

// reindexFile stores the blobs of one quarantined file that the index
// lacks, in one batch. keep reports a blob that could not be stored yet.
func (s *Store) reindexFile(ctx context.Context, rel string) (stored, damaged int, keep bool, err error) {
	b := s.NewBatch()
	defer b.Close()
	damaged, err = s.eachFrameBlob(ctx, filepath.Join(s.dir, rel), func(key string, ns Namespace, r *Reader) error {
		intact, busy, err := s.indexedIntact(ctx, key)
		if err != nil || intact {
			return err
		}
		if busy {
			keep = true
			return nil
		}
		var res AddResult
		if r.Size() <= MaxPacked {
			data, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			res, err = b.Add(ctx, ns, data)
			if err != nil {
				return err
			}
		} else if res, err = b.AddReader(ctx, ns, r); err != nil {
			return err
		}
		if res.New {
			stored++
		}
		return nil
	})
	if err != nil {
		return 0, 0, false, err
	}
	if err := b.Commit(ctx); err != nil {
		return 0, 0, false, err
	}
	return stored, damaged, keep, nil
}

// indexedIntact reports whether the index holds key and its blob reads back
// intact. A stored copy that does not is dropped (as DropDamaged drops it)
// so that it can be stored again; busy reports one that a write in
// progress has pinned, which is left as it is.
func (s *Store) indexedIntact(ctx context.Context, key string) (intact, busy bool, err error) {
	raw, ok, err := s.rawEntry(key)
	if err != nil || !ok {
		return false, false, err
	}
	switch err := s.verifyIndexed(ctx, key); {
	case err == nil:
		return true, false, nil
	case errors.Is(err, sbxdb.ErrBlobNotFound):
		return false, false, nil
	case !errors.Is(err, sbxdb.ErrBlobCorrupt):
		return false, false, err
	}
	if !s.pins.markDying(key) {
		return false, true, nil
	}
	defer s.pins.unmarkDying([]string{key})
	_, err = s.dropEntries([]damagedEntry{{key: key, raw: raw}})
	return false, false, err
}

// DropStats says what DropDamaged did.
type DropStats struct {
	// Dropped lists the keys whose index entries were removed, sorted.
	Dropped []string `json:"dropped,omitempty"`
	// Busy lists damaged keys that a write in progress has pinned: left
	// as they are, for a later run.
	Busy []string `json:"busy,omitempty"`
	// Packs lists the packs whose cas_packs records were settled: those
	// whose file is gone, forgotten once no entry names them, and those
	// whose file is shorter than recorded, recorded at its size.
	Packs []string `json:"packs,omitempty"`
	// Quarantined lists the files of dropped large blobs, moved into
	// quarantine (relative to the blob directory): Reindex stores any of
	// them that still read back intact.
	Quarantined []string `json:"quarantined,omitempty"`
}

// DropDamaged removes the index entries of those of keys whose blobs do not
// read back intact (each is read again here, so an entry that was replaced
// or that reads back intact meanwhile is kept), so that the next write of
// the same bytes stores them again rather than deduplicating against the
// damage. A packed blob's share of its pack is counted dead; a large
// blob's file is moved into quarantine. It then settles the records of
// packs whose files are gone or shorter than recorded (settlePacks). A key
// a write in progress has pinned is left and listed in Busy.
func (s *Store) DropDamaged(ctx context.Context, keys []string) (DropStats, error) {
	var st DropStats
	if s.opts.ReadOnly {
		return st, ErrReadOnly
	}
	if s.opts.Remote != nil {
		// Its settling of pack records reads the blob directory, which
		// only caches packs here.
		return st, remoteUnsupported("dropping damaged blobs")
	}
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var drop []damagedEntry
	var marked []string
	defer func() { s.pins.unmarkDying(marked) }()
	for _, key := range keys {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if !s.pins.markDying(key) {
			st.Busy = append(st.Busy, key)
			continue
		}
		marked = append(marked, key)
		raw, ok, err := s.rawEntry(key)
		if err != nil {
			return st, err
		}
		if !ok {
			continue
		}
		switch err := s.verifyIndexed(ctx, key); {
		case err == nil, errors.Is(err, sbxdb.ErrBlobNotFound):
			continue
		case !errors.Is(err, sbxdb.ErrBlobCorrupt):
			return st, err
		}
		drop = append(drop, damagedEntry{key: key, raw: raw})
	}
	var err error
	if st.Quarantined, err = s.dropEntries(drop); err != nil {
		return st, err
	}
	for _, d := range drop {
		if d.dropped {
			st.Dropped = append(st.Dropped, d.key)
		}
	}
	st.Packs, err = s.settlePacks()
	return st, err
}

// damagedEntry is an index entry to drop, as it was when found damaged.
type damagedEntry struct {
	key     string
	raw     []byte
	dropped bool
}

// rawEntry returns a copy of key's index entry as stored.
func (s *Store) rawEntry(key string) (raw []byte, ok bool, err error) {
	err = s.db.View(func(tx kv.Tx) error {
		if b := tx.Bucket(bucketIndex); b != nil {
			if v := b.Get([]byte(key)); v != nil {
				raw, ok = bytes.Clone(v), true
			}
		}
		return nil
	})
	return raw, ok, err
}

// verifyIndexed reads key's blob back and returns nil if it is intact, or
// the error that says why not. An index entry under an invalid key is
// damage too.
func (s *Store) verifyIndexed(ctx context.Context, key string) error {
	if _, _, err := ParseKey(key); err != nil {
		return corrupt(key, "the index holds an invalid key")
	}
	r, err := s.openCached(ctx, key, nil)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, r)
	return err
}

// dropEntries removes the index entries of ds in one transaction, each
// only if it is still exactly as it was found; the caller has marked
// every key dying. A packed blob's footprint becomes dead space in its
// pack (if the pack is registered); a large blob's file is moved into
// quarantine after the commit. It returns the quarantined files and sets
// dropped on each entry removed.
func (s *Store) dropEntries(ds []damagedEntry) ([]string, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	type large struct {
		ns  Namespace
		sum [32]byte
	}
	var files []large
	err := s.db.Update(func(tx kv.Tx) error {
		files = files[:0] // the body may run twice (a shared transaction retried alone)
		idx, packs := tx.Bucket(bucketIndex), tx.Bucket(bucketPacks)
		dead := map[uint64]uint64{}
		for i := range ds {
			d := &ds[i]
			d.dropped = false
			if v := idx.Get([]byte(d.key)); v == nil || !bytes.Equal(v, d.raw) {
				continue
			}
			if err := idx.Delete([]byte(d.key)); err != nil {
				return err
			}
			d.dropped = true
			ns, sum, kerr := ParseKey(d.key)
			e, eerr := decodeEntry(d.key, d.raw)
			switch {
			case eerr != nil:
				// Where its bytes were is unknown: nothing to account.
			case e.packed():
				dead[e.pack] += e.footprint()
			case kerr == nil:
				files = append(files, large{ns, sum})
			}
		}
		for id, n := range dead {
			v := packs.Get(packKey(id))
			if v == nil {
				continue // unregistered: nothing counts its bytes
			}
			ps, err := decodePackStats(v)
			if err != nil {
				continue // damaged stats misstate space, nothing else
			}
			ps.dead = min(ps.dead+n, ps.total)
			if err := packs.Put(packKey(id), ps.encode()); err != nil {
				return err
			}
		}
		for i := range ds {
			if ds[i].dropped {
				return noteDeletions(tx)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var moved []string
	for _, f := range files {
		rel, err := s.quarantineLarge(f.ns, f.sum)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return moved, &sbxdb.BlobError{Key: f.ns.Key(f.sum), Err: err, Detail: "index entry dropped, moving its file into quarantine"}
		}
		moved = append(moved, rel)
	}
	return moved, nil
}

// settlePacks brings the cas_packs records in line with the pack files and
// the index entries, once the entries that could not be read are dropped:
// the record of a pack whose file is gone is removed when no entry names
// it; a pack whose file is shorter than recorded is recorded at its size
// (its dead bytes at most that); and a pack that entries name but no
// record lists (cas_packs keys carry no checksum, so a damaged key loses
// the record) is recorded again, its dead bytes being what its entries do
// not account for. A committed pack keeps its whole file until a
// transaction has forgotten it and its entries, so each of these is damage
// or a lost transaction's. It returns the packs it changed.
func (s *Store) settlePacks() ([]string, error) {
	size := func(id uint64) (n int64, gone bool) {
		fi, err := os.Stat(filepath.Join(s.dir, packPath(id)))
		if err != nil {
			return 0, os.IsNotExist(err)
		}
		return fi.Size(), false
	}
	var changed []string
	// settle finds what is off and, with write, fixes it. A read
	// transaction looks first: usually nothing is.
	settle := func(tx kv.Tx, write bool) error {
		changed = changed[:0]       // the body may run twice (a shared transaction retried alone)
		live := map[uint64]uint64{} // pack → the footprints of its entries
		err := forEachEntry(context.Background(), tx, func(_ string, e *entry, err error) error {
			if err == nil && e.packed() {
				live[e.pack] += e.footprint()
			}
			return nil
		})
		if err != nil {
			return err
		}
		packs := tx.Bucket(bucketPacks)
		recorded := map[uint64]bool{}
		var fix []func() error
		err = forEachPack(tx, func(id uint64, ps packStats, err error) error {
			if err != nil {
				return nil // misstates space, nothing else
			}
			recorded[id] = true
			n, gone := size(id)
			switch _, named := live[id]; {
			case gone && !named:
				fix = append(fix, func() error { return packs.Delete(packKey(id)) })
			case !gone && n < int64(ps.total):
				ps.total = uint64(n)
				ps.dead = min(ps.dead, ps.total)
				fix = append(fix, func() error { return packs.Put(packKey(id), ps.encode()) })
			default:
				return nil
			}
			changed = append(changed, filepath.Base(packPath(id)))
			return nil
		})
		if err != nil {
			return err
		}
		for id, used := range live {
			if n, gone := size(id); !recorded[id] && !gone {
				ps := packStats{total: uint64(n)}
				ps.dead = ps.total - min(used, ps.total)
				fix = append(fix, func() error { return packs.Put(packKey(id), ps.encode()) })
				changed = append(changed, filepath.Base(packPath(id)))
			}
		}
		slices.Sort(changed)
		for _, f := range fix {
			if !write {
				break
			}
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	}
	err := s.db.View(func(tx kv.Tx) error { return settle(tx, false) })
	if err != nil || len(changed) == 0 {
		return nil, err
	}
	err = s.db.Update(func(tx kv.Tx) error { return settle(tx, true) })
	return changed, err
}

// eachFrameBlob reads the frames of the file at path front to back and
// calls fn with a verifying reader of every blob they hold: a reader of
// bytes already checked for a packed-size blob, a streaming one (whose last
// Read reports damage, as Store.Open's does) for a larger one. Damage is
// counted, not returned: a block that does not decode counts its members,
// a blob that does not match its key counts one, and so does a frame
// header that does not check out, which ends the file (its sizes cannot be
// trusted). An error from fn matching ErrCorrupt counts one; any other
// stops the walk and is returned.
func (s *Store) eachFrameBlob(ctx context.Context, path string, fn func(key string, ns Namespace, r *Reader) error) (damaged int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	call := func(key string, ns Namespace, r *Reader) error {
		err := fn(key, ns, r)
		r.Close()
		if errors.Is(err, sbxdb.ErrBlobCorrupt) {
			damaged++
			return nil
		}
		return err
	}
	var hb [headerSize]byte
	for off := int64(0); off < fi.Size(); {
		if err := ctx.Err(); err != nil {
			return damaged, err
		}
		var h header
		_, herr := f.ReadAt(hb[:], off)
		if herr == nil {
			h, herr = decodeHeader(hb[:])
		}
		end := off + headerSize + int64(h.stored)
		if herr != nil || h.stored > uint64(fi.Size()) || end > fi.Size() {
			return damaged + 1, nil
		}
		body := io.NewSectionReader(f, off+headerSize, int64(h.stored))
		off = end
		if h.version == blockFrame {
			members, err := s.readBlockFrame(&h, body)
			if err != nil {
				damaged += int(h.members)
				continue
			}
			for _, m := range members {
				if err := call(m.key, h.ns, bytesReader(m.key, m.data)); err != nil {
					return damaged, err
				}
			}
			continue
		}
		key := h.ns.Key(h.sum)
		if h.raw <= MaxPacked && h.stored <= MaxPacked+MaxPacked/8 {
			data, err := s.readBlobFrame(key, &h, body)
			if err != nil {
				damaged++
				continue
			}
			if err := call(key, h.ns, bytesReader(key, data)); err != nil {
				return damaged, err
			}
			continue
		}
		r, err := s.streamingReader(key, h.sum, h.raw, h.codec, body)
		if err != nil {
			damaged++
			continue
		}
		if err := call(key, h.ns, r); err != nil {
			return damaged, err
		}
	}
	return damaged, nil
}

// frameMember is a verified member of a block read from a file.
type frameMember struct {
	key  string
	data []byte
}

// readBlockFrame decodes a block frame's stored bytes and returns its
// members, each checked against its sha256.
func (s *Store) readBlockFrame(h *header, body io.Reader) ([]frameMember, error) {
	if h.raw > MaxPacked || h.stored > MaxPacked+MaxPacked/8 {
		return nil, errHeader
	}
	stored, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	payload, ms, err := s.decodeBlockPayload("a quarantined block", h, h.raw, stored, make([]byte, 0, h.raw+decodeSlack))
	if err != nil {
		return nil, err
	}
	out := make([]frameMember, 0, len(ms))
	for _, m := range ms {
		data := payload[m.at : m.at+m.size]
		if sha256.Sum256(data) != m.sum {
			return nil, errors.New("member sha256")
		}
		out = append(out, frameMember{key: h.ns.Key(m.sum), data: data})
	}
	return out, nil
}

// readBlobFrame decodes a packed-size blob frame and verifies it.
func (s *Store) readBlobFrame(key string, h *header, body io.Reader) ([]byte, error) {
	stored, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	e := entry{codec: h.codec, raw: h.raw, stored: h.stored}
	frame := append(make([]byte, headerSize, headerSize+len(stored)), stored...)
	return s.decodeFrame(key, h.sum, &e, frame, nil)
}
