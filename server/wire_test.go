package server

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

const (
	high = "\xed\xa0\xbd" // U+D83D as the strict JSON path keeps it
	low  = "\xed\xb8\x80" // U+DE00
)

func TestTextRoundTrip(t *testing.T) {
	for s, carried := range map[string]bool{
		"": true, "a": true, "é😀": true, "\x00": true, "<a&b>": true, "\"\\\n": true,
		high: true, low: true, low + high: true, high + high: true, "a" + high + "b": true,
		high + low:         false, // two halves that a JSON string would join
		"\xff":             false,
		"\xffnot a string": false,
		"a\xc3":            false,
		"\xed\xa0":         false,
	} {
		if got := representable(s); got != carried {
			t.Errorf("representable(%q) = %v, want %v", s, got, carried)
		}
		b, err := json.Marshal(text(s))
		if err != nil {
			t.Fatalf("Marshal(%q): %v", s, err)
		}
		if isObject := strings.HasPrefix(string(b), "{"); isObject == carried {
			t.Errorf("text(%q) = %s: a bytes object is for what a string cannot carry", s, b)
		}
		var back text
		if err := json.Unmarshal(b, &back); err != nil || string(back) != s {
			t.Errorf("text(%q) = %s reads back as %q, %v", s, b, back, err)
		}
	}
}

func TestTextRefusesWhatIsNotAString(t *testing.T) {
	for _, in := range []string{`7`, `null`, `true`, `[]`, `{}`, `{"bytes":7}`, `{"bytes":"!!"}`, "\"\xff\""} {
		var got text = "kept"
		if err := got.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("text.UnmarshalJSON(%s) = %q, want an error", in, got)
		}
	}
}

func TestSplitArrayKeepsEachElementsBytes(t *testing.T) {
	for in, want := range map[string][]string{
		`[]`:                             {},
		" [ \n ] ":                       {},
		`[1]`:                            {`1`},
		`[ 1 , {"a" : [1, 2]} ,"x"]`:     {` 1 `, ` {"a" : [1, 2]} `, `"x"`},
		`[",\"]", "\\", [{}, []]]`:       {`",\"]"`, ` "\\"`, ` [{}, []]`},
		"[\n\t{\"k\": [true, false]\n}]": {"\n\t{\"k\": [true, false]\n}"},
	} {
		got, err := splitArray([]byte(in))
		if err != nil {
			t.Fatalf("splitArray(%s): %v", in, err)
		}
		var strs []string
		for _, m := range got {
			strs = append(strs, string(m))
		}
		if d := cmp.Diff(want, strs, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("splitArray(%s) (-want +got):\n%s", in, d)
		}
	}
	for _, in := range []string{``, `{}`, `null`, `"[1]"`, `7`} {
		if got, err := splitArray([]byte(in)); err == nil {
			t.Errorf("splitArray(%s) = %q, want an error", in, got)
		}
	}
	raw := []byte(`[1,2]`)
	got, _ := splitArray(raw)
	_ = append(got[0], '9')
	if string(raw) != `[1,2]` || string(got[1]) != "2" {
		t.Errorf("appending to one element changed the next: %s", raw)
	}
}

func TestMessagesRoundTripByteForByte(t *testing.T) {
	msgs := []json.RawMessage{[]byte(` {"n": 1} `), []byte(`"<&>"`), []byte("{\n\t\"k\": [true,  false]\n}"), []byte(`"\u00e9"`)}
	got, err := splitArray(appendMessages(nil, msgs))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(msgs, got); d != "" {
		t.Errorf("messages after the trip (-want +got):\n%s", d)
	}
}

