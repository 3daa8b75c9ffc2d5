// Package objects is the object-store face of a store: blobs and plain
// objects by key (Put, Open, Stat, Delete, List; docs/API.md, Blobs and
// objects), artifact records (Records) and checkpoint artifacts
// (PutArtifact, ReadArtifact). It reaches the store only through the Store
// interface the engine hands it: the blob store (whose batches commit a
// record with the bytes it names), a read transaction, a write
// transaction, what else holds a blob, the clock and the checkpoints; the
// records themselves, and the holds a plain object keeps on its blob, are
// internal/meta's. Files: objects.go (blobs and plain objects), records.go
// (artifact records), artifacts.go (checkpoint artifacts).
package objects

import (
	"context"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// Store is what the objects need of a store; the engine implements it.
type Store interface {
	// Blobs is the store's blob store.
	Blobs() *cas.Store
	// ReadOnly reports a store opened read-only: writes are
	// sbxdb.ErrReadOnly.
	ReadOnly() bool
	// WriteRefused is the error that refuses writes to a damaged or
	// poisoned store; nil when writes may go ahead.
	WriteRefused() error
	// View runs fn in a read transaction of the metadata, under ctx.
	View(ctx context.Context, fn func(tx kv.Tx) error) error
	// Write runs fn in a write transaction of the metadata; fn may run
	// more than once.
	Write(ctx context.Context, fn func(tx kv.Tx) error) error
	// InUse tells cas.Store.DeleteUnused what else needs a blob: a
	// checkpoint's reference or a hold.
	InUse() cas.InUse
	// NowMs is the store's clock, in epoch milliseconds.
	NowMs() int64
	// Get returns checkpoint id, nil when there is none.
	Get(ctx context.Context, id string) (*chain.Checkpoint, error)
}
