package chain

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
)

// The strict JSON path reads the members of a text it validated once with
// its own splitter. These tests hold it to the reference (json_ref_test.go),
// which decodes every level with encoding/json: the same values, or the
// same error with the same code and message, for every input.

// refExactMessages is how a server first found each message's exact text:
// the last "conversation" member of the last "checkpoint" member, split
// at its own level. It gives parsed unless that text holds the same values.
func refExactMessages(body []byte, parsed []json.RawMessage) []json.RawMessage {
	var top, cp map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || json.Unmarshal(top["checkpoint"], &cp) != nil {
		return parsed
	}
	raw := bytes.TrimSpace(cp["conversation"])
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return parsed
	}
	body = raw[1 : len(raw)-1]
	exact := []json.RawMessage{}
	if len(bytes.TrimSpace(body)) > 0 {
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
				exact = append(exact, body[start:i:i])
				start = i + 1
			}
		}
		exact = append(exact, body[start:len(body):len(body)])
	}
	if len(exact) != len(parsed) {
		return parsed
	}
	for i, m := range exact {
		if !bytes.Equal(bytes.Trim(m, " \t\r\n"), parsed[i]) {
			return parsed
		}
	}
	return exact
}

// refWriter is Writer.UnmarshalJSON on encoding/json's map decoding.
func refWriter(b []byte) Writer {
	var o refObject
	if json.Unmarshal(b, &o) != nil || o == nil {
		return Writer{ThreadID: NotAString}
	}
	var thread WireString
	if raw, ok := o["threadId"]; ok {
		_ = thread.UnmarshalJSON(raw)
	}
	tok, _ := o.str("ownerToken")
	fence, ok := o.integer("fence")
	if !ok || fence < 0 {
		fence = 0
	}
	return Writer{ThreadID: string(thread), OwnerToken: tok, Fence: uint64(fence)}
}

