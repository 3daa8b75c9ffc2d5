package server

import (
	"errors"
	"strconv"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/internal/wire"
	"github.com/sbxdb/sbxdb/lease"
)

// The server's side of the encodings docs/API.md draws that encoding/json
// cannot give exactly: any Go string (text), messages byte for byte
// (appendMessages, splitArray), and the checkpoints, instance records and
// leases that hold them. The client implements its side from the same
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

// stateJSON is a lease.State on the wire ("Lease state", docs/API.md); the
// owner token is never sent. Holder is null when none was recorded.
type stateJSON struct {
	LastFence uint64         `json:"lastFence"`
	Held      bool           `json:"held"`
	Fence     uint64         `json:"fence"`
	ExpiresAt int64          `json:"expiresAt"`
	Holder    *proc.Identity `json:"holder"`
}

// fromState is s's wire form, without its owner token.
func fromState(s lease.State) stateJSON {
	out := stateJSON{LastFence: s.LastFence, Held: s.Held, Fence: s.Fence, ExpiresAt: s.ExpiresAt}
	if !s.Holder.IsZero() {
		h := s.Holder
		out.Holder = &h
	}
	return out
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

// fromLease is l's wire form.
func fromLease(l *lease.Lease) leaseJSON {
	out := leaseJSON{ThreadID: text(l.ThreadID), OwnerToken: text(l.OwnerToken), Fence: l.Fence,
		ExpiresAt: l.ExpiresAt().UnixMilli(), RenewAfterMs: l.RenewAfter.Milliseconds()}
	if l.TookOver != nil {
		s := fromState(*l.TookOver)
		out.TookOver = &s
	}
	return out
}
