package engine

import (
	"fmt"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/vfs"
)

// Options configures a store. The zero value gives the contract's defaults.
// Now, LeaseDuration and RenewAfter are the contract's (sbxdb.Options).
type Options struct {
	// Now, when set, is the one clock of the store, read at each call,
	// on the bbolt file and on shared metadata alike: the caller's clock
	// rules (tests set it to a clock of their own). It decides which
	// leases are live (acquire, renew, every write's writer check, the
	// threads a GC leaves alone); dates a captured checkpoint or a stored
	// artifact given no createdAt; stamps blob upload times and ages them
	// (a reused blob's refresh, the sweep's OlderThan window, a retired
	// pack's deletion window); and dates the note Open leaves when it
	// rewrites a damaged meta page.
	//
	// Unset, the store's clock is ServerClock on the bbolt file, and the
	// database's clock on shared metadata (clock.go): every server
	// sharing the database then decides those times by one clock, and a
	// server whose own clock is minutes off changes nothing.
	Now func() time.Time
	// ServerClock is this server's own clock. Default time.Now. With Now
	// unset it is the store's clock on the bbolt file; on shared metadata
	// the database's clock replaces it, and it is not read. Tests set it
	// to a clock minutes off to be a server whose clock is wrong, which
	// Now, the store's clock, could not be.
	ServerClock func() time.Time
	// LeaseDuration and RenewAfter are the lease timings: see
	// sbxdb.Options.
	LeaseDuration time.Duration
	RenewAfter    time.Duration
	// LockTimeout bounds how long Open waits for another process holding
	// the store. Default 1 s.
	LockTimeout time.Duration
	// ReadOnly opens the store for reading; writes fail. Several read-only
	// handles may share a store, but not with a writer.
	ReadOnly bool
	// RefFoldAfter is how much may have its blob reference counts pending
	// before a commit folds them into the counts (internal/meta/refs.go),
	// weighed as meta.CheckpointWeight does: 1 for each appended checkpoint,
	// plus 1 for each 256 entries of its manifest. Higher makes appends cheaper
	// and reading counts (BlobReferences, Fork's check, DeleteHead's chunk
	// check) costlier: a read decodes the pending checkpoints. Default
	// 4,096: as many small checkpoints, or 51 of 20,000 files, about a
	// million manifest entries; 1 folds at every commit. A commit also
	// folds once 64 checkpoints are pending per thread among them (a lone
	// writer folds every 64 appends: its pending set then fits a page).
	RefFoldAfter int
	// NoSync skips fsync on commit. Unsafe: a crash can lose acknowledged
	// writes. For tests and benchmarks only.
	NoSync bool
	// Metadata, when set, is a PostgreSQL URL (postgres://USER@HOST:PORT/DB):
	// the store's metadata and blob index live in that database, shared
	// with every other server opening it, rather than in sbx.db (shared.go).
	// The blob directory stays in the store directory. Default: sbx.db.
	Metadata string
	// Blobs, when set, is an S3 bucket, s3://BUCKET/PREFIX, holding the
	// blob bytes (cas's Options.Remote): the blob directory is then only
	// a staging area and a cache. The server and credentials come from
	// AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY. It requires Metadata: servers sharing a bucket
	// must share its index. Default: the blob directory holds the blobs.
	Blobs string
	// CacheSize bounds the bytes of the packs a store with Blobs keeps in
	// its blob directory for reading: beyond it the least recently used
	// are removed (cas's Options.CacheSize). Default (0): 2 GiB or a tenth
	// of the blob directory's disk, whichever is smaller. Without Blobs
	// it is unused.
	CacheSize int64
	// FS performs every change to the blob store's files and to restore
	// targets, and is asked before each database commit (see package vfs).
	// Default vfs.OS; tests pass a vfs/faultfs.FS to fail chosen steps.
	FS vfs.FS

	// dbClock says Now was unset: on shared metadata, Open makes it the
	// database's clock. CheckOptions fills Now in, so it keeps this.
	dbClock bool
}

// Defaults of the engine's own options.
const (
	DefaultLockTimeout  = time.Second
	DefaultRefFoldAfter = 4096
)

// CheckOptions validates opts (nil means all defaults) and returns a copy
// with the defaults filled in: the contract's as sbxdb.Options.Check does
// them, then the engine's. Invalid options give an error wrapping
// sbxdb.ErrInvalidOptions.
func CheckOptions(opts *Options) (Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ServerClock == nil {
		o.ServerClock = time.Now
	}
	if o.Now == nil {
		o.Now, o.dbClock = o.ServerClock, true
	}
	c, err := sbxdb.Options{Now: o.Now, LeaseDuration: o.LeaseDuration, RenewAfter: o.RenewAfter}.Check()
	if err != nil {
		return o, err
	}
	o.Now, o.LeaseDuration, o.RenewAfter = c.Now, c.LeaseDuration, c.RenewAfter
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.RefFoldAfter == 0 {
		o.RefFoldAfter = DefaultRefFoldAfter
	}
	if o.FS == nil {
		o.FS = vfs.OS
	}
	switch {
	case o.RefFoldAfter < 0:
		return o, fmt.Errorf("%w: RefFoldAfter %d is negative", sbxdb.ErrInvalidOptions, o.RefFoldAfter)
	case o.LockTimeout < 0:
		return o, fmt.Errorf("%w: LockTimeout %v is negative", sbxdb.ErrInvalidOptions, o.LockTimeout)
	case o.CacheSize < 0:
		return o, fmt.Errorf("%w: CacheSize %d is negative", sbxdb.ErrInvalidOptions, o.CacheSize)
	}
	if err := checkMetadata(o.Metadata); err != nil {
		return o, err
	}
	if err := checkBlobs(o.Blobs, o.Metadata); err != nil {
		return o, err
	}
	return o, nil
}

// nowMs reads the clock in epoch milliseconds.
func (o *Options) nowMs() int64 { return o.Now().UnixMilli() }
