package client

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
	"github.com/sbxdb/sbxdb/internal/wire"
	"github.com/sbxdb/sbxdb/lease"
)

// The client's side of the encodings docs/API.md draws that encoding/json
// cannot give exactly: any Go string (text), messages byte for byte
// (appendMessages, splitArray), and the checkpoints, instance records and
// leases that hold them. The server implements its side from the same
// document, sharing with this file only internal/wire.

// The lossless string and the byte-exact messages are internal/wire's,
// shared with the other side of the wire, as is a capture warning.
type (
	text    = wire.Text
	warning = wire.Warning
)

var (
	appendText     = wire.AppendText
	plain          = wire.Plain
	representable  = wire.Representable
	validMessages  = wire.ValidMessages
	appendMessages = wire.AppendMessages
	splitArray     = wire.SplitArray
)

// appendCheckpoint appends cp's wire form: the JSON shape of
// chain.Checkpoint (SPEC §1.1) with every string a text (any Go string) and every message
// as its bytes are. An entry carries each field that is set and those its
// kind requires, so that an entry the validators refuse is still refused
// after the trip. A conversation holding a message that is not JSON is
// written as null, which the strict JSON path refuses as INVALID_ENTRY,
// the code the validators give the message.
func appendCheckpoint(dst []byte, cp *chain.Checkpoint) []byte {
	if cp == nil {
		return append(dst, "null"...)
	}
	dst = slices.Grow(dst, checkpointSize(cp))
	dst = append(dst, `{"id":`...)
	dst = appendText(dst, cp.ID)
	dst = append(dst, `,"threadId":`...)
	dst = appendText(dst, cp.ThreadID)
	dst = append(dst, `,"parentCheckpointId":`...)
	if cp.ParentID == "" {
		dst = append(dst, "null"...)
	} else {
		dst = appendText(dst, cp.ParentID)
	}
	dst = append(dst, `,"createdAt":`...)
	dst = strconv.AppendInt(dst, cp.CreatedAt, 10)
	dst = append(dst, `,"reason":`...)
	dst = appendText(dst, string(cp.Reason))
	if cp.Label != "" {
		dst = append(dst, `,"label":`...)
		dst = appendText(dst, cp.Label)
	}
	if cp.SourceRunID != "" {
		dst = append(dst, `,"sourceRunId":`...)
		dst = appendText(dst, cp.SourceRunID)
	}
	dst = append(dst, `,"files":[`...)
	for i := range cp.Files {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendEntry(dst, &cp.Files[i])
	}
	dst = append(dst, `],"conversation":`...)
	if validMessages(cp.Conversation) {
		dst = appendMessages(dst, cp.Conversation)
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
	dst = appendText(dst, e.Path)
	dst = append(dst, `,"kind":`...)
	dst = appendText(dst, string(e.Kind))
	if e.Kind == chain.KindFile || e.BlobKey != "" {
		dst = append(dst, `,"blobKey":`...)
		dst = appendText(dst, e.BlobKey)
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
		dst = appendText(dst, e.Target)
	}
	return append(dst, '}')
}

func appendArtifact(dst []byte, a *chain.Artifact) []byte {
	dst = append(dst, `{"artifactId":`...)
	dst = appendText(dst, a.ArtifactID)
	dst = append(dst, `,"name":`...)
	dst = appendText(dst, a.Name)
	dst = append(dst, `,"mimeType":`...)
	dst = appendText(dst, a.MimeType)
	dst = append(dst, `,"blobKey":`...)
	dst = appendText(dst, a.BlobKey)
	dst = append(dst, `,"size":`...)
	dst = strconv.AppendInt(dst, a.Size, 10)
	dst = append(dst, `,"createdAt":`...)
	dst = strconv.AppendInt(dst, a.CreatedAt, 10)
	return append(dst, '}')
}

// instanceJSON is an sbxdb.InstanceRecord on the wire (SPEC §4), every string
// a text (any Go string): the instance store takes any string, so a record must cross
// unchanged whatever it holds. A required member that is absent or null
// decodes to nil, which record refuses; an optional one (latestSnapshotId,
// latestRunId) is "" then, as in the record.
type instanceJSON struct {
	Key               *text  `json:"key"`
	Provider          *text  `json:"provider"`
	ProviderSandboxID *text  `json:"providerSandboxId"`
	LatestSnapshotID  *text  `json:"latestSnapshotId,omitempty"`
	ThreadID          *text  `json:"threadId"`
	LatestRunID       *text  `json:"latestRunId,omitempty"`
	UpdatedAt         *int64 `json:"updatedAt"`
}

// fromInstance is rec's wire form; an empty optional field is absent.
func fromInstance(rec sbxdb.InstanceRecord) instanceJSON {
	some := func(s string) *text { t := text(s); return &t }
	optional := func(s string) *text {
		if s == "" {
			return nil
		}
		return some(s)
	}
	return instanceJSON{
		Key: some(rec.Key), Provider: some(rec.Provider), ProviderSandboxID: some(rec.ProviderSandboxID),
		LatestSnapshotID: optional(rec.LatestSnapshotID), ThreadID: some(rec.ThreadID),
		LatestRunID: optional(rec.LatestRunID), UpdatedAt: &rec.UpdatedAt,
	}
}

// record returns the record w names, or an error naming the first
// required member it lacks.
func (w instanceJSON) record() (sbxdb.InstanceRecord, error) {
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
	str := func(t *text) string {
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

// checkpointJSON is what decodeCheckpoint reads.
type checkpointJSON struct {
	ID           text            `json:"id"`
	ThreadID     text            `json:"threadId"`
	ParentID     *text           `json:"parentCheckpointId"`
	CreatedAt    int64           `json:"createdAt"`
	Reason       text            `json:"reason"`
	Label        text            `json:"label"`
	SourceRunID  text            `json:"sourceRunId"`
	Files        []entryJSON     `json:"files"`
	Conversation json.RawMessage `json:"conversation"`
	Artifacts    []artifactJSON  `json:"artifacts"`
}

type entryJSON struct {
	Path       text  `json:"path"`
	Kind       text  `json:"kind"`
	BlobKey    text  `json:"blobKey"`
	Size       int64 `json:"size"`
	Executable bool  `json:"executable"`
	Target     text  `json:"target"`
}

type artifactJSON struct {
	ArtifactID text  `json:"artifactId"`
	Name       text  `json:"name"`
	MimeType   text  `json:"mimeType"`
	BlobKey    text  `json:"blobKey"`
	Size       int64 `json:"size"`
	CreatedAt  int64 `json:"createdAt"`
}

// decodeCheckpoint reads what appendCheckpoint wrote, without validating
// it (a client returns what the store holds); null is nil. Messages come
// back byte for byte.
func decodeCheckpoint(raw []byte) (*chain.Checkpoint, error) {
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
	msgs, err := splitArray(w.Conversation)
	if err != nil {
		return nil, fmt.Errorf("decoding the conversation of checkpoint %q: %w", cp.ID, err)
	}
	cp.Conversation = msgs
	return cp, nil
}

// writerJSON is a chain.Writer as a request carries it; the server reads
// it with chain.Writer's own decoder.
type writerJSON struct {
	ThreadID   text   `json:"threadId"`
	OwnerToken text   `json:"ownerToken"`
	Fence      uint64 `json:"fence"`
}

// appendWriter appends w's wire form (fromWriter) as json.Marshal writes
// it.
func appendWriter(dst []byte, w chain.Writer) []byte {
	wj := fromWriter(w)
	dst = append(dst, `{"threadId":`...)
	dst = appendText(dst, string(wj.ThreadID))
	dst = append(dst, `,"ownerToken":`...)
	dst = appendText(dst, string(wj.OwnerToken))
	dst = append(dst, `,"fence":`...)
	dst = strconv.AppendUint(dst, wj.Fence, 10)
	return append(dst, '}')
}

// fromWriter is w's wire form. An owner token no JSON string carries, or a
// fence past 2^53−1, can match no lease (tokens are UUIDs, fences count up
// from 1); they travel as "" and 0, which match none either, so every store
// check decides as it would for w.
func fromWriter(w chain.Writer) writerJSON {
	out := writerJSON{ThreadID: text(w.ThreadID), OwnerToken: text(w.OwnerToken), Fence: w.Fence}
	if !representable(w.OwnerToken) {
		out.OwnerToken = ""
	}
	if w.Fence > chain.MaxSafeInteger {
		out.Fence = 0
	}
	return out
}

// stateJSON is a lease.State on the wire ("Lease state", docs/API.md); the
// owner token is never sent. Holder is null when none was recorded.
type stateJSON struct {
	LastFence uint64      `json:"lastFence"`
	Held      bool        `json:"held"`
	Fence     uint64      `json:"fence"`
	ExpiresAt int64       `json:"expiresAt"`
	Holder    *holderJSON `json:"holder"`
}

// state returns the lease.State w names (OwnerToken "").
func (w stateJSON) state() lease.State {
	s := lease.State{LastFence: w.LastFence, Held: w.Held, Fence: w.Fence, ExpiresAt: w.ExpiresAt}
	if h := w.Holder; h != nil {
		s.Holder.Host, s.Holder.Boot, s.Holder.NS, s.Holder.PID, s.Holder.Start = h.Host, h.Boot, h.NS, h.PID, h.Start
	}
	return s
}

// holderJSON is the process holding a lease: {"host", "boot", "ns", "pid",
// "start"}, as lease.State's Holder.
type holderJSON struct {
	Host  string `json:"host"`
	Boot  string `json:"boot"`
	NS    string `json:"ns"`
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// leaseJSON is a granted lease on the wire: its writer, expiry (epoch ms), the
// store's renewal cadence and, after a takeover, the lease it replaced.
type leaseJSON struct {
	ThreadID     text       `json:"threadId"`
	OwnerToken   text       `json:"ownerToken"`
	Fence        uint64     `json:"fence"`
	ExpiresAt    int64      `json:"expiresAt"`
	RenewAfterMs int64      `json:"renewAfterMs"`
	TookOver     *stateJSON `json:"tookOver,omitempty"`
}

// handle returns the lease handle w describes, renewed and released
// through b.
func (w leaseJSON) handle(b lease.Backend) *lease.Lease {
	l := lease.New(lease.Writer{ThreadID: string(w.ThreadID), OwnerToken: string(w.OwnerToken), Fence: w.Fence},
		time.UnixMilli(w.ExpiresAt), time.Duration(w.RenewAfterMs)*time.Millisecond, b)
	if w.TookOver != nil {
		s := w.TookOver.state()
		l.TookOver = &s
	}
	return l
}
