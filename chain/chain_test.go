package chain_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

func TestBlobKeysDistinctSorted(t *testing.T) {
	cp := testkit.SampleCheckpoint()
	cp.Files = append(cp.Files, chain.Entry{Path: "dup", Kind: chain.KindFile, BlobKey: testkit.FileKey(1), Size: 0})
	want := []string{cp.Artifacts[0].BlobKey, testkit.FileKey(1), testkit.FileKey(2)}
	if diff := cmp.Diff(want, cp.BlobKeys()); diff != "" {
		t.Error(diff)
	}
}

func TestCheckpointJSONWireShape(t *testing.T) {
	root := &chain.Checkpoint{ID: "r", ThreadID: "t", CreatedAt: 5, Reason: chain.ReasonAutomatic,
		Files: []chain.Entry{{Path: "e", Kind: chain.KindFile, BlobKey: testkit.FileKey(0)}, {Path: "d", Kind: chain.KindDir}}}
	b, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"r","threadId":"t","parentCheckpointId":null,"createdAt":5,"reason":"automatic",` +
		`"files":[{"path":"e","kind":"file","blobKey":"` + testkit.FileKey(0) + `","size":0},{"path":"d","kind":"dir"}],` +
		`"conversation":[],"artifacts":[]}`
	if string(b) != want {
		t.Errorf("wire JSON\n got %s\nwant %s", b, want)
	}
	cp := testkit.SampleCheckpoint()
	b, _ = json.Marshal(cp)
	back, err := chain.ParseCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	// The wire form re-emits messages compacted (encoding/json does).
	cp.Conversation[0] = json.RawMessage(`{"role":"user"}`)
	if diff := cmp.Diff(cp, back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
}

func TestParseAppendInputCodes(t *testing.T) {
	const cpOK = `{"id":"c","threadId":"t","parentCheckpointId":null,"createdAt":1,"reason":"automatic","files":[],"conversation":[],"artifacts":[]}`
	const w = `{"threadId":"t","ownerToken":"o","fence":1}`
	in := func(cp, expected string) string {
		return `{"checkpoint":` + cp + `,"expectedHeadId":` + expected + `,"writer":` + w + `}`
	}
	with := func(field, value string) string {
		var m map[string]json.RawMessage
		json.Unmarshal([]byte(cpOK), &m)
		if value == "" {
			delete(m, field)
		} else {
			m[field] = json.RawMessage(value)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := []struct {
		name, input, code string
	}{
		{"ok", in(cpOK, "null"), ""},
		{"absent parent is null", in(with("parentCheckpointId", ""), "null"), ""},
		{"lone surrogate id", in(with("id", `"\ud800"`), "null"), chain.CodeInvalidID},
		{"lone low surrogate id", in(with("id", `"a\udc00"`), "null"), chain.CodeInvalidID},
		{"surrogate pair id is fine", in(with("id", `"\ud83d\ude00"`), "null"), ""},
		{"numeric thread", in(with("threadId", `7`), "null"), chain.CodeInvalidID},
		{"empty parent", in(with("parentCheckpointId", `""`), "null"), chain.CodeInvalidID},
		{"empty expected head", in(cpOK, `""`), chain.CodeInvalidID},
		{"NaN createdAt", in(with("createdAt", `NaN`), "null"), chain.CodeInvalidEntry},
		{"infinite createdAt", in(with("createdAt", `1e400`), "null"), chain.CodeInvalidEntry},
		{"fraction createdAt", in(with("createdAt", `1.5`), "null"), chain.CodeInvalidEntry},
		{"unsafe createdAt", in(with("createdAt", `9007199254740992`), "null"), chain.CodeInvalidEntry},
		{"exponent createdAt is integral", in(with("createdAt", `1e3`), "null"), ""},
		{"files null", in(with("files", `null`), "null"), chain.CodeInvalidEntry},
		{"files [1]", in(with("files", `[1]`), "null"), chain.CodeInvalidEntry},
		{"file without size", in(with("files", `[{"path":"a","kind":"file","blobKey":"`+testkit.FileKey(1)+`"}]`), "null"), chain.CodeInvalidEntry},
		{"dir with size 0", in(with("files", `[{"path":"a","kind":"dir","size":0}]`), "null"), chain.CodeInvalidEntry},
		{"file with target", in(with("files", `[{"path":"a","kind":"file","blobKey":"`+testkit.FileKey(1)+`","size":1,"target":"x"}]`), "null"), chain.CodeInvalidEntry},
		{"file with empty target", in(with("files", `[{"path":"a","kind":"file","blobKey":"`+testkit.FileKey(1)+`","size":1,"target":""}]`), "null"), chain.CodeInvalidEntry},
		{"dir with target", in(with("files", `[{"path":"a","kind":"dir","target":"x"}]`), "null"), chain.CodeInvalidEntry},
		{"symlink with executable", in(with("files", `[{"path":"a","kind":"symlink","target":"x","executable":false}]`), "null"), chain.CodeInvalidEntry},
		{"symlink", in(with("files", `[{"path":"a","kind":"symlink","target":"x"}]`), "null"), ""},
		{"surrogate in blob key", in(with("files", `[{"path":"a","kind":"file","blobKey":"sandbox-files/sha256/\ud800","size":1}]`), "null"), chain.CodeInvalidEntry},
		{"id beats entry", in(strings.Replace(with("files", `7`), `"id":"c"`, `"id":""`, 1), "null"), chain.CodeInvalidID},
		{"conversation object", in(with("conversation", `{}`), "null"), chain.CodeInvalidEntry},
		{"bad reason", in(with("reason", `"other"`), "null"), chain.CodeInvalidEntry},
		{"writer fence string", strings.Replace(in(cpOK, "null"), `"fence":1`, `"fence":"1"`, 1), chain.CodeWriterLost},
		{"not JSON", `{"checkpoint":`, chain.CodeInvalidEntry},
	}
	for _, c := range cases {
		_, err := chain.ParseAppendInput([]byte(c.input))
		if got := chain.Code(err); got != c.code {
			t.Errorf("%s: code %q (%v), want %q", c.name, got, err, c.code)
		}
	}
}

func TestValidateFilesAncestors(t *testing.T) {
	f := func(p string) chain.Entry {
		return chain.Entry{Path: p, Kind: chain.KindFile, BlobKey: testkit.FileKey(1), Size: 1}
	}
	d := func(p string) chain.Entry { return chain.Entry{Path: p, Kind: chain.KindDir} }
	l := func(p string) chain.Entry { return chain.Entry{Path: p, Kind: chain.KindSymlink, Target: "x"} }
	ok := [][]chain.Entry{
		{d("a"), f("a/b"), f("a/c/d")},
		{f("a/b/c"), d("a/b"), d("a")},
		{f("ab"), f("a/b")},
		{f("C:foo")},
	}
	bad := [][]chain.Entry{
		{f("a"), f("a/b")}, {f("a/b"), f("a")}, {f("a/b/c"), f("a")}, {l("a"), f("a/b")},
		{f("a/b"), l("a")}, {f("a"), d("a")}, {f("x/../y")}, {f("C:/x")}, {f("C:")}, {f("a\\b")},
		{f("a/")}, {f("./a")}, {f("")}, {f("a\x00")}, {{Path: "a", Kind: "other"}},
		{{Path: "a", Kind: chain.KindSymlink}}, {{Path: "a", Kind: chain.KindDir, Size: 1}},
		{{Path: "a", Kind: chain.KindFile, BlobKey: testkit.FileKey(1), Size: -1}},
		{{Path: "a", Kind: chain.KindFile, BlobKey: chain.ArtifactPrefix + strings.Repeat("0", 64)}},
		{{Path: "a", Kind: chain.KindFile, BlobKey: chain.FilePrefix + strings.Repeat("A", 64)}},
	}
	for _, files := range ok {
		if err := chain.ValidateFiles(files); err != nil {
			t.Errorf("%v: %v", files, err)
		}
	}
	for _, files := range bad {
		if err := chain.ValidateFiles(files); !errors.Is(err, chain.ErrInvalidEntry) {
			t.Errorf("%+v: %v, want INVALID_ENTRY", files, err)
		}
	}
}

func TestCheckID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "é😀": true, strings.Repeat("x", chain.MaxIDBytes): true,
		"": false, "\xed\xa0\x80": false, "a\x00": false, strings.Repeat("x", chain.MaxIDBytes+1): false, "\xff": false,
	} {
		err := chain.CheckID("id", id)
		if (err == nil) != want || err != nil && !errors.Is(err, chain.ErrInvalidID) {
			t.Errorf("CheckID(%q) = %v, want valid=%v", id, err, want)
		}
	}
}

func TestCodeAndIs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", chain.Errorf(chain.ErrStaleHead, "thread %q", "t"))
	if !errors.Is(err, chain.ErrStaleHead) || errors.Is(err, chain.ErrParentMismatch) {
		t.Error("errors.Is does not match the sentinel alone")
	}
	if chain.Code(err) != chain.CodeStaleHead || chain.Code(errors.New("x")) != "" || chain.Code(nil) != "" {
		t.Error("Code")
	}
	if !strings.Contains(err.Error(), `thread "t"`) {
		t.Errorf("message %q does not name the thread", err)
	}
}
