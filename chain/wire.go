package chain

import (
	"encoding/json"
	"fmt"
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
