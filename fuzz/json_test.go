package fuzz

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb/chain"
)

// FuzzJSON feeds arbitrary bytes to the strict JSON input path,
// chain.ParseCheckpoint and chain.ParseAppendInput: once as they are, and
// once wrapped as the checkpoint of an append input.
//
// It proves that neither parser panics, and that:
//   - every error carries a contract code; non-blank text that is not JSON
//     is INVALID_ENTRY (as parseObject documents; blank text gets
//     INVALID_ID "must be an object" and is not asserted), a JSON value that
//     is not an object is INVALID_ID;
//   - ParseAppendInput checks a JSON value given as its checkpoint exactly
//     as ParseCheckpoint checks it: the same code, or the same checkpoint;
//   - an accepted checkpoint passes the Go API's own validation
//     (chain.ValidateAppend), and is faithful to the text: its conversation
//     messages are byte for byte the elements of the last "conversation"
//     member, every integer (createdAt, sizes, artifact times, the writer's
//     fence) is exactly the value its literal denotes (so a fraction such
//     as 1.5 or 1.0000000000000001 is never accepted), and every string
//     that encoding/json decodes without loss is the same string;
//   - an accepted checkpoint or append input survives a round trip:
//     json.Marshal of it parses back to an equal value (messages compacted
//     and HTML-escaped, as encoding/json re-emits raw JSON), and marshals
//     again to the same bytes.
func FuzzJSON(f *testing.F) {
	for _, s := range jsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, cerr := chain.ParseCheckpoint(data)
		jsCheckError(t, "ParseCheckpoint", data, cerr)
		if cerr == nil {
			jsCheckCheckpoint(t, data, cp)
			jsRoundTrip(t, cp)
		}

		in, aerr := chain.ParseAppendInput(data)
		jsCheckError(t, "ParseAppendInput", data, aerr)
		if aerr == nil {
			jsCheckAppendInput(t, data, in)
		}

		// The same checkpoint text inside an append input. Only a JSON
		// value is compared: other text could close the wrapper early and
		// add members of its own.
		wrapped := jsWrap(data)
		win, werr := chain.ParseAppendInput(wrapped)
		jsCheckError(t, "ParseAppendInput(wrapped)", wrapped, werr)
		if json.Valid(data) {
			if chain.Code(werr) != chain.Code(cerr) {
				t.Fatalf("ParseCheckpoint: %v\nParseAppendInput of it wrapped: %v\ninput: %q", cerr, werr, data)
			}
			if cerr == nil {
				if d := cmp.Diff(cp, win.Checkpoint, ckEmpty); d != "" {
					t.Fatalf("ParseAppendInput(wrapped) checkpoint differs from ParseCheckpoint (-direct +wrapped):\n%s", d)
				}
				if win.ExpectedHeadID != "" || win.Writer != jsWriter {
					t.Fatalf("ParseAppendInput(wrapped) = expected %q, writer %+v; want null, %+v", win.ExpectedHeadID, win.Writer, jsWriter)
				}
			}
		}
	})
}

// jsWriter is the writer jsWrap puts in its append input.
var jsWriter = chain.Writer{ThreadID: "w", OwnerToken: "tok", Fence: 7}

func jsWrap(cp []byte) []byte {
	return []byte(`{"writer":{"threadId":"w","ownerToken":"tok","fence":7},"expectedHeadId":null,"checkpoint":` +
		string(cp) + `}`)
}

// jsCheckError checks the code of a parse error.
func jsCheckError(t *testing.T, what string, data []byte, err error) {
	t.Helper()
	if err == nil {
		return
	}
	code := chain.Code(err)
	trimmed := bytes.TrimSpace(data)
	switch {
	case code == "":
		t.Fatalf("%s: error without a contract code: %v\ninput: %q", what, err, data)
	case len(trimmed) > 0 && !json.Valid(trimmed) && code != chain.CodeInvalidEntry:
		t.Fatalf("%s of text that is not JSON: %v; want %s\ninput: %q", what, err, chain.CodeInvalidEntry, data)
	case json.Valid(trimmed) && trimmed[0] != '{' && code != chain.CodeInvalidID:
		t.Fatalf("%s of a JSON non-object: %v; want %s\ninput: %q", what, err, chain.CodeInvalidID, data)
	}
}

