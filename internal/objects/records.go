package objects

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// MaxArtifactTextBytes bounds each of an artifact record's name, mimeType
// and sourceUrl, in bytes.
const MaxArtifactTextBytes = 64 << 10

// Records returns the artifact records kept in s's metadata.
func Records(s Store) sbxdb.ArtifactRecords { return artifactRecords{s} }

type artifactRecords struct{ s Store }

// checkArtifactRecord runs Save's checks, in its order.
func checkArtifactRecord(r *sbxdb.ArtifactRecord) error {
	if err := chain.CheckIDs("artifactId", r.ArtifactID, "runId", r.RunID, "threadId", r.ThreadID); err != nil {
		return err
	}
	if r.BlobKey != "" {
		if _, err := sbxdb.CheckObjectKey(r.BlobKey); err != nil {
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

func toStored(r *sbxdb.ArtifactRecord) *meta.ArtifactRecord {
	return &meta.ArtifactRecord{ArtifactID: r.ArtifactID, RunID: r.RunID, ThreadID: r.ThreadID, BlobKey: r.BlobKey,
		Name: r.Name, MimeType: r.MimeType, SourceURL: r.SourceURL, Size: r.Size, CreatedAt: r.CreatedAt}
}

func fromStored(r *meta.ArtifactRecord) sbxdb.ArtifactRecord {
	return sbxdb.ArtifactRecord{ArtifactID: r.ArtifactID, RunID: r.RunID, ThreadID: r.ThreadID, BlobKey: r.BlobKey,
		Name: r.Name, MimeType: r.MimeType, SourceURL: r.SourceURL, Size: r.Size, CreatedAt: r.CreatedAt}
}

func (s artifactRecords) Save(ctx context.Context, rec sbxdb.ArtifactRecord) error {
	if err := checkArtifactRecord(&rec); err != nil {
		return err
	}
	stored := toStored(&rec)
	return s.s.Write(ctx, func(tx kv.Tx) error { return meta.PutArtifactRecord(tx, stored) })
}

func (s artifactRecords) Get(ctx context.Context, artifactID string) (*sbxdb.ArtifactRecord, error) {
	if err := firstErr(ctx.Err(), chain.CheckID("artifactId", artifactID)); err != nil {
		return nil, err
	}
	var out *sbxdb.ArtifactRecord
	err := s.s.View(ctx, func(tx kv.Tx) error {
		r, err := meta.GetArtifactRecord(tx, artifactID)
		if r != nil {
			rec := fromStored(r)
			out = &rec
		}
		return err
	})
	return out, err
}

func (s artifactRecords) ListForRun(ctx context.Context, runID string) ([]sbxdb.ArtifactRecord, error) {
	return s.list(ctx, "runId", runID, meta.ArtifactRecordsOfRun)
}

func (s artifactRecords) ListForThread(ctx context.Context, threadID string) ([]sbxdb.ArtifactRecord, error) {
	return s.list(ctx, "threadId", threadID, meta.ArtifactRecordsOfThread)
}

func (s artifactRecords) list(ctx context.Context, field, owner string, read func(kv.Tx, string) ([]*meta.ArtifactRecord, error)) ([]sbxdb.ArtifactRecord, error) {
	if err := firstErr(ctx.Err(), chain.CheckID(field, owner)); err != nil {
		return nil, err
	}
	out := []sbxdb.ArtifactRecord{}
	err := s.s.View(ctx, func(tx kv.Tx) error {
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
	return s.s.Write(ctx, func(tx kv.Tx) error {
		_, err := meta.DeleteArtifactRecord(tx, artifactID)
		return err
	})
}

func (s artifactRecords) DeleteForRun(ctx context.Context, runID string) (int, error) {
	if err := chain.CheckID("runId", runID); err != nil {
		return 0, err
	}
	n := 0
	err := s.s.Write(ctx, func(tx kv.Tx) error {
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

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