// sameError reports how got and want differ, or "".
func sameError(got, want error) string {
	switch {
	case got == nil && want == nil:
		return ""
	case got == nil || want == nil:
		return "got " + errString(got) + ", want " + errString(want)
	case Code(got) != Code(want) || got.Error() != want.Error():
		return "got " + Code(got) + " " + got.Error() + ", want " + Code(want) + " " + want.Error()
	}
	for _, s := range []error{ErrInvalidID, ErrInvalidEntry, ErrWriterLost, ErrTooLarge} {
		if errors.Is(got, s) != errors.Is(want, s) {
			return "errors.Is differs for " + s.Error()
		}
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// checkAgainstReference compares every entry point of the strict path
// with the reference on data.
func checkAgainstReference(t *testing.T, data []byte) {
	t.Helper()
	cp, err := ParseCheckpoint(data)
	rcp, rerr := refParseCheckpoint(data)
	if d := sameError(err, rerr); d != "" {
		t.Fatalf("ParseCheckpoint(%q): %s", data, d)
	}
	if err == nil && !reflect.DeepEqual(cp, rcp) {
		t.Fatalf("ParseCheckpoint(%q):\n got %#v\nwant %#v", data, cp, rcp)
	}

	in, err := ParseAppendInput(data)
	rin, rerr := refParseAppendInput(data)
	if d := sameError(err, rerr); d != "" {
		t.Fatalf("ParseAppendInput(%q): %s", data, d)
	}
	if err == nil && !reflect.DeepEqual(in, rin) {
		t.Fatalf("ParseAppendInput(%q):\n got %#v\nwant %#v", data, in, rin)
	}

	ex, err := ParseAppendInputExact(data)
	if d := sameError(err, rerr); d != "" {
		t.Fatalf("ParseAppendInputExact(%q): %s", data, d)
	}
	if err == nil {
		rin.Checkpoint.Conversation = refExactMessages(bytes.TrimSpace(data), rin.Checkpoint.Conversation)
		if !reflect.DeepEqual(ex, rin) {
			t.Fatalf("ParseAppendInputExact(%q):\n got %#v\nwant %#v", data, ex, rin)
		}
	}

	var w Writer
	if err := w.UnmarshalJSON(data); err != nil {
		t.Fatalf("Writer.UnmarshalJSON(%q): %v", data, err)
	}
	if rw := refWriter(data); w != rw {
		t.Fatalf("Writer.UnmarshalJSON(%q) = %+v, want %+v", data, w, rw)
	}
}

// jsonGen writes random JSON texts shaped like append inputs, with what
// a strict reader must get right: member names spelt with escapes or given
// twice, whitespace anywhere, strings with escaped quotes and backslashes,
// lone surrogates and raw invalid bytes, values of the wrong type, and
// sometimes a broken byte.
type jsonGen struct {
	r *rand.Rand
	b []byte
}

func (g *jsonGen) ws() {
	for g.r.IntN(4) == 0 {
		g.b = append(g.b, " \t\r\n"[g.r.IntN(4)])
	}
}

func (g *jsonGen) name(n string) {
	switch g.r.IntN(120) {
	case 0:
		n = `\u00` + string("0123456789abcdef"[n[0]>>4]) + string("0123456789ABCDEF"[n[0]&15]) + n[1:]
	case 1:
		n = strings.ToUpper(n[:1]) + n[1:]
	case 2:
		n += `\u0000`
	case 3:
		n = "\xff" + n
	}
	g.b = append(append(append(g.b, '"'), n...), '"')
}

var genStrings = []string{
	`a`, `x/y`, `file.go`, `\"`, `\\`, `a\\\"b`, `\\\\`, `\ud800`, `\udfff`, `\ud83d\ude00`, `\u00e9`,
	"\xff", "é", `\n\t`, ``, `automatic`, `named`, `fork-root`, `file`, `dir`, `symlink`,
	`sandbox-files/sha256/0000000000000000000000000000000000000000000000000000000000000001`,
	`sandbox-artifacts/sha256/0000000000000000000000000000000000000000000000000000000000000002`,
	`]`, `}`, `,`, `[{`, `\/`,
}

var genNumbers = []string{`0`, `1`, `-1`, `1.0`, `1.5`, `1e3`, `1E+2`, `-0`, `9007199254740991`, `9007199254740992`, `1e400`, `100e-2`}

func (g *jsonGen) scalar() {
	switch g.r.IntN(8) {
	case 0, 1, 2:
		g.b = append(append(append(g.b, '"'), genStrings[g.r.IntN(len(genStrings))]...), '"')
	case 3, 4:
		g.b = append(g.b, genNumbers[g.r.IntN(len(genNumbers))]...)
	case 5:
		g.b = append(g.b, "null"...)
	case 6:
		g.b = append(g.b, "true"...)
	default:
		g.b = append(g.b, "false"...)
	}
}

// value writes any JSON value, nested at most depth deep.
func (g *jsonGen) value(depth int) {
	if depth <= 0 || g.r.IntN(3) > 0 {
		g.scalar()
		return
	}
	if g.r.IntN(2) == 0 {
		g.array(depth, func() { g.value(depth - 1) })
		return
	}
	names := []string{"a", "b", "role", "content", "id"}
	g.object(names, func(string) { g.value(depth - 1) })
}

func (g *jsonGen) array(n int, elem func()) {
	g.b = append(g.b, '[')
	g.ws()
	for i := range g.r.IntN(n + 1) {
		if i > 0 {
			g.b = append(g.b, ',')
			g.ws()
		}
		elem()
		g.ws()
	}
	g.b = append(g.b, ']')
}

// object writes members named from names (some twice, some left out,
// some unknown), each value from val.
func (g *jsonGen) object(names []string, val func(string)) {
	g.b = append(g.b, '{')
	g.ws()
	first := true
	for _, n := range names {
		times := 1
		switch g.r.IntN(60) {
		case 0:
			times = 0
		case 1:
			times = 2
		}
		for range times {
			if g.r.IntN(100) == 0 {
				n = "other"
			}
			if !first {
				g.b = append(g.b, ',')
				g.ws()
			}
			first = false
			g.name(n)
			g.ws()
			g.b = append(g.b, ':')
			g.ws()
			val(n)
			g.ws()
		}
	}
	g.b = append(g.b, '}')
}

func (g *jsonGen) member(n string) {
	if g.r.IntN(60) == 0 {
		g.value(2)
		return
	}
	str := func(s ...string) { g.b = append(append(append(g.b, '"'), s[g.r.IntN(len(s))]...), '"') }
	switch n {
	case "id", "threadId", "parentCheckpointId", "expectedHeadId", "label", "sourceRunId", "ownerToken",
		"artifactId", "name", "mimeType", "target":
		str("a", "t", "t", "t", `\u0074`, `a\"b`, "x/y")
	case "createdAt", "size", "fence":
		if g.r.IntN(2) == 0 {
			g.b = append(g.b, genNumbers[g.r.IntN(len(genNumbers))]...)
		} else {
			g.b = append(g.b, '1')
		}
	case "reason":
		str("automatic", "named", "fork-root")
	case "kind":
		str("file", "dir", "symlink")
	case "path":
		str("a", "d/f.go", `\u00e9`, "a//b")
	case "blobKey":
		str(`sandbox-files/sha256/0000000000000000000000000000000000000000000000000000000000000001`,
			`sandbox-artifacts/sha256/0000000000000000000000000000000000000000000000000000000000000002`)
	case "executable":
		g.b = append(g.b, []string{"true", "false", "null", "0"}[g.r.IntN(4)]...)
	case "files":
		g.array(3, func() {
			names := [][]string{
				{"path", "kind", "blobKey", "size", "executable", "target"},
				{"path", "kind", "blobKey", "size"}, {"path", "kind", "blobKey", "size", "executable"},
				{"path", "kind"}, {"path", "kind", "target"},
			}[g.r.IntN(5)]
			g.object(names, g.member)
		})
	case "artifacts":
		g.array(2, func() {
			g.object([]string{"artifactId", "name", "mimeType", "blobKey", "size", "createdAt"}, g.member)
		})
	case "conversation":
		g.array(3, func() { g.value(3) })
	case "checkpoint":
		g.object([]string{"id", "threadId", "parentCheckpointId", "createdAt", "reason", "label", "sourceRunId",
			"files", "conversation", "artifacts"}, g.member)
	case "writer":
		g.object([]string{"threadId", "ownerToken", "fence"}, g.member)
	default:
		g.scalar()
	}
}

// text returns a random append input, or with one chance in three a
// random checkpoint, sometimes with one byte broken.
func (g *jsonGen) text() []byte {
	g.b = g.b[:0]
	g.ws()
	if g.r.IntN(3) == 0 {
		g.member("checkpoint")
	} else {
		g.object([]string{"checkpoint", "expectedHeadId", "writer"}, g.member)
	}
	g.ws()
	if g.r.IntN(30) == 0 {
		g.b = append(g.b, "\u00a0"...) // not JSON whitespace
	}
	if g.r.IntN(10) == 0 && len(g.b) > 0 {
		g.b[g.r.IntN(len(g.b))] = `"\{}[],: x`[g.r.IntN(10)]
	}
	return g.b
}

func TestJSONPathMatchesReference(t *testing.T) {
	for _, s := range []string{
		``, ` `, `null`, `[]`, `"x"`, `{`, `{}`, ` {} `, "\u00a0{}", `{"checkpoint":null}`, `{"checkpoint":{}}`,
		`{"checkpoint":{"id":"a","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[ 1 , {"a":"]"} ,"\"]"],"artifacts":[]},"writer":{"threadId":"t","ownerToken":"o","fence":1}}`,
		`{"checkpoint":{"id":"a","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"f","kind":"file","blobKey":"sandbox-files/sha256/0000000000000000000000000000000000000000000000000000000000000001","size":1,"executable":null}],"conversation":[],"artifacts":[]},"writer":{"threadId":"t","ownerToken":"o","fence":1}}`,
		`{"checkpoint":{"\u0069d":"a","i\u0064":"b","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"conversation":[ ],"artifacts":[]},"writer":{"threadId":"t","ownerToken":"o","fence":1}}`,
		"{\"checkpoint\":{\"id\":\"a\",\"id\\u0000\":1,\"\xff\\u0069d\":2,\"threadId\":\"t\",\"createdAt\":1,\"reason\":\"automatic\",\"files\":[],\"conversation\":[\t\"\\\\\"\r\n],\"artifacts\":[]},\"writer\":{\"threadId\":\"t\",\"ownerToken\":\"o\",\"fence\":1}}",
		`{"id":"a","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"d","kind":"dir","size":0}],"conversation":[],"artifacts":[]}`,
	} {
		checkAgainstReference(t, []byte(s))
	}
	g := &jsonGen{r: rand.New(rand.NewPCG(1, 2))}
	n := 3000
	if v := os.Getenv("SBXDB_LONG"); v != "" && v != "0" { // internal/testkit's tiers; it imports chain
		n = 300000
	}
	for range n {
		checkAgainstReference(t, g.text())
	}
}

// FuzzJSONReference holds the strict JSON path to its reference on any
// input, starting from the generator's texts.
func FuzzJSONReference(f *testing.F) {
	g := &jsonGen{r: rand.New(rand.NewPCG(3, 4))}
	for range 64 {
		f.Add(bytes.Clone(g.text()))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkAgainstReference(t, data) })
}
