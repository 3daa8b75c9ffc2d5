package wire

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
)

// EncodeMetadata is md as the value of HeaderMetadata: a JSON object, names
// in byte order, every character outside printable ASCII escaped. md's
// strings are UTF-8 (sbxdb.CheckPutObject).
func EncodeMetadata(md map[string]string) string {
	b, err := json.Marshal(md)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	var out strings.Builder
	out.Grow(len(b))
	for _, r := range string(b) {
		switch {
		case r < 0x7f:
			out.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	return out.String()
}

// DecodeMetadata reads the value of HeaderMetadata: a JSON object whose
// members are strings. A lone surrogate escape, which no UTF-8 string
// holds, is refused rather than replaced.
func DecodeMetadata(v string) (map[string]string, error) {
	v = strings.TrimSpace(v)
	if !strings.HasPrefix(v, "{") {
		return nil, fmt.Errorf("%s is not a JSON object", HeaderMetadata)
	}
	if loneSurrogateEscape(v) {
		return nil, fmt.Errorf("%s holds a lone surrogate escape", HeaderMetadata)
	}
	var md map[string]string
	dec := json.NewDecoder(strings.NewReader(v))
	if err := dec.Decode(&md); err != nil {
		return nil, fmt.Errorf("%s: want a JSON object of strings: %v", HeaderMetadata, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: text after the JSON object", HeaderMetadata)
	}
	if len(md) == 0 {
		md = nil
	}
	return md, nil
}

// loneSurrogateEscape reports whether the JSON text s holds a \uXXXX
// escape of a surrogate that is not a high one directly followed by the
// escape of a low one.
func loneSurrogateEscape(s string) bool {
	esc := func(i int) (rune, bool) { // the escape \uXXXX at s[i:], if any
		if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(s[i+2:i+6], 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		r, ok := esc(i)
		if !ok {
			i++ // an escape of one character (\\, \", …)
			continue
		}
		switch {
		case r >= 0xd800 && r < 0xdc00:
			if lo, ok := esc(i + 6); !ok || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 11
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		default:
			i += 5
		}
	}
	return false
}