// jsCheckCheckpoint checks an accepted checkpoint against its text.
func jsCheckCheckpoint(t *testing.T, data []byte, cp *chain.Checkpoint) {
	t.Helper()
	if err := chain.ValidateAppend(chain.AppendInput{Checkpoint: cp, ExpectedHeadID: cp.ParentID, Writer: chain.Writer{ThreadID: cp.ThreadID}}); err != nil {
		t.Fatalf("ParseCheckpoint accepted a checkpoint that ValidateAppend rejects: %v\ninput: %q", err, data)
	}
	if cp.ParentID == "" {
		// Absent or null (SPEC §10 Q7, Q11): never "" on the wire.
		if raw, ok := jsMember(data, "parentCheckpointId"); ok && string(raw) != "null" {
			t.Fatalf("parentCheckpointId %s parsed as null", raw)
		}
	}
	for _, f := range []struct {
		name string
		got  string
	}{
		{"id", cp.ID}, {"threadId", cp.ThreadID}, {"parentCheckpointId", cp.ParentID},
		{"reason", string(cp.Reason)}, {"label", cp.Label}, {"sourceRunId", cp.SourceRunID},
	} {
		jsCheckString(t, data, f.name, f.got)
	}
	jsCheckInt(t, data, "createdAt", cp.CreatedAt)

	// Messages: byte for byte the elements of the conversation member.
	conv, _ := jsMember(data, "conversation")
	elems, err := jsElements(conv)
	if err != nil {
		t.Fatalf("splitting the accepted conversation %q: %v", conv, err)
	}
	if len(elems) != len(cp.Conversation) {
		t.Fatalf("conversation has %d elements, parsed %d messages\ninput: %q", len(elems), len(cp.Conversation), data)
	}
	for i, e := range elems {
		if !bytes.Equal(e, cp.Conversation[i]) {
			t.Fatalf("conversation[%d] parsed as %q, the input has %q", i, cp.Conversation[i], e)
		}
	}

	files, _ := jsMember(data, "files")
	elems, err = jsElements(files)
	if err != nil || len(elems) != len(cp.Files) {
		t.Fatalf("files %q: %d elements (%v), parsed %d entries", files, len(elems), err, len(cp.Files))
	}
	for i, e := range elems {
		jsCheckString(t, e, "path", cp.Files[i].Path)
		jsCheckString(t, e, "kind", string(cp.Files[i].Kind))
		switch cp.Files[i].Kind {
		case chain.KindFile:
			jsCheckString(t, e, "blobKey", cp.Files[i].BlobKey)
			jsCheckInt(t, e, "size", cp.Files[i].Size)
		case chain.KindSymlink:
			jsCheckString(t, e, "target", cp.Files[i].Target)
		}
	}
	arts, _ := jsMember(data, "artifacts")
	elems, err = jsElements(arts)
	if err != nil || len(elems) != len(cp.Artifacts) {
		t.Fatalf("artifacts %q: %d elements (%v), parsed %d artifacts", arts, len(elems), err, len(cp.Artifacts))
	}
	for i, e := range elems {
		a := cp.Artifacts[i]
		jsCheckString(t, e, "artifactId", a.ArtifactID)
		jsCheckString(t, e, "name", a.Name)
		jsCheckString(t, e, "mimeType", a.MimeType)
		jsCheckString(t, e, "blobKey", a.BlobKey)
		jsCheckInt(t, e, "size", a.Size)
		jsCheckInt(t, e, "createdAt", a.CreatedAt)
	}
}

// jsCheckAppendInput checks an accepted append input against its text and
// round-trips it.
func jsCheckAppendInput(t *testing.T, data []byte, in chain.AppendInput) {
	t.Helper()
	if err := chain.ValidateAppend(in); err != nil {
		t.Fatalf("ParseAppendInput accepted an input that ValidateAppend rejects: %v\ninput: %q", err, data)
	}
	raw, _ := jsMember(data, "checkpoint")
	jsCheckCheckpoint(t, raw, in.Checkpoint)
	w, _ := jsMember(data, "writer")
	jsCheckString(t, w, "threadId", in.Writer.ThreadID)
	jsCheckString(t, w, "ownerToken", in.Writer.OwnerToken)
	jsCheckInt(t, w, "fence", int64(in.Writer.Fence))
	jsCheckString(t, data, "expectedHeadId", in.ExpectedHeadID)

	wire := jsAppendWire{Checkpoint: in.Checkpoint, Writer: in.Writer}
	if in.ExpectedHeadID != "" {
		wire.ExpectedHeadID = &in.ExpectedHeadID
	}
	b, err := json.Marshal(wire)
	if err != nil {
		t.Fatalf("json.Marshal of a parsed append input: %v", err)
	}
	back, err := chain.ParseAppendInput(b)
	if err != nil {
		t.Fatalf("ParseAppendInput rejects the JSON of an input it accepted: %v\nfirst input: %q\nre-marshaled: %s", err, data, b)
	}
	want := in
	want.Checkpoint = jsMarshaled(in.Checkpoint)
	if d := cmp.Diff(want, back, ckEmpty); d != "" {
		t.Fatalf("append input JSON round trip (-parsed +reparsed):\n%s\nfirst input: %q\nre-marshaled: %s", d, data, b)
	}
}

