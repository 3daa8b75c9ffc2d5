package engine

import (
	"context"
	"github.com/sbxdb/sbxdb/internal/kv"
	"strings"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// MaxArtifactTextBytes bounds each of an artifact record's name, mimeType
// and sourceUrl, in bytes.
const MaxArtifactTextBytes = 64 << 10

// ArtifactRecord is the metadata a host keeps beside a generated file
// (docs/API.md, Artifact records).
type ArtifactRecord struct {
	ArtifactID string `json:"artifactId"`
	RunID      string `json:"runId"`
	ThreadID   string `json:"threadId"`
	// BlobKey, when set, is a content-addressed blob key; the record holds
	// the blob for the garbage collector while it exists.
	BlobKey   string `json:"blobKey,omitempty"`
	Name      string `json:"name"`
	MimeType  string `json:"mimeType"`
	Size      int64  `json:"size"`
	SourceURL string `json:"sourceUrl,omitempty"`
	CreatedAt int64  `json:"createdAt"` // epoch ms
}

// ArtifactRecords is the store of artifact records. Every method first
// validates its identifiers (SANDBOX_SNAPSHOT_INVALID_ID); a write that
// fails changes nothing.
type ArtifactRecords interface {
	// Save inserts or overwrites the record of rec.ArtifactID. Checks, in
	// order: artifactId, runId, threadId (INVALID_ID); then blobKey (empty
	// or a content-addressed key), name and mimeType (non-empty text),
	// sourceUrl (text), size (0 to 2^53−1) and createdAt (±(2^53−1)), each
	// SANDBOX_SNAPSHOT_INVALID_ENTRY. The blob need not be stored.
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

// ArtifactRecords returns the artifact records kept in the same file. A
// record's thread counts as destination state for Fork (SPEC §3.2).
func (db *DB) ArtifactRecords() ArtifactRecords { return artifactRecords{db} }

type artifactRecords struct{ db *DB }

// checkArtifactRecord runs Save's checks, in its order.
func checkArtifactRecord(r *ArtifactRecord) error {
	if err := chain.CheckIDs("artifactId", r.ArtifactID, "runId", r.RunID, "threadId", r.ThreadID); err != nil {
		return err
	}
	if r.BlobKey != "" {
		if _, _, err := cas.ParseKey(r.BlobKey); err != nil && CheckObjectKey(r.BlobKey) != nil {
			return chain.Errorf(chain.ErrInvalidEntry, "artifact record %q: blobKey %q is neither a blob key nor an object key", r.ArtifactID, r.BlobKey)
		}
	}
	for _, f := range []struct {
		name, value string
		required    bool
	}{{"name", r.Name, true}, {"mimeType", r.MimeType, true}, {"sourceUrl", r.SourceURL, false}} {
		switch {
		case f.required && f.value == "":
			return chain.Errorf(chain.ErrInvalidEntry, "artifact record %q: %s is empty", r.ArtifactID, f.name)
		case len(f.value) > MaxArtifactTextBytes:
			return chain.Errorf(chain.ErrInvalidEntry, "artifact record %q: %s of %d bytes is longer than %d", r.ArtifactID, f.name, len(f.value), MaxArtifactTextBytes)
		case !utf8.ValidString(f.value) || strings.IndexByte(f.value, 0) >= 0:
			return chain.Errorf(chain.ErrInvalidEntry, "artifact record %q: %s %q is not text (invalid UTF-8 or NUL)", r.ArtifactID, f.name, f.value)
		}
	}
	if r.Size < 0 || r.Size > chain.MaxSafeInteger {
		return chain.Errorf(chain.ErrInvalidEntry, "artifact record %q: size %d is not from 0 to 2^53−1", r.ArtifactID, r.Size)
	}
	return chain.CheckCreatedAt("artifact record createdAt", r.CreatedAt)
}

func toStored(r *ArtifactRecord) *meta.ArtifactRecord {
	return &meta.ArtifactRecord{ArtifactID: r.ArtifactID, RunID: r.RunID, ThreadID: r.ThreadID, BlobKey: r.BlobKey,
		Name: r.Name, MimeType: r.MimeType, SourceURL: r.SourceURL, Size: r.Size, CreatedAt: r.CreatedAt}
}

func fromStored(r *meta.ArtifactRecord) ArtifactRecord {
	return ArtifactRecord{ArtifactID: r.ArtifactID, RunID: r.RunID, ThreadID: r.ThreadID, BlobKey: r.BlobKey,
		Name: r.Name, MimeType: r.MimeType, SourceURL: r.SourceURL, Size: r.Size, CreatedAt: r.CreatedAt}
}

func (s artifactRecords) Save(ctx context.Context, rec ArtifactRecord) error {
	if err := checkArtifactRecord(&rec); err != nil {
		return err
	}
	stored := toStored(&rec)
	return s.db.write(ctx, func(tx kv.Tx) error { return meta.PutArtifactRecord(tx, stored) })
}

func (s artifactRecords) Get(ctx context.Context, artifactID string) (*ArtifactRecord, error) {
	if err := firstErr(ctx.Err(), chain.CheckID("artifactId", artifactID)); err != nil {
		return nil, err
	}
	var out *ArtifactRecord
	err := s.db.view(func(tx kv.Tx) error {
		r, err := meta.GetArtifactRecord(tx, artifactID)
		if r != nil {
			rec := fromStored(r)
			out = &rec
		}
		return err
	})
	return out, err
}

func (s artifactRecords) ListForRun(ctx context.Context, runID string) ([]ArtifactRecord, error) {
	return s.list(ctx, "runId", runID, meta.ArtifactRecordsOfRun)
}

func (s artifactRecords) ListForThread(ctx context.Context, threadID string) ([]ArtifactRecord, error) {
	return s.list(ctx, "threadId", threadID, meta.ArtifactRecordsOfThread)
}

func (s artifactRecords) list(ctx context.Context, field, owner string, read func(kv.Tx, string) ([]*meta.ArtifactRecord, error)) ([]ArtifactRecord, error) {
	if err := firstErr(ctx.Err(), chain.CheckID(field, owner)); err != nil {
		return nil, err
	}
	out := []ArtifactRecord{}
	err := s.db.view(func(tx kv.Tx) error {
		recs, err := read(tx, owner)
		for _, r := range recs {
			out = append(out, fromStored(r))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s artifactRecords) Delete(ctx context.Context, artifactID string) error {
	if err := chain.CheckID("artifactId", artifactID); err != nil {
		return err
	}
	return s.db.write(ctx, func(tx kv.Tx) error {
		_, err := meta.DeleteArtifactRecord(tx, artifactID)
		return err
	})
}

func (s artifactRecords) DeleteForRun(ctx context.Context, runID string) (int, error) {
	if err := chain.CheckID("runId", runID); err != nil {
		return 0, err
	}
	n := 0
	err := s.db.write(ctx, func(tx kv.Tx) error {
		n = 0 // the body may run twice (a shared transaction retried alone)
		recs, err := meta.ArtifactRecordsOfRun(tx, runID)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if _, err := meta.DeleteArtifactRecord(tx, r.ArtifactID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
