// Package wire is the wire of docs/API.md as the Go server, the Go client
// and the CLI write and read it, written once:
//
//   - the encodings encoding/json cannot give exactly: any Go string
//     without loss (Text), and conversation messages byte for byte
//     (AppendMessages, SplitArray);
//   - the records that hold them, in the one form both sides write and
//     read (records.go: checkpoints, instance records, writers, lease
//     states and leases, capture warnings);
//   - the X-Sbxdb-* header names (headers.go) and the metadata header's
//     encoding (metadata.go);
//   - the error body, sbxdb's SBXDB_* codes, and the one two-way table
//     between codes and errors (errors.go): Code (error → code, for a
//     server), Sentinel (code → the error a client's error matches),
//     Status (code → HTTP status).
//
// It imports the contract (the module root), chain, lease and
// internal/proc: no engine and no blob store, so that a host linking the
// client links no storage.
package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb/chain"
)

// Text is a Go string on the wire, carried without loss both ways. A string
// the strict JSON path reads back unchanged (well-formed Text, and lone
// surrogates as it keeps them, see chain.WireString) is a JSON string; any
// other Go string (invalid UTF-8, or a Surrogate pair spelt as two lone
// halves, which would come back joined) is {"bytes": "<base64>"}, which the
// server's contract decoders take for "not a string" and refuse with the
// code a malformed string gets embedded, and its instance records keep.
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
			return errors.New("a JSON string that is not Text")
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
			return fmt.Errorf("a bytes string that is not base64: %v", err)
		}
		*t = Text(p)
		return nil
	}
	return fmt.Errorf("%.40s is not a string", b)
}

// AppendText appends s as Text writes it.
func AppendText(dst []byte, s string) []byte {
	if Plain(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	if !Representable(s) {
		dst = append(dst, `{"bytes":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, []byte(s))
		return append(dst, `"}`...)
	}
	q, _ := chain.WireString(s).MarshalJSON() // cannot fail: it marshals strings
	return append(dst, q...)
}

// Plain reports whether s is printable ASCII that encoding/json writes as
// it is between quotes: no '"', '\\', and none of the <, > and & it escapes
// for HTML.
func Plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
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
		r, ok := Surrogate(s[i:])
		if !ok {
			return false
		}
		if next, ok := Surrogate(s[i+3:]); ok && r < 0xDC00 && next >= 0xDC00 {
			return false // "\uD83D\uDE00" would be read back as one rune
		}
		i += 3
	}
	return true
}

// Surrogate decodes a Surrogate code point in its three-byte form at the
// start of s.
func Surrogate(s string) (rune, bool) {
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

// SplitArray returns the Text of each element of the JSON array raw
// exactly as it is written: the bytes between '[' or ',' and the next ','
// or ']' of the array's own level, whitespace around the value included.
// An array holding only whitespace has no elements. raw must be valid JSON;
// anything but an array is an error. The elements share raw's memory but
// not its capacity.
func SplitArray(raw []byte) ([]json.RawMessage, error) {
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

// Warning is a capture warning (sbxdb.CaptureWarning) as the wire carries
// it: the path and the detail as Text, since an entry's name is bytes and
// need not be UTF-8, so that a warning reads the same through a server as
// on the files.
type Warning struct {
	Path   Text   `json:"path"`
	What   string `json:"what"`
	Detail Text   `json:"detail"`
}
