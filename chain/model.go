// Package chain is the checkpoint model of sbxdb: the Checkpoint, Entry and
// Artifact types, their validation in the contract's check order, the
// contract's typed errors and codes, UTF-8 byte ordering, the strict JSON
// input path, the blob key prefixes and the size limits.
//
// chain is a leaf: it knows nothing of storage, leases, blob bytes or the
// engine that composes them. How a checkpoint is stored is internal/meta's.
package chain

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
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

// Blob key namespaces (SPEC §6.1). A key is its namespace's prefix followed
// by 64 lowercase hex digits of the SHA-256 of the uncompressed bytes; a
// sweep lists and may delete every key under a namespace's root (SPEC §5.2).
const (
	FileRoot       = "sandbox-files/"
	ArtifactRoot   = "sandbox-artifacts/"
	FilePrefix     = FileRoot + "sha256/"
	ArtifactPrefix = ArtifactRoot + "sha256/"
)

// Checkpoint is one saved state of a thread's workspace and conversation.
// Its JSON form is wire-compatible with the TypeScript SandboxCheckpoint:
// parentCheckpointId is null for a root, createdAt is epoch milliseconds,
// and an empty Label or SourceRunID is absent.
type Checkpoint struct {
	ID       string
	ThreadID string
	// ParentID is the previous checkpoint of the chain; "" means null (a root).
	ParentID string
	// CreatedAt is epoch milliseconds, within ±(2^53−1).
	CreatedAt    int64
	Reason       Reason
	Label        string // optional; "" is absent
	SourceRunID  string // optional; "" is absent
	Files        []Entry
	Conversation []json.RawMessage // each a JSON value, stored byte for byte
	Artifacts    []Artifact
}

// Entry is one manifest entry: a regular file, an empty directory or a
// symbolic link. Which fields apply depends on Kind.
type Entry struct {
	Path string `json:"path"`
	Kind Kind   `json:"kind"`
	// BlobKey and Size apply to files only.
	BlobKey string `json:"blobKey,omitempty"`
	Size    int64  `json:"size"`
	// Executable applies to files only: restore sets mode 0755 (SPEC §10 Q5).
	Executable bool `json:"executable,omitempty"`
	// Target applies to symlinks only.
	Target string `json:"target,omitempty"`
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

// BlobRef is one line of the blob reference table: a key and how many
// checkpoints use it (always > 0).
type BlobRef struct {
	Key        string `json:"key"`
	References int64  `json:"references"`
}

// Writer identifies the holder of a thread's writer lease. Any value with
// these fields is accepted as input; it is authorised only if it matches the
// stored lease.
type Writer struct {
	ThreadID   string `json:"threadId"`
	OwnerToken string `json:"ownerToken"`
	Fence      uint64 `json:"fence"`
}

// AppendInput is the argument of Append. ExpectedHeadID "" means null (the
// thread is expected to be empty).
type AppendInput struct {
	Checkpoint     *Checkpoint
	ExpectedHeadID string
	Writer         Writer
}

// ForkInput is the argument of Fork (SPEC §3). Writer holds the lease of the
// destination thread.
type ForkInput struct {
	SourceThreadID          string
	SourceCheckpointID      string
	DestinationThreadID     string
	DestinationCheckpointID string
	CreatedAt               int64
	Writer                  Writer
}

// Clone returns a deep copy of c that shares no memory with it. Nil lists
// become empty ones, as every store returns them.
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

// BlobKeys returns the distinct blob keys of c (files and artifacts), in
// UTF-8 byte order. A key used twice in one checkpoint appears once.
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

// MarshalJSON renders the TypeScript wire shape. Messages are re-emitted
// compacted, as encoding/json does with raw JSON; the store itself keeps and
// returns them byte for byte.
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

// UnmarshalJSON decodes the wire shape and checks it as ParseCheckpoint does,
// returning the contract's error for invalid input.
func (c *Checkpoint) UnmarshalJSON(b []byte) error {
	p, err := ParseCheckpoint(b)
	if err != nil {
		return err
	}
	*c = *p
	return nil
}

// MarshalJSON renders only the fields that apply to the entry's kind: a
// file always has size (0 included), a directory has neither blobKey nor
// size, a symlink has its target.
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

// Less reports whether a sorts before b in the contract's order: UTF-8 bytes,
// shorter prefix first (SPEC §1.7). On Go strings this is plain comparison.
func Less(a, b string) bool { return strings.Compare(a, b) < 0 }