type jsAppendWire struct {
	Checkpoint     *chain.Checkpoint `json:"checkpoint"`
	ExpectedHeadID *string           `json:"expectedHeadId"`
	Writer         chain.Writer      `json:"writer"`
}

// jsRoundTrip checks that json.Marshal of an accepted checkpoint parses
// back to it and is stable.
func jsRoundTrip(t *testing.T, cp *chain.Checkpoint) {
	t.Helper()
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatalf("json.Marshal of a parsed checkpoint: %v", err)
	}
	back, err := chain.ParseCheckpoint(b)
	if err != nil {
		t.Fatalf("ParseCheckpoint rejects the JSON of a checkpoint it accepted: %v\nre-marshaled: %s", err, b)
	}
	if d := cmp.Diff(jsMarshaled(cp), back, ckEmpty); d != "" {
		t.Fatalf("checkpoint JSON round trip (-parsed +reparsed):\n%s\nre-marshaled: %s", d, b)
	}
	b2, err := json.Marshal(back)
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("marshaling is not stable (%v):\n%s\n%s", err, b, b2)
	}
}

// jsMarshaled is cp as json.Marshal and a parse give it back: messages
// compacted and HTML-escaped.
func jsMarshaled(cp *chain.Checkpoint) *chain.Checkpoint {
	c := cp.Clone()
	for i, m := range c.Conversation {
		c.Conversation[i] = jsMarshaledMessage(m)
	}
	return c
}

// jsMarshaledMessage is message m as encoding/json re-emits a RawMessage:
// compacted, with <, >, &, U+2028 and U+2029 escaped.
func jsMarshaledMessage(m json.RawMessage) json.RawMessage {
	var c, h bytes.Buffer
	if err := json.Compact(&c, m); err != nil {
		return m
	}
	json.HTMLEscape(&h, c.Bytes())
	return h.Bytes()
}

// jsMember returns the exact input bytes of the value of the last member
// key of the JSON object obj (encoding/json keeps the last of duplicate
// keys), and whether there is one.
func jsMember(obj []byte, key string) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var found []byte
	ok := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		v, err := jsNext(dec, obj)
		if err != nil {
			return nil, false
		}
		if tok == key {
			found, ok = v, true
		}
	}
	return found, ok
}

