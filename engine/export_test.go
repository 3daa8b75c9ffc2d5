package engine

import (
	"context"
	"os"
	"path/filepath"

	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/restore"
	"github.com/sbxdb/sbxdb/internal/testkit"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/boltcheck"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

// Test-only access below the public API, for the external test package.

// InsertRaw stores cp's record and index without checks or references.
func (db *DB) InsertRaw(cp *chain.Checkpoint) error {
	return db.tx(true, func(tx kv.Tx) error { return meta.PutRecord(tx, cp) })
}

// AcquireWriterAs is AcquireWriter recording holder, not this process, as
// the lease's holder: a lease as another process would have left it.
func (db *DB) AcquireWriterAs(ctx context.Context, threadID string, holder proc.Identity) (*lease.Lease, error) {
	return db.acquireWriter(ctx, threadID, holder, lease.AcquireOptions{})
}

// SetRefCount forces the count of a blob key (folding pending references
// first, so the forced value is the whole count).
func (db *DB) SetRefCount(key string, n int64) error {
	return db.tx(true, func(tx kv.Tx) error {
		if err := meta.FoldRefs(tx); err != nil {
			return err
		}
		old, err := meta.RefCount(tx, key)
		if err != nil {
			return err
		}
		return meta.AddRef(tx, key, n-old)
	})
}

// Pending returns the pending set's weight and size.
func (db *DB) Pending() (weight uint64, n int, err error) {
	err = db.view(func(tx kv.Tx) error {
		weight = meta.PendingWeight(tx)
		n, err = kv.Count(tx.Bucket(meta.BucketPendingRefs))
		return err
	})
	return weight, n, err
}

// OnPoint registers a test hook at a named point of a write.
func (db *DB) OnPoint(name string, fn func() error) (remove func()) {
	db.pointsMu.Lock()
	if db.points == nil {
		db.points = map[string]func() error{}
	}
	db.points[name] = fn
	db.pointsMu.Unlock()
	return func() {
		db.pointsMu.Lock()
		delete(db.points, name)
		db.pointsMu.Unlock()
	}
}

// Batches returns how many transactions the committer has committed.
func (db *DB) Batches() int64 { return db.c.batches.Load() }

// QueueLen returns how many writes wait for the committer.
func QueueLen(db *DB) int { return len(db.c.queue) }

// SetHead forces a thread's head, checks bypassed.
func (db *DB) SetHead(threadID, id string) error {
	return db.tx(true, func(tx kv.Tx) error { return meta.SetHead(tx, threadID, id) })
}

// DamageChunks folds pending references, then stores a chunk no checkpoint
// uses and drops the folded count of the first counted chunk: two of the
// problems Check must find.
func (db *DB) DamageChunks() error {
	return db.tx(true, func(tx kv.Tx) error {
		if err := meta.FoldRefs(tx); err != nil {
			return err
		}
		k := []byte("\xff\xff\xff\xff\xff\xff\xff\xfe")
		if err := tx.Bucket(meta.BucketChunks).Put(k, meta.Seal(meta.BucketChunks, k, []byte("orphan"))); err != nil {
			return err
		}
		first, _ := tx.Bucket(meta.BucketChunkRefs).Cursor().First()
		return tx.Bucket(meta.BucketChunkRefs).Delete(first)
	})
}

// StagingName is the name a restore by process id gives its staging
// directory, without the random part MkdirTemp adds.
func StagingName(id proc.Identity) string { return restore.StagingName(id) }

// SetHoldCount forces the hold count of a blob key; 0 removes it.
func (db *DB) SetHoldCount(key string, n int64) error {
	return db.tx(true, func(tx kv.Tx) error {
		old, err := meta.HoldCount(tx, key)
		if err != nil {
			return err
		}
		return meta.AddHold(tx, key, n-old)
	})
}

// ProbeHoles reports whether files in dir can have holes, and if not, why.
func ProbeHoles(dir string) (bool, string) { return testkit.ProbeHoles(dir) }

// VerifiedAtOpen reports whether Open walked every page of the database
// rather than trust a record of a clean close.
func (db *DB) VerifiedAtOpen() bool { return db.verified }

// CleanCloseName is the file recording a clean close beside sbx.db.
const CleanCloseName = boltcheck.CleanCloseName

// ForgeCleanClose writes a record of a clean close matching the closed
// store's database file as it is now, damaged or not: a record Open
// trusts, standing for damage no stat or meta page shows.
func ForgeCleanClose(dir string) error {
	path := filepath.Join(dir, DBFile)
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	st, _ := boltcheck.StatOf(fi)
	m, err := boltcheck.Quick(f, fi.Size())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, boltcheck.CleanCloseName), boltcheck.EncodeCleanClose(st, m), 0o644)
}

// CloseAsCrashed closes db as a process that died right after its last
// commit leaves the store: without Close's freelist commit and record of a
// clean close, so that the newest meta page is that commit's.
func (db *DB) CloseAsCrashed() error {
	db.crashed = true
	return db.Close()
}

// MarkDamaged marks db as a handle that met a damaged page (DB.tx's
// recovery does it on a panic).
func (db *DB) MarkDamaged(err error) { db.markDamaged(err) }

// WriteTx runs fn in a write transaction through DB.tx, the guarded place.
func (db *DB) WriteTx(fn func(tx kv.Tx) error) error { return db.tx(true, fn) }
