package chain

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// validCases are the edges of the grammar encoding/json's Valid draws.
var validCases = []string{
	``, ` `, `0`, `-0`, `01`, `-`, `1.`, `1.0`, `.5`, `1e`, `1e+`, `1e+5`, `1E-05`, `-1.5e3`, `+1`, `0x1`,
	`1 2`, ` 1 `, "\t\r\n1\n", "\u00a01", `NaN`, `Infinity`, `true`, `tru`, `truex`, `false`, `null`, `nul`,
	`""`, `"`, `"\"`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\a"`, `"\u00e9"`, `"\u00E9"`, `"\u00g9"`, `"\u00e"`,
	`"\ud800"`, "\"\x00\"", "\"\x1f\"", "\"\x7f\"", "\"\xff\xfe\"", "\"é\"",
	`[]`, `[`, `]`, `[1,]`, `[,1]`, `[1,,2]`, `[1 2]`, `[[[]]]`, `[[]`, `[]]`, `[ ]`, `[1,[2,{"a":[3]}]]`,
	`{}`, `{`, `}`, `{"a":1}`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a" 1}`, `{"a":1 "b":2}`,
	`{"a":1,"a":2}`, `{ "a" : [ ] , "b" : { } }`, `{"a":1}}`, `{"a":{"b":{"c":null}}}`, `{1:2}`,
	`[]{}`, `{} {}`, `"a" "b"`,
}

func TestValidJSONIsEncodingJSONsValid(t *testing.T) {
	check := func(b []byte) {
		t.Helper()
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	}
	for _, s := range validCases {
		check([]byte(s))
	}
	for _, d := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			close := map[string]string{"[": "]", `{"a":`: "}"}[open]
			check([]byte(strings.Repeat(open, d) + strings.Repeat(close, d)))
			check([]byte(strings.Repeat(open, d) + "1" + strings.Repeat(close, d)))
			check([]byte(strings.Repeat(open, d-1) + "{}" + strings.Repeat(close, d-1)))
			check([]byte(strings.Repeat(open, d-1) + "[]" + strings.Repeat(close, d-1)))
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	g := &jsonGen{r: r}
	for range 3000 {
		b := bytes.Clone(g.text())
		check(b)
		// Then the same text broken: a byte changed, cut short, or a
		// byte added.
		for range 3 {
			m := bytes.Clone(b)
			switch i := r.IntN(len(m) + 1); r.IntN(3) {
			case 0:
				if i < len(m) {
					const alphabet = "\"\\{}[],: x0-.eE+tfnu\x00\x1f\x7f\xff"
					m[i] = alphabet[r.IntN(len(alphabet))]
				}
			case 1:
				m = m[:i]
			default:
				const alphabet = "\"\\{}[],: 0"
				m = append(m[:i:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, b[i:]...)...)
			}
			check(m)
		}
	}
}

// FuzzValidJSON holds validJSON to json.Valid on any input.
func FuzzValidJSON(f *testing.F) {
	for _, s := range validCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}
