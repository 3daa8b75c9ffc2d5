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

// WireString is a string member of a request on the wire (docs/API.md).
// It crosses JSON without loss: a lone surrogate escape is kept as its
// WTF-8 bytes when decoded and goes back out as the same escape. Decoding
// never fails: any JSON value that is not a string of UTF-8 text (a
// number, an object, null, a string holding raw invalid bytes) decodes to
// NotAString, which is not valid UTF-8. Decoding thus decides no error: the
// validators refuse what is not well-formed text, each with its own code
// and in the contract's order, exactly as for the Go API.
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

// WireInt is an integer member of a request on the wire. Decoding never
// fails: an exact integer within ±(2^53−1) decodes to itself, anything else
// (a fraction, 1e400, a string, null) to NotAnInt, which every range check
// refuses (CheckCreatedAt: INVALID_ENTRY).
type WireInt int64

// NotAnInt is what a WireInt holds when its JSON value was not a safe
// integer.
const NotAnInt = math.MinInt64

func (n *WireInt) UnmarshalJSON(b []byte) error {
	v, ok := parseSafeInt(bytes.TrimSpace(b))
	if !ok {
		v = NotAnInt
	}
	*n = WireInt(v)
	return nil
}

// UnmarshalJSON decodes {"threadId", "ownerToken", "fence"} without ever
// failing, so that the store's checks decide in their order: a thread id
// that is not text decodes to NotAString (INVALID_ID), an owner token that
// is not a string to "" and a fence that is not a non-negative safe integer
// to 0, neither of which any lease holds (WRITER_LOST). A value that is not
// an object decodes to a writer of thread NotAString.
func (w *Writer) UnmarshalJSON(b []byte) error {
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