// jsElements returns the exact input bytes of each element of the JSON
// array arr.
func jsElements(arr []byte) ([][]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(arr))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, err
	}
	var out [][]byte
	for dec.More() {
		v, err := jsNext(dec, arr)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// jsNext decodes the next value of dec, which reads src, and returns its
// bytes as a slice of src.
func jsNext(dec *json.Decoder, src []byte) ([]byte, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	end := int(dec.InputOffset())
	v := src[end-len(raw) : end]
	if !bytes.Equal(v, raw) {
		panic("jsNext: decoded value is not the input before the offset")
	}
	return v, nil
}

// jsCheckString checks that the string parsed for member name of obj is
// what encoding/json decodes from its literal, when that decoding is exact
// (no U+FFFD: encoding/json replaces lone surrogates and invalid bytes).
// An absent or null member must have been parsed as "".
func jsCheckString(t *testing.T, obj []byte, name, got string) {
	t.Helper()
	raw, ok := jsMember(obj, name)
	if !ok || string(raw) == "null" {
		if got != "" {
			t.Fatalf("member %q is absent or null but parsed as %q\nobject: %q", name, got, obj)
		}
		return
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("member %q = %s is not a string but parsed as %q", name, raw, got)
	}
	if !strings.ContainsRune(s, utf8.RuneError) && s != got {
		t.Fatalf("member %q = %s parsed as %q; encoding/json decodes %q", name, raw, got, s)
	}
}

// jsCheckInt checks that the literal of member name of obj denotes exactly
// the integer got.
func jsCheckInt(t *testing.T, obj []byte, name string, got int64) {
	t.Helper()
	raw, ok := jsMember(obj, name)
	if !ok {
		t.Fatalf("member %q is absent but parsed as %d\nobject: %q", name, got, obj)
	}
	n, exact := jsExactInt(string(raw))
	if !exact || n != got {
		t.Fatalf("member %q = %s parsed as %d; the literal is not exactly that safe integer (exact %v, %d)", name, raw, got, exact, n)
	}
}

// jsExactInt returns the value of the JSON literal lit if it is a number
// that is exactly an integer within ±(2^53−1). encoding/json says whether
// lit is a number; math/big computes its value exactly, as a fraction. An
// exponent too large for that is sized instead: a nonzero mantissa m of n
// characters lies between 10^-n and 10^n, so m×10^e with |e| > n+16 is
// below 1 (a fraction) or above 10^16 > 2^53, never a safe integer.
func jsExactInt(lit string) (int64, bool) {
	dec := json.NewDecoder(strings.NewReader(lit))
	dec.UseNumber()
	var v any
	if !json.Valid([]byte(lit)) || dec.Decode(&v) != nil {
		return 0, false
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	mant, exp, hasExp := strings.Cut(strings.ToLower(num.String()), "e")
	m, ok := new(big.Rat).SetString(mant)
	if !ok {
		return 0, false
	}
	if m.Sign() == 0 {
		return 0, true // zero, whatever the exponent
	}
	if hasExp {
		e, err := strconv.ParseInt(exp, 10, 64)
		if n := int64(len(mant)) + 16; err != nil || e > n || e < -n {
			return 0, false
		}
		if _, ok := m.SetString(num.String()); !ok {
			return 0, false
		}
	}
	if !m.IsInt() || m.Num().CmpAbs(big.NewInt(ckMaxSafe)) > 0 {
		return 0, false
	}
	return m.Num().Int64(), true
}

// jsSeeds: the valid shapes and the nasty cases of SPEC §1 and §10 (Q7,
// Q9, Q11, Q13) on the JSON path.
var jsSeeds = []string{
	// Valid checkpoints.
	`{"id":"1","threadId":"t","parentCheckpointId":null,"createdAt":1,"reason":"automatic","files":[{"path":"1.txt","kind":"file","blobKey":"sandbox-files/sha256/0000000000000000000000000000000000000000000000000000000000000001","size":1}],"conversation":[{"role":"user","content":"1"}],"artifacts":[]}`,
	`{"id":"2","threadId":"t","parentCheckpointId":"1","createdAt":-9007199254740991,"reason":"named","label":"l","sourceRunId":"r","files":[{"path":"d","kind":"dir"},{"path":"d/x","kind":"file","blobKey":"sandbox-files/sha256/00000000000000000000000000000000000000000000000000000000000000ff","size":9007199254740991,"executable":true},{"path":"l","kind":"symlink","target":"d/x"}],"conversation":[ 1 , "a" ,{ "b" : [ null ] } ],"artifacts":[{"artifactId":"a","name":"n","mimeType":"m","blobKey":"sandbox-artifacts/sha256/0000000000000000000000000000000000000000000000000000000000000001","size":0,"createdAt":1e3}]}`,
	`{"id":"absent-parent","threadId":"t","createdAt":0,"reason":"fork-root","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"pairs","threadId":"t","createdAt":0,"reason":"named","label":"\ud83d\ude00","sourceRunId":"\u00e9","files":[{"path":"\ud83d\ude00","kind":"symlink","target":"\ud83d\ude00"}],"conversation":[],"artifacts":[{"artifactId":"\ud83d\ude00","name":"\ud83d\ude00","mimeType":"\u00e9","blobKey":"sandbox-artifacts/sha256/0000000000000000000000000000000000000000000000000000000000000001","size":0,"createdAt":0}]}`,
	` {"id":"ws","threadId":"t","createdAt":0,"reason":"fork-root","files":[],"conversation":[ "<&>\u2028" , "\ud83d\ude00" ],"artifacts":[]} `,
	`{"id":"dup","id":"dup2","threadId":"t","createdAt":5,"createdAt":6,"reason":"automatic","files":[],"conversation":[1],"conversation":[2],"artifacts":[]}`,
	`{"id":"esc\u00e9\/","threadId":"t","createdAt":1E+2,"reason":"automatic","files":[],"conversation":[],"artifacts":[],"unknown":{"x":1}}`,
	`{"id":"n","threadId":"t","createdAt":-0,"reason":"automatic","label":null,"files":[],"conversation":[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]],"artifacts":[]}`,
	// Numbers (Q13): fractions, exponents, huge values.
	`{"id":"1","threadId":"t","createdAt":1.5,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1.0,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1e400,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":9007199254740992,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":9007199254740993,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":-9007199254740992,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1e-2,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":NaN,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":Infinity,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":-Infinity,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":"1","reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"f","kind":"file","blobKey":"sandbox-files/sha256/0000000000000000000000000000000000000000000000000000000000000001","size":1.5}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"f","kind":"file","blobKey":"sandbox-files/sha256/0000000000000000000000000000000000000000000000000000000000000001","size":-1}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"f","kind":"file","blobKey":"sandbox-files/sha256/0000000000000000000000000000000000000000000000000000000000000001"}],"conversation":[],"artifacts":[]}`,
	// Identifiers (Q10, Q11, C8): lone surrogates, "" vs null, non-strings.
	`{"id":"\ud800","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"\udc00\ud800","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"\ud800\udc00","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"a\u0000b","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":7,"createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","parentCheckpointId":"","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","parentCheckpointId":{},"createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`,
	"{\"id\":\"\xff\",\"threadId\":\"t\",\"createdAt\":1,\"reason\":\"automatic\",\"files\":[],\"conversation\":[],\"artifacts\":[]}",
	// Content: files, artifacts, conversation, reason (Q5, Q9, S5, U18).
	`{"id":"1","threadId":"t","createdAt":1,"reason":"bogus","files":[],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":null,"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":"x","conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[null],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[1],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[null]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":{},"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"d","kind":"dir","size":0}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"d","kind":"dir","blobKey":null}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"l","kind":"symlink","target":""}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"l","kind":"symlink","target":"a\u0000"}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"l","kind":"symlink","target":"x","size":1}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"f","kind":"file","blobKey":"sandbox-files/sha256/0000000000000000000000000000000000000000000000000000000000000001","size":1,"executable":"yes"}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"a\\b","kind":"dir"},{"path":"C:/x","kind":"dir"}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[{"path":"f","kind":"file","blobKey":"sandbox-files/sha256/000000000000000000000000000000000000000000000000000000000000000\ud800","size":1}],"conversation":[],"artifacts":[]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[{"artifactId":"","name":"n","mimeType":"m","blobKey":"sandbox-artifacts/sha256/bad","size":0,"createdAt":1}]}`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[{"artifactId":"a","name":"n","mimeType":"m","blobKey":"sandbox-artifacts/sha256/0000000000000000000000000000000000000000000000000000000000000001","size":0,"createdAt":NaN}]}`,
	// Append inputs.
	`{"checkpoint":{"id":"2","threadId":"t","parentCheckpointId":"1","createdAt":2,"reason":"named","files":[],"conversation":[],"artifacts":[]},"expectedHeadId":"1","writer":{"threadId":"t","ownerToken":"0f","fence":3}}`,
	`{"checkpoint":{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]},"writer":{"threadId":"t","ownerToken":"o","fence":1.0}}`,
	`{"checkpoint":{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]},"expectedHeadId":"","writer":{"threadId":"t","ownerToken":"o","fence":1}}`,
	`{"checkpoint":{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]},"expectedHeadId":null,"writer":{"threadId":"t","ownerToken":7,"fence":-1}}`,
	`{"checkpoint":{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]},"writer":{"threadId":"\ud800","ownerToken":"o","fence":1}}`,
	`{"checkpoint":null,"writer":{"threadId":"t","ownerToken":"o","fence":1}}`,
	`{"writer":{"threadId":"t","ownerToken":"o","fence":1}}`,
	// Not JSON, not an object, trailing garbage.
	``, ` `, `null`, `[]`, `7`, `"x"`, `{`, `{}`, `NaN`, `Infinity`, "\xff",
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]} x`,
	`{"id":"1","threadId":"t","createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}{}`,
}
