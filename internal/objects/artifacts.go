package objects

import (
	"context"
	"fmt"
	"io"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/workspace"
)

// ArtifactInput is an artifact to store: its record fields and its bytes.
type ArtifactInput struct {
	ArtifactID, Name, MimeType string
	CreatedAt                  int64 // epoch ms; 0 means now
	Data                       io.Reader
	// Secrets are zero-filled in the bytes before hashing and storing.
	Secrets []string
}

// PutArtifact stores an artifact's bytes under a sandbox-artifacts/ key,
// durably, and returns the record to put in a checkpoint's Artifacts. The
// bytes are streamed: memory does not grow with their size.
func PutArtifact(ctx context.Context, s Store, in ArtifactInput) (chain.Artifact, error) {
	a := chain.Artifact{ArtifactID: in.ArtifactID, Name: in.Name, MimeType: in.MimeType, CreatedAt: in.CreatedAt,
		BlobKey: chain.ArtifactPrefix + "0000000000000000000000000000000000000000000000000000000000000000"}
	if a.CreatedAt == 0 {
		a.CreatedAt = s.NowMs()
	}
	// Check the fields before reading any bytes; the key is a placeholder.
	if err := chain.ValidateArtifact(&a); err != nil {
		return chain.Artifact{}, err
	}
	if in.Data == nil {
		return chain.Artifact{}, chain.Errorf(chain.ErrInvalidEntry, "artifact %q has no data", in.ArtifactID)
	}
	b := s.Blobs().NewBatch()
	defer b.Close()
	res, err := b.AddReader(ctx, cas.Artifacts, workspace.NewRedactor(in.Secrets).Reader(in.Data))
	if err != nil {
		return chain.Artifact{}, fmt.Errorf("artifact %q: %w", in.ArtifactID, err)
	}
	if err := b.Commit(ctx); err != nil {
		return chain.Artifact{}, fmt.Errorf("artifact %q: %w", in.ArtifactID, err)
	}
	a.BlobKey, a.Size = res.Key, res.Size
	return a, nil
}

// ReadArtifact returns an artifact record of a checkpoint and a private
// copy of its verified bytes (SPEC §6.8 readArtifact): an unknown
// checkpoint or artifact is SANDBOX_SNAPSHOT_MISSING_CHECKPOINT_ARTIFACT, a
// checkpoint of another thread SANDBOX_SNAPSHOT_FOREIGN_CHECKPOINT_ARTIFACT,
// and a blob that is missing or does not match its key or size
// SANDBOX_SNAPSHOT_INVALID_ARTIFACT_BYTES. Ids are not proof of access:
// authorization is the caller's job.
func ReadArtifact(ctx context.Context, s Store, threadID, checkpointID, artifactID string) (chain.Artifact, []byte, error) {
	if err := chain.CheckIDs("threadId", threadID, "checkpointId", checkpointID); err != nil {
		return chain.Artifact{}, nil, err
	}
	cp, err := s.Get(ctx, checkpointID)
	if err != nil {
		return chain.Artifact{}, nil, err
	}
	if cp == nil {
		return chain.Artifact{}, nil, chain.Errorf(chain.ErrMissingCheckpointArtifact, "checkpoint %q not found", checkpointID)
	}
	if cp.ThreadID != threadID {
		return chain.Artifact{}, nil, chain.Errorf(chain.ErrForeignCheckpointArtifact, "checkpoint %q belongs to another thread", checkpointID)
	}
	for _, a := range cp.Artifacts {
		if a.ArtifactID != artifactID {
			continue
		}
		data, err := s.Blobs().Get(ctx, a.BlobKey)
		if err != nil {
			return chain.Artifact{}, nil, chain.Errorf(chain.ErrInvalidArtifactBytes, "artifact %q: %v", artifactID, err)
		}
		if int64(len(data)) != a.Size {
			return chain.Artifact{}, nil, chain.Errorf(chain.ErrInvalidArtifactBytes, "artifact %q: %d bytes, the record says %d", artifactID, len(data), a.Size)
		}
		return a, data, nil
	}
	return chain.Artifact{}, nil, chain.Errorf(chain.ErrMissingCheckpointArtifact, "checkpoint %q has no artifact %q", checkpointID, artifactID)
}
