package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/internal/flock"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/kv/pgkv"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/internal/objstore/s3"
	"github.com/sbxdb/sbxdb/lease"
)

// Shared metadata. With Options.Metadata naming a PostgreSQL database, the
// buckets of internal/meta/schema.go and the blob index of cas/format.go
// live in that database (internal/kv/pgkv) instead of sbx.db, and every
// transaction of the engine runs there: the same code, the same checks in
// the same order. pgkv runs the write transactions of every process
// sharing the database one at a time (an advisory lock), so that an
// append's head compare-and-swap, a lease's fence check and a sweep's
// re-check of a key are decided against what every server committed, as
// bbolt runs them within one file.
//
// A transaction's function may therefore run more than once (kv's
// package comment): the group commit's batch function is re-runnable
// because each run overwrites every write's result before any is handed
// back, and each write's function already is (a failed batch runs each
// alone again). A conflict of one write of a batch with another server's
// transaction aborts the batch's transaction, which pgkv runs again
// whole: no write of the batch fails for another's conflict.
//
// The fold of pending references (commit.go's foldIfDue) reads the
// pending set's weight and entries, which every append adds to: inside an
// append's transaction, it would make every two appends conflict. So on
// shared metadata it runs after the batch's commit, in a transaction of
// its own (sharedCommit), and appends add to the weight without reading
// it (meta.addPending, kv.AddSequence).
//
// What differs from the bbolt file:
//   - a commit that fails (a lost connection) does not poison the handle:
//     no transaction builds on another's pages in memory, so the next one
//     starts from what the database holds, whatever the outcome was. Blob
//     files a batch wrote for it stay, as after a failed bbolt commit. A
//     group commit whose outcome is unknown (ErrCommitUnknown) fails every
//     write it carried, rather than retry each alone (commit.go): retried,
//     each would meet its own stored effects;
//   - the blobs may be in an S3 bucket (Options.Blobs) rather than the
//     blob directory, so that servers on different machines share them:
//     the bucket then holds every server's blobs and this database their
//     index (cas/remote.go);
//   - unless Options.Now is set, the store's clock is the database's
//     (clock.go), so that leases, upload times and the sweep's window are
//     decided by one clock across servers, whatever each server's says;
//   - a sweep holds a lock in the database for its whole run (gc.go), as
//     it holds gcMu within one process: its check that no checkpoint names
//     a missing blob relies on no other sweep deleting meanwhile;
//   - there is no page structure to walk at Open or in Check, no record of
//     a clean close, no compaction and no migration from older formats (a
//     database starts at FormatVersion).

// sharedCommit is committer.commit on shared metadata: fn in a
// transaction, then, when due, the fold in another. A fold that fails is
// dropped, as on bbolt: folding is housekeeping, fn's writes are committed,
// and the readers of counts and check report a damaged pending set.
// fn runs under ctx; the fold, housekeeping of every caller's, does not.
func (c *committer) sharedCommit(ctx context.Context, fn func(tx kv.Tx) error) error {
	if err := c.update(ctx, fn); err != nil {
		return err
	}
	due := false
	if c.db.view(func(tx kv.Tx) error {
		due = meta.PendingWeight(tx) >= uint64(min(c.db.opts.RefFoldAfter, foldPerThread))
		return nil
	}) == nil && due {
		c.update(context.Background(), c.foldIfDue) // it checks again, in its transaction
	}
	return nil
}

// Errors of a metadata database and of a bucket, as the engine's calls
// return them.
var (
	// ErrMetadataUnavailable: the database could not be reached or the
	// connection was lost; nothing was written, unless the error is also
	// ErrCommitUnknown. The next call may succeed once the database is
	// back: the store needs no reopening.
	ErrMetadataUnavailable = sbxdb.ErrMetadataUnavailable
	// ErrCommitUnknown: the connection was lost while the write committed,
	// so it may be stored. Read the state back (the head, the checkpoint
	// by id) before retrying.
	ErrCommitUnknown = sbxdb.ErrCommitUnknown
	// ErrBlobsUnavailable: the bucket of Options.Blobs could not be
	// reached, or its server failed, after the object store's retries.
	// No index entry names an object the failure kept from the bucket: a
	// capture that fails with it commits nothing, and a sweep's delete
	// whose index entry was removed leaves its object behind, for a later
	// gc. The next call may succeed once the bucket is back: the store
	// needs no reopening.
	ErrBlobsUnavailable = sbxdb.ErrBlobsUnavailable
)

