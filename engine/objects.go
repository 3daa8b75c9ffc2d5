package engine

import (
	"context"
	"io"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/objects"
)

// Blobs and plain objects, artifact records and checkpoint artifacts: see
// internal/objects, which does the work through objectStore.

// MaxArtifactTextBytes bounds each of an artifact record's name, mimeType
// and sourceUrl, in bytes.
const MaxArtifactTextBytes = objects.MaxArtifactTextBytes

// ArtifactInput is an artifact to store: its record fields and its bytes
// (objects.ArtifactInput).
type ArtifactInput = objects.ArtifactInput

// PutObject stores the bytes of r under key and returns what it stored:
// see objects.Put. A content-addressed key's body must match its digest
// and, when opts.Size is not -1, its length (else the error matches
// sbxdb.ErrBlobKeyMismatch); a plain key's record replaces any earlier one
// in the transaction that indexes its bytes. The body is streamed.
func (db *DB) PutObject(ctx context.Context, key string, r io.Reader, opts sbxdb.PutObjectOptions) (sbxdb.ObjectInfo, error) {
	return objects.Put(ctx, objectStore{db}, key, r, opts)
}

// OpenObject returns a reader of key's verified bytes and what is stored
// under key: see objects.Open. A key not stored matches
// sbxdb.ErrBlobNotFound; damaged bytes match chain.ErrInvalidBlob and
// sbxdb.ErrBlobCorrupt, possibly only from the Read that would have
// returned io.EOF.
func (db *DB) OpenObject(ctx context.Context, key string) (io.ReadCloser, sbxdb.ObjectInfo, error) {
	return objects.Open(ctx, objectStore{db}, key)
}

// StatObject describes what is stored under key, reading no bytes, and
// refreshes a content-addressed blob's upload time on a writable store:
// see objects.Stat.
func (db *DB) StatObject(ctx context.Context, key string) (sbxdb.ObjectInfo, error) {
	return objects.Stat(ctx, objectStore{db}, key)
}

// DeleteObject deletes key; a key not stored is not an error. A
// content-addressed blob that something still names or pins is not
// deleted (sbxdb.ErrBlobInUse): see objects.Delete.
func (db *DB) DeleteObject(ctx context.Context, key string) error {
	return objects.Delete(ctx, objectStore{db}, key)
}

// ListObjects lists, in key byte order, up to limit (0 to
// sbxdb.MaxListObjects) blobs and plain objects whose key starts with
// prefix and sorts after cursor, and the cursor of the next page ("" when
// nothing is left): see objects.List.
func (db *DB) ListObjects(ctx context.Context, prefix, cursor string, limit int) ([]sbxdb.ObjectInfo, string, error) {
	return objects.List(ctx, objectStore{db}, prefix, cursor, limit)
}

// ArtifactRecords returns the artifact records kept in the same file. A
// record's thread counts as destination state for Fork (SPEC §3.2).
func (db *DB) ArtifactRecords() sbxdb.ArtifactRecords { return objects.Records(objectStore{db}) }

// PutArtifact stores an artifact's bytes under a sandbox-artifacts/ key,
// durably, and returns the record to put in a checkpoint's Artifacts: see
// objects.PutArtifact. The bytes are streamed.
func (db *DB) PutArtifact(ctx context.Context, in ArtifactInput) (chain.Artifact, error) {
	return objects.PutArtifact(ctx, objectStore{db}, in)
}

// ReadArtifact returns an artifact record of a checkpoint and a private
// copy of its verified bytes (SPEC §6.8 readArtifact): see
// objects.ReadArtifact. Ids are not proof of access: authorization is the
// caller's job.
func (db *DB) ReadArtifact(ctx context.Context, threadID, checkpointID, artifactID string) (chain.Artifact, []byte, error) {
	return objects.ReadArtifact(ctx, objectStore{db}, threadID, checkpointID, artifactID)
}

// objectStore is what the objects need of db (objects.Store).
type objectStore struct{ db *DB }

func (s objectStore) Blobs() *cas.Store   { return s.db.blobs }
func (s objectStore) ReadOnly() bool      { return s.db.c == nil }
func (s objectStore) WriteRefused() error { return s.db.writeRefused() }
func (s objectStore) View(ctx context.Context, fn func(tx kv.Tx) error) error {
	return s.db.viewCtx(ctx, fn)
}
func (s objectStore) InUse() cas.InUse { return s.db.blobUse(nil, time.Time{}) }
func (s objectStore) NowMs() int64     { return s.db.opts.nowMs() }
func (s objectStore) Write(ctx context.Context, fn func(tx kv.Tx) error) error {
	return s.db.write(ctx, fn)
}

func (s objectStore) Get(ctx context.Context, id string) (*chain.Checkpoint, error) {
	return s.db.Get(ctx, id)
}
