package cas

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Orphan blob files: large files no index entry names. They are left when a
// crash or a failed remove comes between a delete's commit and the removal
// of its file, or when a batch that had renamed its large files into place
// fails to commit (removeFiles leaves them: another batch may have committed
// the same key there). They are never read; RemoveOrphans removes them,
// or, when the index may be older than the files, moves them into
// quarantine (quarantine.go).

type orphan struct {
	key, path string
	mod       time.Time
}

// orphans walks large/ and returns the files whose key is not indexed.
func (s *Store) orphans(ctx context.Context) ([]orphan, error) {
	var found []orphan
	var keys []string
	for _, ns := range []Namespace{Files, Artifacts} {
		root := filepath.Join(s.dir, "large", ns.dir())
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			var sum [32]byte
			if d.IsDir() || len(d.Name()) != 64 {
				return nil
			}
			if _, err := hex.Decode(sum[:], []byte(d.Name())); err != nil {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			key := ns.Key(sum)
			found = append(found, orphan{key: key, path: path, mod: info.ModTime()})
			keys = append(keys, key)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	missing, err := s.Missing(ctx, keys)
	if err != nil {
		return nil, err
	}
	gone := make(map[string]bool, len(missing))
	for _, k := range missing {
		gone[k] = true
	}
	out := found[:0]
	for _, o := range found {
		if gone[o.key] {
			out = append(out, o)
		}
	}
	return out, nil
}

// Orphans returns how many large blob files no index entry names; with
// Options.Remote, how many objects (packs and large blobs) none names,
// whatever their age.
func (s *Store) Orphans(ctx context.Context) (int, error) {
	if s.opts.Remote != nil {
		o, err := s.remoteOrphans(ctx)
		return len(o), err
	}
	o, err := s.orphans(ctx)
	return len(o), err
}

// RemoveOrphans removes the large blob files no index entry names whose
// modification time is more than olderThan ago, and returns how many it
// removed. A file whose key a batch has pinned is left alone (the batch may
// be about to index it), and each key is marked dying while its file goes,
// as a sweep does (pins.go), then looked up again. When the index may be
// older than the blob directory (see removeOrphanPacks), the files are
// moved into quarantine instead, and counted all the same.
//
// With Options.Remote it removes the objects no index entry names (packs
// as well as large blobs) whose modification time, by Options.Now, is
// more than olderThan ago, and at least RemoteOrphanMinAge: another
// server's batch may have uploaded a younger one and not committed yet.
// First it deletes the packs a remote repack retired more than olderThan
// (and RemoteOrphanMinAge) ago by Options.Now, counting them too
// (remote_repack.go).
func (s *Store) RemoveOrphans(ctx context.Context, olderThan time.Duration) (int, error) {
	if s.opts.ReadOnly {
		return 0, ErrReadOnly
	}
	if s.opts.Remote != nil {
		return s.removeRemoteOrphans(ctx, olderThan)
	}
	found, err := s.orphans(ctx)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, o := range found {
		if time.Since(o.mod) <= olderThan || !s.pins.markDying(o.key) {
			continue
		}
		var indexed bool
		err := s.db.View(func(tx kv.Tx) (err error) {
			_, indexed, err = lookup(tx, o.key)
			return err
		})
		if err == nil && !indexed {
			if s.indexMayBeOlder {
				ns, sum, _ := ParseKey(o.key)
				_, err = s.quarantineLarge(ns, sum)
			} else {
				err = s.fs.Remove(o.path)
			}
			if err == nil {
				removed++
			}
		}
		s.pins.unmarkDying([]string{o.key})
		if err != nil && !os.IsNotExist(err) {
			return removed, &sbxdb.BlobError{Key: o.key, Err: err, Detail: "removing an orphan file"}
		}
	}
	return removed, nil
}