// ErrNotFileMetadata is the error of what only the bbolt file has
// (compaction, migration from an older format) asked of a store whose
// metadata is in a database.
var ErrNotFileMetadata = errors.New("sbxdb: the store's metadata is in a database, not in sbx.db")

// sharedMeta is a metadata backend other than the bbolt file.
type sharedMeta interface {
	View(ctx context.Context, fn func(kv.Tx) error) error
	Update(ctx context.Context, fn func(kv.Tx) error) error
	// Lock holds the named lock across every process sharing the
	// database until release; a holder that dies releases it.
	Lock(ctx context.Context, name string) (release func(), err error)
	Close()
}

// IsSharedMetadata says whether s, an Options.Metadata value, names a
// database rather than the bbolt file beside the blobs.
func IsSharedMetadata(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// checkMetadata validates Options.Metadata.
func checkMetadata(s string) error {
	if s == "" || IsSharedMetadata(s) {
		return nil
	}
	return fmt.Errorf("%w: Metadata %q: want a postgres:// or postgresql:// URL, or empty for the file beside the blobs", sbxdb.ErrInvalidOptions, redactURL(s))
}

// checkBlobs validates Options.Blobs against Options.Metadata. Blobs in a
// bucket with the index in sbx.db would let two servers index one bucket
// separately, each taking the other's objects for orphans: refused.
func checkBlobs(blobs, metadata string) error {
	if blobs == "" {
		return nil
	}
	if _, _, err := s3.ParseURL(blobs); err != nil {
		return fmt.Errorf("%w: Blobs: %v", sbxdb.ErrInvalidOptions, err)
	}
	if !IsSharedMetadata(metadata) {
		return fmt.Errorf("%w: Blobs %q needs shared metadata (Metadata postgres://…): servers sharing a bucket must share its index", sbxdb.ErrInvalidOptions, blobs)
	}
	return nil
}

// blobsLocation is where the metadata records blobs in the bucket of
// Options.Blobs to be (meta/blobs, see claimBlobs): every server naming the
// same bucket and prefix shares them. "" for none.
func blobsLocation(blobs string) string {
	bucket, prefix, err := s3.ParseURL(blobs)
	if blobs == "" || err != nil {
		return ""
	}
	return "s3://" + bucket + "/" + prefix
}

// openBlobs opens the bucket of Options.Blobs.
func openBlobs(ctx context.Context, blobs string) (*s3.Store, error) {
	cfg, err := s3.ConfigFromEnv(blobs)
	if err != nil {
		return nil, fmt.Errorf("sbxdb: blobs at %s: %w", blobs, err)
	}
	st, err := s3.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sbxdb: blobs at %s: %w", blobs, err)
	}
	return st, nil
}

// withBlobs is the shared metadata of a store whose blobs are in a
// bucket: closing it closes the bucket's client too, after the blob
// store (DB.Close closes db.blobs first).
type withBlobs struct {
	sharedMeta
	blobs objstore.Store
}

func (w withBlobs) Close() {
	w.sharedMeta.Close()
	w.blobs.Close()
}

// redactURL hides a password in a connection URL, for messages.
// A password may be in the user part or in a query parameter (password,
// sslpassword); a URL that does not parse is not shown at all.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a database URL that does not parse)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// openShared is Open for a store whose metadata is in a database: dir
// holds the blob directory (and the lock that keeps it to one process).
func openShared(dir string, o Options) (db *DB, err error) {
	if !o.ReadOnly {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w at %s", sbxdb.ErrNoStore, dir)
	}
	lock, err := flock.LockStore(dir, o.ReadOnly, o.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	ctx := context.Background()
	pg, err := pgkv.Open(ctx, o.Metadata, pgkv.Options{})
	if err != nil {
		return nil, sharedError(o.Metadata, err)
	}
	if o.dbClock {
		// The database's clock, not this server's (clock.go).
		clock, err := newDBClock(ctx, pg.Now)
		if err != nil {
			pg.Close()
			return nil, sharedError(o.Metadata, err)
		}
		o.Now = clock.now
	}
	var shared sharedMeta = pg
	var remote objstore.Store
	if o.Blobs != "" {
		st, err := openBlobs(ctx, o.Blobs)
		if err != nil {
			pg.Close()
			return nil, err
		}
		remote, shared = st, withBlobs{pg, st}
	}
	db = &DB{dir: dir, path: redactURL(o.Metadata), opts: o, shared: shared, lock: lock, verified: true}
	db.meta = sharedBackend{db}
	err = db.view(func(tx kv.Tx) error { return initLayout(tx, nil) })
	switch {
	case errors.Is(err, errNoLayout) && o.ReadOnly:
		err = fmt.Errorf("%w at %s", sbxdb.ErrNoStore, db.path)
	case errors.Is(err, errNoLayout):
		// An empty database: create the layout. initLayout checks again
		// inside the write transaction, so of two servers starting at
		// once, one creates it and the other finds it.
		err = db.tx(true, func(tx kv.Tx) error { return initLayout(tx, func() error { return nil }) })
	}
	if err == nil {
		location := blobsLocation(o.Blobs)
		if location == "" {
			location = localBlobsID(dir, o.ReadOnly)
		}
		err = db.claimBlobs(location)
	}
	if err != nil {
		shared.Close()
		return nil, sharedError(o.Metadata, err)
	}
	if !o.ReadOnly {
		writeSharedMarker(dir, o)
		db.c = newCommitter(db)
	}
	// A database restored from a backup may be older than a local blob
	// directory: unindexed files there are quarantined, never removed.
	db.blobs, err = cas.Open(filepath.Join(dir, BlobDir), blobIndex{db}, cas.Options{Now: o.Now, ReadOnly: o.ReadOnly, NoSync: o.NoSync, FS: o.FS, Remote: remote,
		CacheSize: o.CacheSize, IndexMayBeOlder: remote == nil})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("opening the blob store: %w", err)
	}
	return db, nil
}