// sample is a checkpoint holding every field, each kind of entry, and
// messages whose spacing encoding/json would change.
func sample() *chain.Checkpoint {
	return &chain.Checkpoint{
		ID: "c2", ThreadID: "thr<é>", ParentID: "c1", CreatedAt: -chain.MaxSafeInteger,
		Reason: chain.ReasonNamed, Label: "a & b", SourceRunID: "run-1",
		Files: []chain.Entry{
			{Path: "a.txt", Kind: chain.KindFile, BlobKey: testkit.FileKey(1), Size: 0},
			{Path: "bin/x", Kind: chain.KindFile, BlobKey: testkit.FileKey(2), Size: 7, Executable: true},
			{Path: "d", Kind: chain.KindDir},
			{Path: "l", Kind: chain.KindSymlink, Target: "../a.txt"},
		},
		Conversation: []json.RawMessage{[]byte(`{"a" : 1}`), []byte(`[1,  2]`), []byte(`"<\u00e9>"`), []byte(`null`)},
		Artifacts:    []chain.Artifact{{ArtifactID: "art", Name: "o.txt", MimeType: "text/plain", BlobKey: chain.ArtifactPrefix + strings.Repeat("a", 64), Size: 3, CreatedAt: 9}},
	}
}

// What the server writes, the strict JSON path reads back unchanged,
// messages included: the shape is chain.Checkpoint's, so a client that
// reads chain's JSON reads the server's.
func TestCheckpointReadsBackThroughTheStrictPath(t *testing.T) {
	for _, cp := range []*chain.Checkpoint{sample(), {ID: "r", ThreadID: "t", Reason: chain.ReasonAutomatic}} {
		b := appendCheckpoint(nil, cp)
		parsed, err := chain.ParseCheckpoint(b)
		if err != nil {
			t.Fatalf("ParseCheckpoint(%s): %v", b, err)
		}
		if d := cmp.Diff(cp, parsed, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("ParseCheckpoint(appendCheckpoint) (-want +got):\n%s", d)
		}
	}
}

func TestInstanceRoundTrip(t *testing.T) {
	for _, rec := range []sbxdb.InstanceRecord{
		{Key: "\xff", Provider: "", ProviderSandboxID: high + low, ThreadID: "\x00", UpdatedAt: -1 << 62},
		{Key: "k", Provider: "p", ProviderSandboxID: "sb", LatestSnapshotID: "s", ThreadID: "t", LatestRunID: "r", UpdatedAt: 1},
	} {
		b, err := json.Marshal(fromInstance(rec))
		if err != nil {
			t.Fatal(err)
		}
		var w instanceJSON
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		got, err := w.record()
		if err != nil || got != rec {
			t.Errorf("instance %+v came back as %+v, %v (wire %s)", rec, got, err, b)
		}
	}
	for _, in := range []string{`{}`, `{"key":"k","provider":"p","providerSandboxId":"s","threadId":"t"}`,
		`{"key":null,"provider":"p","providerSandboxId":"s","threadId":"t","updatedAt":1}`} {
		var w instanceJSON
		if err := json.Unmarshal([]byte(in), &w); err != nil {
			t.Fatal(err)
		}
		if rec, err := w.record(); err == nil {
			t.Errorf("Record of %s = %+v, want a missing member", in, rec)
		}
	}
}

// A plain string is written between quotes as it is, byte for byte what
// encoding/json writes for it, and an append's response is what
// writeJSON writes for headResponse.
func TestPlainTextIsWhatEncodingJSONWrites(t *testing.T) {
	for _, s := range []string{"", "a", "w01-cp00000001", " ~!#$%'()*+,-./:;=?@[]^_`{|}", "<", ">", "&", "\"",
		"\\", "\x7f", "\x1f", "é", "\u2028", "\xed\xa0\x80", "\xff"} {
		want, _ := chain.WireString(s).MarshalJSON()
		if !representable(s) {
			want = []byte(`{"bytes":"` + base64.StdEncoding.EncodeToString([]byte(s)) + `"}`)
		}
		if got := appendText(nil, s); string(got) != string(want) {
			t.Errorf("appendText(%q) = %s, want %s", s, got, want)
		}
		h := text(s)
		resp, err := json.Marshal(headResponse{&h})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendHead(s); string(got) != string(resp) {
			t.Errorf("appendHead(%q) = %s, want %s", s, got, resp)
		}
	}
}
