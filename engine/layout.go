package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
	bolt "go.etcd.io/bbolt"
)

// FormatVersion is the bbolt layout this build reads and writes (drawn in
// internal/meta/schema.go).
//
//	1  whole checkpoint records (meta.EncodeCheckpoint)
//	2  records and shared chunks (internal/meta/record.go); refs_pending's
//	   sequence counts its keys
//	3  a manifest of at most 2 KiB inline in its record; refs_pending
//	   keyed by createdAt and id, naming threads, its sequence a weight.
//	   Every format-2 record reads the same; the pending set is rekeyed
//	4  plain objects and artifact records, and blob_holds counting the
//	   blobs they name. New buckets only, but a format-3 build would
//	   misread a store using them: its sweep would delete every blob only
//	   an object or artifact record holds, and its check would not see
//	   them. A format-3 store upgrades by gaining the empty buckets
//
// A writable Open migrates an older store in one transaction (migrate);
// a read-only Open refuses one, naming sbxdb migrate.
const FormatVersion = 4

// errNoLayout is initLayout's error in a read transaction of a database
// that holds no store.
var errNoLayout = fmt.Errorf("%w: the database holds no sbxdb store", sbxdb.ErrFormat)

// initLayout creates the buckets of a new store and stamps its format, or
// checks the format of an existing one, migrating an older store when tx
// is writable (beforeCommit is then asked, as every commit asks the FS).
func initLayout(tx kv.Tx, beforeCommit func() error) error {
	mb := tx.Bucket(meta.BucketMeta)
	if mb == nil {
		if !tx.Writable() {
			return errNoLayout
		}
		for _, name := range meta.Buckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		v := binary.AppendUvarint(nil, FormatVersion)
		return tx.Bucket(meta.BucketMeta).Put(meta.KeyFormat, meta.Seal(meta.BucketMeta, meta.KeyFormat, v))
	}
	v, err := formatOf(mb)
	if err != nil {
		return err
	}
	older := v >= 1 && v < FormatVersion
	if older && tx.Writable() {
		err := migrate(tx, v)
		if err == nil {
			err = beforeCommit()
		}
		if err != nil {
			return fmt.Errorf("migrating the store from format %d to %d: %w", v, FormatVersion, err)
		}
		v, older = FormatVersion, false
	}
	switch {
	case older:
		return fmt.Errorf("%w: store has format %d, this build reads format %d: run `sbxdb migrate` (or open it writable once) to upgrade it", sbxdb.ErrFormat, v, FormatVersion)
	case v != FormatVersion:
		return fmt.Errorf("%w: store has format %d, this build reads format %d", sbxdb.ErrFormat, v, FormatVersion)
	}
	for _, name := range meta.Buckets {
		if tx.Bucket(name) == nil {
			return fmt.Errorf("%w: bucket %s is missing", chain.ErrCorrupt, name)
		}
	}
	return nil
}

func formatOf(mb kv.Bucket) (uint64, error) {
	raw := mb.Get(meta.KeyFormat)
	if raw == nil {
		return 0, fmt.Errorf("%w: meta/format is missing", chain.ErrCorrupt)
	}
	p, err := meta.Unseal(meta.BucketMeta, meta.KeyFormat, raw)
	if err != nil {
		return 0, err
	}
	v, n := binary.Uvarint(p)
	if n != len(p) {
		return 0, fmt.Errorf("%w: meta/format is malformed", chain.ErrCorrupt)
	}
	return v, nil
}

// migrate upgrades a store of format from (1 to 3) to FormatVersion inside
// tx: the buckets the later formats added; from format 1, every record
// rewritten as chunks; from formats 1 and 2, the pending set rekeyed and
// weighed; then the new format stamp. One transaction, so a crash leaves
// the store as it was, whole.
func migrate(tx kv.Tx, from uint64) error {
	for _, name := range meta.Buckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	if from == 1 {
		if err := meta.MigrateRecords(tx); err != nil {
			return err
		}
	}
	if from <= 2 {
		if err := meta.UpgradePending(tx); err != nil {
			return err
		}
	}
	v := binary.AppendUvarint(nil, FormatVersion)
	return tx.Bucket(meta.BucketMeta).Put(meta.KeyFormat, meta.Seal(meta.BucketMeta, meta.KeyFormat, v))
}

// Migrate upgrades the store in dir to FormatVersion, as a writable Open
// does, and reports the format it found. A store already current is left
// alone (from == to).
func Migrate(ctx context.Context, dir string, opts *Options) (from, to int, err error) {
	o, err := CheckOptions(opts)
	if err != nil {
		return 0, 0, err
	}
	if o.Metadata != "" {
		return 0, 0, ErrNotFileMetadata
	}
	// Read the format first: a read-only Open refuses an old store, so
	// look at the meta bucket alone.
	path := filepath.Join(dir, DBFile)
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		return 0, 0, fmt.Errorf("%w at %s", sbxdb.ErrNoStore, dir)
	}
	defer recoverCorrupt(&err, path) // as in Open: bbolt reads pages unchecked
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	bdb, err := bolt.Open(path, 0o644, &bolt.Options{ReadOnly: true, Timeout: o.LockTimeout})
	if err != nil {
		return 0, 0, classifyOpenError(dir, path, err)
	}
	var v uint64
	err = (kv.BoltDB{DB: bdb}).View(func(tx kv.Tx) error {
		mb := tx.Bucket(meta.BucketMeta)
		if mb == nil {
			return fmt.Errorf("%w: the database holds no sbxdb store", sbxdb.ErrFormat)
		}
		v, err = formatOf(mb)
		return err
	})
	bdb.Close()
	if err != nil {
		return 0, 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	o.ReadOnly = false
	db, err := Open(dir, &o)
	if err != nil {
		return int(v), 0, err
	}
	return int(v), FormatVersion, db.Close()
}
