package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

// The records of docs/API.md that hold Text and messages, in the one form
// both sides write and read: checkpoints (written byte by byte, messages
// as they are), instance records, writers, lease states and granted
// leases.

// AppendCheckpoint appends cp's wire form: the JSON shape of
// chain.Checkpoint (SPEC §1.1) with every string a Text (any Go string) and every message
// as its bytes are. An entry carries each field that is set and those its
// kind requires, so that an entry the validators refuse is still refused
// after the trip. A conversation holding a message that is not JSON is
// written as null, which the strict JSON path refuses as INVALID_ENTRY,
// the code the validators give the message.
func AppendCheckpoint(dst []byte, cp *chain.Checkpoint) []byte {
	if cp == nil {
		return append(dst, "null"...)
	}
	dst = slices.Grow(dst, checkpointSize(cp))
	dst = append(dst, `{"id":`...)
	dst = AppendText(dst, cp.ID)
	dst = append(dst, `,"threadId":`...)
	dst = AppendText(dst, cp.ThreadID)
	dst = append(dst, `,"parentCheckpointId":`...)
	if cp.ParentID == "" {
		dst = append(dst, "null"...)
	} else {
		dst = AppendText(dst, cp.ParentID)
	}
	dst = append(dst, `,"createdAt":`...)
	dst = strconv.AppendInt(dst, cp.CreatedAt, 10)
	dst = append(dst, `,"reason":`...)
	dst = AppendText(dst, string(cp.Reason))
	if cp.Label != "" {
		dst = append(dst, `,"label":`...)
		dst = AppendText(dst, cp.Label)
	}
	if cp.SourceRunID != "" {
		dst = append(dst, `,"sourceRunId":`...)
		dst = AppendText(dst, cp.SourceRunID)
	}
	dst = append(dst, `,"files":[`...)
	for i := range cp.Files {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendEntry(dst, &cp.Files[i])
	}
	dst = append(dst, `],"conversation":`...)
	if ValidMessages(cp.Conversation) {
		dst = AppendMessages(dst, cp.Conversation)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"artifacts":[`...)
	for i := range cp.Artifacts {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendArtifact(dst, &cp.Artifacts[i])
	}
	return append(dst, "]}"...)
}

// checkpointSize is about the length of cp's wire form: enough when
// every string is plain.
func checkpointSize(cp *chain.Checkpoint) int {
	n := 256 + len(cp.ID) + len(cp.ThreadID) + len(cp.ParentID) + len(cp.Label) + len(cp.SourceRunID)
	for i := range cp.Files {
		f := &cp.Files[i]
		n += 96 + len(f.Path) + len(f.BlobKey) + len(f.Target)
	}
	for _, m := range cp.Conversation {
		n += 1 + len(m)
	}
	for i := range cp.Artifacts {
		a := &cp.Artifacts[i]
		n += 128 + len(a.ArtifactID) + len(a.Name) + len(a.MimeType) + len(a.BlobKey)
	}
	return n
}

func appendEntry(dst []byte, e *chain.Entry) []byte {
	dst = append(dst, `{"path":`...)
	dst = AppendText(dst, e.Path)
	dst = append(dst, `,"kind":`...)
	dst = AppendText(dst, string(e.Kind))
	if e.Kind == chain.KindFile || e.BlobKey != "" {
		dst = append(dst, `,"blobKey":`...)
		dst = AppendText(dst, e.BlobKey)
	}
	if e.Kind == chain.KindFile || e.Size != 0 {
		dst = append(dst, `,"size":`...)
		dst = strconv.AppendInt(dst, e.Size, 10)
	}
	if e.Executable {
		dst = append(dst, `,"executable":true`...)
	}
	if e.Kind == chain.KindSymlink || e.Target != "" {
		dst = append(dst, `,"target":`...)
		dst = AppendText(dst, e.Target)
	}
	return append(dst, '}')
}

func appendArtifact(dst []byte, a *chain.Artifact) []byte {
	dst = append(dst, `{"artifactId":`...)
	dst = AppendText(dst, a.ArtifactID)
	dst = append(dst, `,"name":`...)
	dst = AppendText(dst, a.Name)
	dst = append(dst, `,"mimeType":`...)
	dst = AppendText(dst, a.MimeType)
	dst = append(dst, `,"blobKey":`...)
	dst = AppendText(dst, a.BlobKey)
	dst = append(dst, `,"size":`...)
	dst = strconv.AppendInt(dst, a.Size, 10)
	dst = append(dst, `,"createdAt":`...)
	dst = strconv.AppendInt(dst, a.CreatedAt, 10)
	return append(dst, '}')
}

// Instance is an sbxdb.InstanceRecord on the wire (SPEC §4), every string
// a Text (any Go string): the instance store takes any string, so a record must cross
// unchanged whatever it holds. A required member that is absent or null
// decodes to nil, which record refuses; an optional one (latestSnapshotId,
// latestRunId) is "" then, as in the record.
type Instance struct {
	Key               *Text  `json:"key"`
	Provider          *Text  `json:"provider"`
	ProviderSandboxID *Text  `json:"providerSandboxId"`
	LatestSnapshotID  *Text  `json:"latestSnapshotId,omitempty"`
	ThreadID          *Text  `json:"threadId"`
	LatestRunID       *Text  `json:"latestRunId,omitempty"`
	UpdatedAt         *int64 `json:"updatedAt"`
}

// FromInstance is rec's wire form; an empty optional field is absent.
func FromInstance(rec sbxdb.InstanceRecord) Instance {
	some := func(s string) *Text { t := Text(s); return &t }
	optional := func(s string) *Text {
		if s == "" {
			return nil
		}
		return some(s)
	}
	return Instance{
		Key: some(rec.Key), Provider: some(rec.Provider), ProviderSandboxID: some(rec.ProviderSandboxID),
		LatestSnapshotID: optional(rec.LatestSnapshotID), ThreadID: some(rec.ThreadID),
		LatestRunID: optional(rec.LatestRunID), UpdatedAt: &rec.UpdatedAt,
	}
}

// Record returns the record w names, or an error naming the first
// required member it lacks.
func (w Instance) Record() (sbxdb.InstanceRecord, error) {
	for _, m := range []struct {
		name    string
		present bool
	}{
		{"key", w.Key != nil}, {"provider", w.Provider != nil}, {"providerSandboxId", w.ProviderSandboxID != nil},
		{"threadId", w.ThreadID != nil}, {"updatedAt", w.UpdatedAt != nil},
	} {
		if !m.present {
			return sbxdb.InstanceRecord{}, errors.New("instance record member " + m.name + " is missing")
		}
	}
	str := func(t *Text) string {
		if t == nil {
			return ""
		}
		return string(*t)
	}
	return sbxdb.InstanceRecord{
		Key: str(w.Key), Provider: str(w.Provider), ProviderSandboxID: str(w.ProviderSandboxID),
		LatestSnapshotID: str(w.LatestSnapshotID), ThreadID: str(w.ThreadID),
		LatestRunID: str(w.LatestRunID), UpdatedAt: *w.UpdatedAt,
	}, nil
}

// checkpointJSON is what DecodeCheckpoint reads.
type checkpointJSON struct {
	ID           Text            `json:"id"`
	ThreadID     Text            `json:"threadId"`
	ParentID     *Text           `json:"parentCheckpointId"`
	CreatedAt    int64           `json:"createdAt"`
	Reason       Text            `json:"reason"`
	Label        Text            `json:"label"`
	SourceRunID  Text            `json:"sourceRunId"`
	Files        []entryJSON     `json:"files"`
	Conversation json.RawMessage `json:"conversation"`
	Artifacts    []artifactJSON  `json:"artifacts"`
}

type entryJSON struct {
	Path       Text  `json:"path"`
	Kind       Text  `json:"kind"`
	BlobKey    Text  `json:"blobKey"`
	Size       int64 `json:"size"`
	Executable bool  `json:"executable"`
	Target     Text  `json:"target"`
}

type artifactJSON struct {
	ArtifactID Text  `json:"artifactId"`
	Name       Text  `json:"name"`
	MimeType   Text  `json:"mimeType"`
	BlobKey    Text  `json:"blobKey"`
	Size       int64 `json:"size"`
	CreatedAt  int64 `json:"createdAt"`
}

// DecodeCheckpoint reads what AppendCheckpoint wrote, without validating
// it (a client returns what the store holds); null is nil. Messages come
// back byte for byte.
func DecodeCheckpoint(raw []byte) (*chain.Checkpoint, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var w checkpointJSON
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("decoding a checkpoint: %w", err)
	}
	cp := &chain.Checkpoint{
		ID: string(w.ID), ThreadID: string(w.ThreadID), CreatedAt: w.CreatedAt,
		Reason: chain.Reason(w.Reason), Label: string(w.Label), SourceRunID: string(w.SourceRunID),
		Files: make([]chain.Entry, len(w.Files)), Artifacts: make([]chain.Artifact, len(w.Artifacts)),
	}
	if w.ParentID != nil {
		cp.ParentID = string(*w.ParentID)
	}
	for i, e := range w.Files {
		cp.Files[i] = chain.Entry{Path: string(e.Path), Kind: chain.Kind(e.Kind), BlobKey: string(e.BlobKey),
			Size: e.Size, Executable: e.Executable, Target: string(e.Target)}
	}
	for i, a := range w.Artifacts {
		cp.Artifacts[i] = chain.Artifact{ArtifactID: string(a.ArtifactID), Name: string(a.Name), MimeType: string(a.MimeType),
			BlobKey: string(a.BlobKey), Size: a.Size, CreatedAt: a.CreatedAt}
	}
	msgs, err := SplitArray(w.Conversation)
	if err != nil {
		return nil, fmt.Errorf("decoding the conversation of checkpoint %q: %w", cp.ID, err)
	}
	cp.Conversation = msgs
	return cp, nil
}

// Writer is a chain.Writer as a request carries it; the server reads
// it with chain.Writer's own decoder.
type Writer struct {
	ThreadID   Text   `json:"threadId"`
	OwnerToken Text   `json:"ownerToken"`
	Fence      uint64 `json:"fence"`
}

// AppendWriter appends w's wire form (FromWriter) as json.Marshal writes
// it.
func AppendWriter(dst []byte, w chain.Writer) []byte {
	wj := FromWriter(w)
	dst = append(dst, `{"threadId":`...)
	dst = AppendText(dst, string(wj.ThreadID))
	dst = append(dst, `,"ownerToken":`...)
	dst = AppendText(dst, string(wj.OwnerToken))
	dst = append(dst, `,"fence":`...)
	dst = strconv.AppendUint(dst, wj.Fence, 10)
	return append(dst, '}')
}

// FromWriter is w's wire form. An owner token no JSON string carries, or a
// fence past 2^53−1, can match no lease (tokens are UUIDs, fences count up
// from 1); they travel as "" and 0, which match none either, so every store
// check decides as it would for w.
func FromWriter(w chain.Writer) Writer {
	out := Writer{ThreadID: Text(w.ThreadID), OwnerToken: Text(w.OwnerToken), Fence: w.Fence}
	if !Representable(w.OwnerToken) {
		out.OwnerToken = ""
	}
	if w.Fence > chain.MaxSafeInteger {
		out.Fence = 0
	}
	return out
}

// State is a lease.State on the wire ("Lease state", docs/API.md); the
// owner token is never sent. Holder is null when none was recorded.
type State struct {
	LastFence uint64         `json:"lastFence"`
	Held      bool           `json:"held"`
	Fence     uint64         `json:"fence"`
	ExpiresAt int64          `json:"expiresAt"`
	Holder    *proc.Identity `json:"holder"`
}

// FromState is s's wire form, without its owner token.
func FromState(s lease.State) State {
	out := State{LastFence: s.LastFence, Held: s.Held, Fence: s.Fence, ExpiresAt: s.ExpiresAt}
	if !s.Holder.IsZero() {
		h := s.Holder
		out.Holder = &h
	}
	return out
}

// LeaseState returns the lease.State w names (OwnerToken "").
func (w State) LeaseState() lease.State {
	s := lease.State{LastFence: w.LastFence, Held: w.Held, Fence: w.Fence, ExpiresAt: w.ExpiresAt}
	if w.Holder != nil {
		s.Holder = *w.Holder
	}
	return s
}

// Lease is a granted lease on the wire: its writer, expiry (epoch ms), the
// store's renewal cadence and, after a takeover, the lease it replaced.
type Lease struct {
	ThreadID     Text   `json:"threadId"`
	OwnerToken   Text   `json:"ownerToken"`
	Fence        uint64 `json:"fence"`
	ExpiresAt    int64  `json:"expiresAt"`
	RenewAfterMs int64  `json:"renewAfterMs"`
	TookOver     *State `json:"tookOver,omitempty"`
}

// FromLease is l's wire form.
func FromLease(l *lease.Lease) Lease {
	out := Lease{ThreadID: Text(l.ThreadID), OwnerToken: Text(l.OwnerToken), Fence: l.Fence,
		ExpiresAt: l.ExpiresAt().UnixMilli(), RenewAfterMs: l.RenewAfter.Milliseconds()}
	if l.TookOver != nil {
		s := FromState(*l.TookOver)
		out.TookOver = &s
	}
	return out
}

// Handle returns the lease handle w describes, renewed and released
// through b.
func (w Lease) Handle(b lease.Backend) *lease.Lease {
	l := lease.New(lease.Writer{ThreadID: string(w.ThreadID), OwnerToken: string(w.OwnerToken), Fence: w.Fence},
		time.UnixMilli(w.ExpiresAt), time.Duration(w.RenewAfterMs)*time.Millisecond, b)
	if w.TookOver != nil {
		s := w.TookOver.LeaseState()
		l.TookOver = &s
	}
	return l
}

// Warnings is a capture's warnings as the wire carries them; never nil,
// so that the JSON holds an array.
func Warnings(ws []sbxdb.CaptureWarning) []Warning {
	out := make([]Warning, len(ws))
	for i, w := range ws {
		out[i] = Warning{Path: Text(w.Path), What: string(w.What), Detail: Text(w.Detail)}
	}
	return out
}

// CaptureWarnings is the engine's form of a capture's warnings off the
// wire; nil for none.
func CaptureWarnings(ws []Warning) []sbxdb.CaptureWarning {
	var out []sbxdb.CaptureWarning
	for _, w := range ws {
		out = append(out, sbxdb.CaptureWarning{Path: string(w.Path), What: sbxdb.EntryChange(w.What), Detail: string(w.Detail)})
	}
	return out
}