// ErrBlobsElsewhere reports a server opening shared metadata whose blobs
// are not where the server keeps its own: the index would name bytes the
// server cannot read, and the server's sweep would judge blobs by an index
// of others.
var ErrBlobsElsewhere = errors.New("sbxdb: the metadata indexes blobs stored elsewhere")

// blobsIDFile holds a blob directory's random id, which the shared
// metadata records (meta/blobs) as "dir:<id>".
const blobsIDFile = "blobs-id"

// localBlobsID returns the location of the blob directory in dir as the
// metadata records it, creating its id unless readOnly ("" when there is
// none to read).
func localBlobsID(dir string, readOnly bool) string {
	path := filepath.Join(dir, blobsIDFile)
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return "dir:" + strings.TrimSpace(string(b))
	}
	if readOnly {
		return ""
	}
	id := lease.NewToken()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return ""
	}
	if f, err := os.Open(tmp); err == nil {
		f.Sync()
		f.Close()
	}
	if err := os.Rename(tmp, path); err != nil {
		return ""
	}
	return "dir:" + id
}

// claimBlobs records location as where the metadata's blobs are, when no
// location is recorded and the handle writes, and otherwise refuses a
// location other than the recorded one with ErrBlobsElsewhere.
func (db *DB) claimBlobs(location string) error {
	var recorded string
	err := db.view(func(tx kv.Tx) error {
		v := tx.Bucket(meta.BucketMeta).Get(meta.KeyBlobs)
		if v == nil {
			return nil
		}
		p, err := meta.Unseal(meta.BucketMeta, meta.KeyBlobs, v)
		recorded = string(p)
		return err
	})
	switch {
	case err != nil:
		return err
	case recorded == location && location != "":
		return nil
	case recorded != "":
		return fmt.Errorf("%w: its blobs are at %s, this server's at %s (another server's blob directory, or one made anew)",
			ErrBlobsElsewhere, recorded, cmp.Or(location, "none"))
	case db.opts.ReadOnly || location == "":
		return nil // nothing recorded yet, and nothing to record
	}
	// The first server of this metadata: its directory must not hold a
	// store of its own, whose blobs the new index does not name (an Open
	// would take them for leftovers of a crashed batch).
	if what := ownStore(db.dir, db.opts.Blobs != ""); what != "" {
		return fmt.Errorf("%w: %s holds %s, and the metadata at %s indexes nothing: shared metadata starts with an empty directory",
			ErrBlobsElsewhere, db.dir, what, db.path)
	}
	return db.tx(true, func(tx kv.Tx) error {
		mb := tx.Bucket(meta.BucketMeta)
		if v := mb.Get(meta.KeyBlobs); v != nil { // another server recorded its own meanwhile
			p, err := meta.Unseal(meta.BucketMeta, meta.KeyBlobs, v)
			if err != nil {
				return err
			}
			if string(p) != location {
				return fmt.Errorf("%w: its blobs are at %s, this server's at %s", ErrBlobsElsewhere, p, location)
			}
			return nil
		}
		return mb.Put(meta.KeyBlobs, meta.Seal(meta.BucketMeta, meta.KeyBlobs, []byte(location)))
	})
}

