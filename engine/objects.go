package engine

import (
	"context"
	"errors"
	"io"
)

// ErrBlobInUse refuses to delete a content-addressed blob that a
// checkpoint, a plain object or an artifact record references, or that a
// capture in flight has pinned.
var ErrBlobInUse = errors.New("sbxdb: blob is in use")

// ObjectInfo describes a stored blob or plain object (docs/API.md, Blobs
// and objects).
type ObjectInfo struct {
	Key      string `json:"key"`
	Size     int64  `json:"size"`
	Uploaded int64  `json:"uploaded"` // epoch ms
	// SHA256 is the hex digest of the bytes.
	SHA256 string `json:"sha256"`
	// ContentType and CustomMetadata are a plain object's, as put.
	ContentType    string            `json:"contentType,omitempty"`
	CustomMetadata map[string]string `json:"customMetadata,omitempty"`
}

// PutObjectOptions describe the bytes given to PutObject.
type PutObjectOptions struct {
	// ContentType and CustomMetadata are kept with a plain object; a
	// content-addressed key keeps neither.
	ContentType    string
	CustomMetadata map[string]string
	// Size, when not -1, is the length the body must have.
	Size int64
}

// PutObject stores the bytes of r under key. TODO(objects): implemented by
// the objects change.
func (db *DB) PutObject(ctx context.Context, key string, r io.Reader, opts PutObjectOptions) (ObjectInfo, error) {
	return ObjectInfo{}, errors.ErrUnsupported
}

// OpenObject returns a reader of key's verified bytes.
func (db *DB) OpenObject(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	return nil, ObjectInfo{}, errors.ErrUnsupported
}

// StatObject describes key, refreshing a content-addressed blob's upload
// time.
func (db *DB) StatObject(ctx context.Context, key string) (ObjectInfo, error) {
	return ObjectInfo{}, errors.ErrUnsupported
}

// DeleteObject deletes key.
func (db *DB) DeleteObject(ctx context.Context, key string) error {
	return errors.ErrUnsupported
}

// ListObjects lists up to limit keys starting with prefix and after cursor.
func (db *DB) ListObjects(ctx context.Context, prefix, cursor string, limit int) ([]ObjectInfo, string, error) {
	return nil, "", errors.ErrUnsupported
}

// ArtifactRecord is the metadata a host keeps beside a generated file.
type ArtifactRecord struct {
	ArtifactID string `json:"artifactId"`
	RunID      string `json:"runId"`
	ThreadID   string `json:"threadId"`
	BlobKey    string `json:"blobKey,omitempty"`
	Name       string `json:"name"`
	MimeType   string `json:"mimeType"`
	Size       int64  `json:"size"`
	SourceURL  string `json:"sourceUrl,omitempty"`
	CreatedAt  int64  `json:"createdAt"` // epoch ms
}

// ArtifactRecords is the store of artifact records.
type ArtifactRecords interface {
	// Save inserts or overwrites the record of rec.ArtifactID.
	Save(ctx context.Context, rec ArtifactRecord) error
	// Get returns the record, or nil and no error when the id is unknown.
	Get(ctx context.Context, artifactID string) (*ArtifactRecord, error)
	// ListForRun and ListForThread return the records of a run or a
	// thread by createdAt, then artifactId bytes; [] when there are none.
	ListForRun(ctx context.Context, runID string) ([]ArtifactRecord, error)
	ListForThread(ctx context.Context, threadID string) ([]ArtifactRecord, error)
	// Delete removes the record; a missing id is not an error.
	Delete(ctx context.Context, artifactID string) error
	// DeleteForRun removes every record of the run and says how many.
	DeleteForRun(ctx context.Context, runID string) (int, error)
}

// ArtifactRecords returns the artifact records kept in the same file.
func (db *DB) ArtifactRecords() ArtifactRecords { return nil }
