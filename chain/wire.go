package chain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"
)

// wireString marshals a string to JSON without losing what the strict JSON
// path (json.go) accepts: a lone surrogate, which the parser keeps as its
// WTF-8 bytes, goes back out as its \uXXXX escape, so that parsing the
// output gives the same bytes. encoding/json alone would write U+FFFD for
// each of those bytes. Other invalid UTF-8, which only
// the Go API can produce (the parser refuses text that is not UTF-8),
// becomes U+FFFD as with encoding/json.
type wireString string

func (s wireString) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(s)) {
		return json.Marshal(string(s))
	}
	out := []byte{'"'}
	flush := func(seg string) error {
		if seg == "" {
			return nil
		}
		q, err := json.Marshal(seg)
		if err != nil {
			return err
		}
		out = append(out, q[1:len(q)-1]...)
		return nil
	}
	start := 0
	for i := 0; i < len(s); {
		if r, ok := wtf8Surrogate(string(s[i:])); ok {
			if err := flush(string(s[start:i])); err != nil {
				return nil, err
			}
			out = fmt.Appendf(out, `\u%04x`, r)
			i += 3
			start = i
			continue
		}
		_, size := utf8.DecodeRuneInString(string(s[i:]))
		i += size
	}
	if err := flush(string(s[start:])); err != nil {
		return nil, err
	}
	return append(out, '"'), nil
}

// wtf8Surrogate decodes a surrogate code point encoded as three bytes
// (0xED 0xA0–0xBF 0x80–0xBF) at the start of s: the form unquote gives a
// lone surrogate.
func wtf8Surrogate(s string) (rune, bool) {
	if len(s) < 3 || s[0] != 0xED || s[1] < 0xA0 || s[1] > 0xBF || s[2]&0xC0 != 0x80 {
		return 0, false
	}
	return rune(s[0]&0x0F)<<12 | rune(s[1]&0x3F)<<6 | rune(s[2]&0x3F), true
}

// MarshalJSON renders the artifact's wire shape, strings as wireString.
func (a Artifact) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ArtifactID wireString `json:"artifactId"`
		Name       wireString `json:"name"`
		MimeType   wireString `json:"mimeType"`
		BlobKey    wireString `json:"blobKey"`
		Size       int64      `json:"size"`
		CreatedAt  int64      `json:"createdAt"`
	}{wireString(a.ArtifactID), wireString(a.Name), wireString(a.MimeType), wireString(a.BlobKey), a.Size, a.CreatedAt})
}

// MarshalJSON renders the writer's wire shape, strings as wireString.
func (w Writer) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ThreadID   wireString `json:"threadId"`
		OwnerToken wireString `json:"ownerToken"`
		Fence      uint64     `json:"fence"`
	}{wireString(w.ThreadID), wireString(w.OwnerToken), w.Fence})
}

// WireString is a request's string member (docs/API.md): lone surrogates
// survive as WTF-8; non-text decodes to NotAString, which validators refuse.
type WireString string

// NotAString is what a WireString holds when its JSON value was not text.
const NotAString = "\xffnot a string"

func (s WireString) MarshalJSON() ([]byte, error) { return wireString(s).MarshalJSON() }

func (s *WireString) UnmarshalJSON(b []byte) error {
	v, ok := unquote(bytes.TrimSpace(b))
	if !ok {
		v = NotAString
	}
	*s = WireString(v)
	return nil
}

// WireInt is a request's integer member: what is not an exact integer within
// ±MaxSafeInteger decodes to NotAnInt, which every range check refuses.
type WireInt int64

// NotAnInt is what a WireInt holds when its JSON value was not one.
const NotAnInt = math.MinInt64

func (n *WireInt) UnmarshalJSON(b []byte) error {
	v, ok := parseSafeInt(bytes.TrimSpace(b))
	if !ok {
		v = NotAnInt
	}
	*n = WireInt(v)
	return nil
}

// UnmarshalJSON never fails: a non-object or non-text threadId gives
// NotAString (INVALID_ID), a bad ownerToken or fence "" or 0 (WRITER_LOST).
func (w *Writer) UnmarshalJSON(b []byte) error {
	// The store's checks decide, in their order: an ownerToken that is not a
	// string decodes to "" and a fence that is not a safe integer ≥ 0 to 0,
	// which no lease holds.
	var o object
	if b = bytes.Trim(b, jsonSpace); !validJSON(b) || len(b) == 0 || b[0] != '{' {
		*w = Writer{ThreadID: NotAString}
		return nil
	}
	o, _ = splitObject(b, nil)
	var thread WireString
	if raw, ok := o.get("threadId"); ok {
		_ = thread.UnmarshalJSON(raw)
	}
	tok, _ := o.str("ownerToken")
	fence, ok := o.integer("fence")
	if !ok || fence < 0 {
		fence = 0
	}
	*w = Writer{ThreadID: string(thread), OwnerToken: tok, Fence: uint64(fence)}
	return nil
}