// ownStore describes what of an embedded store dir holds: its database
// file, or, unless the blobs are remote (the directory then only caches
// them), blob files; "" when none.
func ownStore(dir string, remote bool) string {
	if st, err := os.Stat(filepath.Join(dir, DBFile)); err == nil && st.Size() > 0 {
		return DBFile
	}
	if remote {
		return ""
	}
	for _, sub := range []string{"packs", "large"} {
		d, err := os.Open(filepath.Join(dir, BlobDir, sub))
		if err != nil {
			continue
		}
		names, _ := d.Readdirnames(1)
		d.Close()
		if len(names) > 0 {
			return "blob files (" + filepath.Join(BlobDir, sub) + ")"
		}
	}
	return ""
}

// sharedError names the database (without its password) in err.
func sharedError(url string, err error) error {
	if errors.Is(err, pgkv.ErrNewerSchema) {
		return fmt.Errorf("%w: %s: %v", sbxdb.ErrFormat, redactURL(url), err)
	}
	return fmt.Errorf("sbxdb: metadata at %s: %w", redactURL(url), err)
}

// BlobRequestCounts counts the requests a store's bucket client sent, by
// S3 operation (internal/objstore/s3).
type BlobRequestCounts = s3.RequestCounts

// BlobRequests returns the requests the bucket client of Options.Blobs
// has sent since Open, retries included, for benchmarks and tests to
// price an operation in requests. ok is false when the blobs are not in a
// bucket.
func (db *DB) BlobRequests() (counts BlobRequestCounts, ok bool) {
	w, isRemote := db.shared.(withBlobs)
	if !isRemote {
		return BlobRequestCounts{}, false
	}
	st, isS3 := w.blobs.(*s3.Store)
	if !isS3 {
		return BlobRequestCounts{}, false
	}
	return st.Requests(), true
}

// sharedMarkerFile, in the directory of a store whose metadata is in a
// database, names the database (without its password) and the bucket, so
// that an Open of the directory without Options.Metadata says where the
// metadata is instead of finding no sbx.db. A writable Open with shared
// metadata writes it.
const sharedMarkerFile = "shared-metadata"

// ErrSharedMetadataDir is the error of an Open without Options.Metadata
// of a directory that a store with shared metadata uses: its metadata is
// in the database the error names (a *SharedDirError), not in sbx.db.
var ErrSharedMetadataDir = errors.New("sbxdb: the store's metadata is in a database")

// SharedDirError is ErrSharedMetadataDir with what the directory records.
type SharedDirError struct {
	Dir      string
	Metadata string // the database's URL, without its password
	Blobs    string // the bucket's URL; "" when the directory holds the blobs
}

func (e *SharedDirError) Error() string {
	s := fmt.Sprintf("%v: %s belongs to the metadata at %s", ErrSharedMetadataDir, e.Dir, e.Metadata)
	if e.Blobs != "" {
		s += " with the blobs at " + e.Blobs
	}
	return s + "; open it with that Metadata (the password is not recorded)"
}

func (e *SharedDirError) Unwrap() error { return ErrSharedMetadataDir }

// SharedMetadataOf returns what dir's marker records (sharedMarkerFile) as
// a *SharedDirError, or nil when dir has none.
func SharedMetadataOf(dir string) *SharedDirError {
	b, err := os.ReadFile(filepath.Join(dir, sharedMarkerFile))
	if err != nil {
		return nil
	}
	e := &SharedDirError{Dir: dir}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch k {
		case "metadata":
			e.Metadata = v
		case "blobs":
			e.Blobs = v
		}
	}
	if e.Metadata == "" {
		return nil
	}
	return e
}

// withoutPassword is a connection URL with no password in it, in the user
// part or a query parameter, for the marker.
func withoutPassword(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return redactURL(s)
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// writeSharedMarker records, in dir, the metadata and blobs URLs of o,
// unless the marker already says so. The marker is a hint for a later
// Open: a failure to write it fails nothing.
func writeSharedMarker(dir string, o Options) {
	text := "# sbxdb: this store's metadata is in a database: open it with --metadata (Options.Metadata)\n" +
		"metadata " + withoutPassword(o.Metadata) + "\n"
	if o.Blobs != "" {
		text += "blobs " + o.Blobs + "\n"
	}
	path := filepath.Join(dir, sharedMarkerFile)
	if b, err := os.ReadFile(path); err == nil && string(b) == text {
		return
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return
	}
	if f, err := os.Open(tmp); err == nil {
		f.Sync()
		f.Close()
	}
	os.Rename(tmp, path)
}
