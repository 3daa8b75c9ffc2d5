// Package wire encodes and decodes the values of sbxdb's HTTP API
// (docs/API.md) that encoding/json cannot carry exactly: any Go string,
// conversation and transcript messages byte for byte, and the checkpoints,
// instance records and leases that hold them. The server and the Go client
// share it, so that what one writes the other reads back unchanged.
package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb/chain"
)

// Text is a Go string on the wire, carried without loss both ways. A string
// the strict JSON path reads back unchanged (well-formed text, and lone
// surrogates as it keeps them, see chain.WireString) is a JSON string; any
// other Go string (invalid UTF-8, or a surrogate pair spelt as two lone
// halves, which would come back joined) is {"bytes": "<base64>"}, which the
// contract's decoders take for "not a string" and refuse with the code a
// malformed string gets embedded.
type Text string

// MarshalJSON writes t as a JSON string, or as {"bytes"} when no JSON
// string reads back as t.
func (t Text) MarshalJSON() ([]byte, error) { return AppendText(nil, string(t)), nil }

// UnmarshalJSON reads a JSON string (keeping lone surrogates) or a
// {"bytes": "<base64>"} object; anything else is an error.
func (t *Text) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s chain.WireString
		_ = s.UnmarshalJSON(b)
		if s == chain.NotAString { // no string unquotes to it: it starts with a raw 0xFF
			return errors.New("wire: a JSON string that is not text")
		}
		*t = Text(s)
		return nil
	}
	var o struct {
		Bytes *string `json:"bytes"`
	}
	if len(b) > 0 && b[0] == '{' && json.Unmarshal(b, &o) == nil && o.Bytes != nil {
		p, err := base64.StdEncoding.DecodeString(*o.Bytes)
		if err != nil {
			return fmt.Errorf("wire: a bytes string that is not base64: %v", err)
		}
		*t = Text(p)
		return nil
	}
	return fmt.Errorf("wire: %.40s is not a string", b)
}

// AppendText appends s as Text writes it.
func AppendText(dst []byte, s string) []byte {
	if !Representable(s) {
		dst = append(dst, `{"bytes":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, []byte(s))
		return append(dst, `"}`...)
	}
	q, _ := chain.WireString(s).MarshalJSON() // cannot fail: it marshals strings
	return append(dst, q...)
}

// Representable reports whether a JSON string carries s exactly through
// the strict JSON path: s is well-formed UTF-8 but for lone surrogates in
// their three-byte form, no high one directly followed by a low one.
func Representable(s string) bool {
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

// ValidMessages reports whether every message is JSON, so that
// AppendMessages writes a JSON array SplitArray reads back exactly.
func ValidMessages(msgs []json.RawMessage) bool {
	for _, m := range msgs {
		if !json.Valid(m) {
			return false
		}
	}
	return true
}

// AppendMessages appends msgs as a JSON array, each message's bytes as
// they are (encoding/json would compact them and escape <, > and &).
// Every message must be JSON (ValidMessages).
func AppendMessages(dst []byte, msgs []json.RawMessage) []byte {
	dst = append(dst, '[')
	for i, m := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m...)
	}
	return append(dst, ']')
}

// SplitArray returns the text of each element of the JSON array raw
// exactly as it is written: the bytes between '[' or ',' and the next ','
// or ']' of the array's own level, whitespace around the value included.
// An array holding only whitespace has no elements. raw must be valid JSON;
// anything but an array is an error. The elements share raw's memory but
// not its capacity.
func SplitArray(raw []byte) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return nil, errors.New("wire: not a JSON array")
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

// AppendCheckpoint appends cp's wire form: the JSON shape of
// chain.Checkpoint (SPEC §1.1) with every string a Text and every message
// as its bytes are. An entry carries each field that is set and those its
// kind requires, so that an entry the validators refuse is still refused
// after the trip. A conversation holding a message that is not JSON is
// written as null, which the strict JSON path refuses as INVALID_ENTRY,
// the code the validators give the message.
func AppendCheckpoint(dst []byte, cp *chain.Checkpoint) []byte {
	if cp == nil {
		return append(dst, "null"...)
	}
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
		return nil, fmt.Errorf("wire: decoding a checkpoint: %w", err)
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
		return nil, fmt.Errorf("wire: decoding the conversation of checkpoint %q: %w", cp.ID, err)
	}
	cp.Conversation = msgs
	return cp, nil
}
