package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

// The server's side of the encodings docs/API.md draws that encoding/json
// cannot give exactly: any Go string (text), messages byte for byte
// (appendMessages, splitArray), and the checkpoints, instance records and
// leases that hold them. The client implements its side from the same
// document, sharing no code with this file.

// text is a Go string on the wire, carried without loss both ways. A string
// the strict JSON path reads back unchanged (well-formed text, and lone
// surrogates as it keeps them, see chain.WireString) is a JSON string; any
// other Go string (invalid UTF-8, or a surrogate pair spelt as two lone
// halves, which would come back joined) is {"bytes": "<base64>"}. Responses
// write every string so, and instance records are read so; the contract's
// own members are read by chain's decoders, for which such an object is
// "not a string", refused with the code a malformed string gets embedded.
type text string

// MarshalJSON writes t as a JSON string, or as {"bytes"} when no JSON
// string reads back as t.
func (t text) MarshalJSON() ([]byte, error) { return appendText(nil, string(t)), nil }

// UnmarshalJSON reads a JSON string (keeping lone surrogates) or a
// {"bytes": "<base64>"} object; anything else is an error.
func (t *text) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s chain.WireString
		_ = s.UnmarshalJSON(b)
		if s == chain.NotAString { // no string unquotes to it: it starts with a raw 0xFF
			return errors.New("a JSON string that is not text")
		}
		*t = text(s)
		return nil
	}
	var o struct {
		Bytes *string `json:"bytes"`
	}
	if len(b) > 0 && b[0] == '{' && json.Unmarshal(b, &o) == nil && o.Bytes != nil {
		p, err := base64.StdEncoding.DecodeString(*o.Bytes)
		if err != nil {
			return fmt.Errorf("a bytes string that is not base64: %v", err)
		}
		*t = text(p)
		return nil
	}
	return fmt.Errorf("%.40s is not a string", b)
}

// appendText appends s as text writes it.
func appendText(dst []byte, s string) []byte {
	if plain(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	if !representable(s) {
		dst = append(dst, `{"bytes":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, []byte(s))
		return append(dst, `"}`...)
	}
	q, _ := chain.WireString(s).MarshalJSON() // cannot fail: it marshals strings
	return append(dst, q...)
}

// plain reports whether s is printable ASCII that encoding/json writes as
// it is between quotes: no '"', '\\', and none of the <, > and & it escapes
// for HTML.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// representable reports whether a JSON string carries s exactly through
// the strict JSON path: s is well-formed UTF-8 but for lone surrogates in
// their three-byte form, no high one directly followed by a low one.
func representable(s string) bool {
	for i := 0; i < len(s); {
		if r, size := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || size > 1 {
			i += size
			continue
		}
		r, ok := surrogate(s[i:])
		if !ok {
			return false
		}
		if next, ok := surrogate(s[i+3:]); ok && r < 0xDC00 && next >= 0xDC00 {
			return false // "\uD83D\uDE00" would be read back as one rune
		}
		i += 3
	}
	return true
}

// surrogate decodes a surrogate code point in its three-byte form at the
// start of s.
func surrogate(s string) (rune, bool) {
	if len(s) < 3 || s[0] != 0xED || s[1] < 0xA0 || s[1] > 0xBF || s[2]&0xC0 != 0x80 {
		return 0, false
	}
	return rune(s[0]&0x0F)<<12 | rune(s[1]&0x3F)<<6 | rune(s[2]&0x3F), true
}

// validMessages reports whether every message is JSON, so that
// appendMessages writes a JSON array splitArray reads back exactly.
func validMessages(msgs []json.RawMessage) bool {
	for _, m := range msgs {
		if !json.Valid(m) {
			return false
		}
	}
	return true
}

// appendMessages appends msgs as a JSON array, each message's bytes as
// they are (encoding/json would compact them and escape <, > and &).
// Every message must be JSON (validMessages).
func appendMessages(dst []byte, msgs []json.RawMessage) []byte {
	dst = append(dst, '[')
	for i, m := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m...)
	}
	return append(dst, ']')
}

// splitArray returns the text of each element of the JSON array raw
// exactly as it is written: the bytes between '[' or ',' and the next ','
// or ']' of the array's own level, whitespace around the value included.
// An array holding only whitespace has no elements. raw must be valid JSON;
// anything but an array is an error. The elements share raw's memory but
// not its capacity.
func splitArray(raw []byte) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return nil, errors.New("not a JSON array")
	}
	body := raw[1 : len(raw)-1]
	out := []json.RawMessage{}
	if len(bytes.TrimSpace(body)) == 0 {
		return out, nil
	}
	depth, start, inString, escaped := 0, 0, false, false
	for i, c := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			out = append(out, body[start:i:i])
			start = i + 1
		}
	}
	return append(out, body[start:len(body):len(body)]), nil
}

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

// instanceJSON is an engine.InstanceRecord on the wire (SPEC §4), every string
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
func fromInstance(rec engine.InstanceRecord) instanceJSON {
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
func (w instanceJSON) record() (engine.InstanceRecord, error) {
	for _, m := range []struct {
		name    string
		present bool
	}{
		{"key", w.Key != nil}, {"provider", w.Provider != nil}, {"providerSandboxId", w.ProviderSandboxID != nil},
		{"threadId", w.ThreadID != nil}, {"updatedAt", w.UpdatedAt != nil},
	} {
		if !m.present {
			return engine.InstanceRecord{}, errors.New("instance record member " + m.name + " is missing")
		}
	}
	str := func(t *text) string {
		if t == nil {
			return ""
		}
		return string(*t)
	}
	return engine.InstanceRecord{
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
