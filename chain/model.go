// Package chain is sbxdb's checkpoint model: its types, their validation in
// the contract's order, its errors and codes, the strict JSON input path,
// blob key prefixes and size limits; not storage (internal/meta's), leases
// or blob bytes. Strings sort by UTF-8 bytes (SPEC §1.7), as Go's do.
package chain

import (
	"bytes"
	"encoding/json"
	"slices"
)

// Reason says why a checkpoint was made (SPEC §1.1, §10 Q9).
type Reason string

// The three reasons the contract knows.
const (
	ReasonAutomatic Reason = "automatic"
	ReasonNamed     Reason = "named"
	ReasonForkRoot  Reason = "fork-root"
)

// Kind is the kind of a manifest entry.
type Kind string

// Entry kinds. Symlinks are the inferred third kind of SPEC §10 Q5.
const (
	KindFile    Kind = "file"
	KindDir     Kind = "dir"
	KindSymlink Kind = "symlink"
)

// Blob key namespaces (SPEC §6.1): a key is a prefix and the lowercase hex
// SHA-256 of its uncompressed bytes; a sweep may delete any key under a root.
const (
	FileRoot       = "sandbox-files/"
	ArtifactRoot   = "sandbox-artifacts/"
	FilePrefix     = FileRoot + "sha256/"
	ArtifactPrefix = ArtifactRoot + "sha256/"
)

// Checkpoint is one saved state of a thread; its JSON is a SandboxCheckpoint.
type Checkpoint struct {
	ID           string
	ThreadID     string
	ParentID     string // the previous checkpoint; "" is null (a root)
	CreatedAt    int64  // epoch milliseconds, within ±MaxSafeInteger
	Reason       Reason
	Label        string // optional; "" is absent
	SourceRunID  string // optional; "" is absent
	Files        []Entry
	Conversation []json.RawMessage // each a JSON value, stored byte for byte
	Artifacts    []Artifact
}

// Entry is a manifest entry: a regular file, an empty directory or a symlink.
type Entry struct {
	Path       string `json:"path"`
	Kind       Kind   `json:"kind"`
	BlobKey    string `json:"blobKey,omitempty"`    // files only
	Size       int64  `json:"size"`                 // files only
	Executable bool   `json:"executable,omitempty"` // files only: restore sets mode 0755 (SPEC §10 Q5)
	Target     string `json:"target,omitempty"`     // symlinks only
}

// Artifact is a file the run produced, stored outside the workspace tree.
type Artifact struct {
	ArtifactID string `json:"artifactId"`
	Name       string `json:"name"`
	MimeType   string `json:"mimeType"`
	BlobKey    string `json:"blobKey"`
	Size       int64  `json:"size"`
	CreatedAt  int64  `json:"createdAt"`
}

// BlobRef is a blob key and how many checkpoints use it (always > 0).
type BlobRef struct {
	Key        string `json:"key"`
	References int64  `json:"references"`
}

// Writer identifies the holder of a thread's writer lease. Any value is
// accepted as input, and authorised only if it matches the stored lease.
type Writer struct {
	ThreadID   string `json:"threadId"`
	OwnerToken string `json:"ownerToken"`
	Fence      uint64 `json:"fence"`
}

// AppendInput is Append's argument; ExpectedHeadID "" (null): an empty thread.
type AppendInput struct {
	Checkpoint     *Checkpoint
	ExpectedHeadID string
	Writer         Writer
}

// ForkInput is the argument of Fork (SPEC §3); Writer leases the destination.
type ForkInput struct {
	SourceThreadID          string
	SourceCheckpointID      string
	DestinationThreadID     string
	DestinationCheckpointID string
	CreatedAt               int64
	Writer                  Writer
}

// Clone returns a deep copy of c, nil lists made empty as stores return them.
func (c *Checkpoint) Clone() *Checkpoint {
	if c == nil {
		return nil
	}
	out := *c
	out.Files = append(make([]Entry, 0, len(c.Files)), c.Files...)
	out.Artifacts = append(make([]Artifact, 0, len(c.Artifacts)), c.Artifacts...)
	out.Conversation = CloneMessages(c.Conversation)
	return &out
}

// CloneMessages deep-copies a message list; nil becomes empty.
func CloneMessages(msgs []json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		out[i] = bytes.Clone(m)
	}
	return out
}

// BlobKeys returns c's distinct blob keys (files and artifacts) in byte order.
func (c *Checkpoint) BlobKeys() []string {
	seen := make(map[string]struct{}, len(c.Files)+len(c.Artifacts))
	var keys []string
	add := func(k string) {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			keys = append(keys, k)
		}
	}
	for i := range c.Files {
		if c.Files[i].Kind == KindFile {
			add(c.Files[i].BlobKey)
		}
	}
	for i := range c.Artifacts {
		add(c.Artifacts[i].BlobKey)
	}
	slices.Sort(keys)
	return keys
}

// checkpointJSON is the wire shape. Pointers give null and absence.
type checkpointJSON struct {
	ID           wireString        `json:"id"`
	ThreadID     wireString        `json:"threadId"`
	ParentID     *wireString       `json:"parentCheckpointId"`
	CreatedAt    int64             `json:"createdAt"`
	Reason       Reason            `json:"reason"`
	Label        wireString        `json:"label,omitempty"`
	SourceRunID  wireString        `json:"sourceRunId,omitempty"`
	Files        []Entry           `json:"files"`
	Conversation []json.RawMessage `json:"conversation"`
	Artifacts    []Artifact        `json:"artifacts"`
}

// MarshalJSON renders the wire shape, messages compacted as by encoding/json.
func (c Checkpoint) MarshalJSON() ([]byte, error) {
	w := checkpointJSON{
		ID: wireString(c.ID), ThreadID: wireString(c.ThreadID), CreatedAt: c.CreatedAt, Reason: c.Reason,
		Label: wireString(c.Label), SourceRunID: wireString(c.SourceRunID),
		Files: c.Files, Conversation: c.Conversation, Artifacts: c.Artifacts,
	}
	if c.ParentID != "" {
		p := wireString(c.ParentID)
		w.ParentID = &p
	}
	if w.Files == nil {
		w.Files = []Entry{}
	}
	if w.Conversation == nil {
		w.Conversation = []json.RawMessage{}
	}
	if w.Artifacts == nil {
		w.Artifacts = []Artifact{}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes and checks the wire shape as ParseCheckpoint does.
func (c *Checkpoint) UnmarshalJSON(b []byte) error {
	p, err := ParseCheckpoint(b)
	if err != nil {
		return err
	}
	*c = *p
	return nil
}

// MarshalJSON renders the fields of the entry's kind, a file's size even if 0.
func (e Entry) MarshalJSON() ([]byte, error) {
	switch e.Kind {
	case KindFile:
		type file struct {
			Path       wireString `json:"path"`
			Kind       Kind       `json:"kind"`
			BlobKey    wireString `json:"blobKey"`
			Size       int64      `json:"size"`
			Executable bool       `json:"executable,omitempty"`
		}
		return json.Marshal(file{wireString(e.Path), e.Kind, wireString(e.BlobKey), e.Size, e.Executable})
	case KindSymlink:
		type link struct {
			Path   wireString `json:"path"`
			Kind   Kind       `json:"kind"`
			Target wireString `json:"target"`
		}
		return json.Marshal(link{wireString(e.Path), e.Kind, wireString(e.Target)})
	default:
		type dir struct {
			Path wireString `json:"path"`
			Kind Kind       `json:"kind"`
		}
		return json.Marshal(dir{wireString(e.Path), e.Kind})
	}
}
