package chain

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func fileKey(n int) string { return fmt.Sprintf("%s%064x", FilePrefix, n) }

func sample() *Checkpoint {
	return &Checkpoint{
		ID: "cp-é", ThreadID: "thread", ParentID: "parent", CreatedAt: -42,
		Reason: ReasonNamed, Label: "v1", SourceRunID: "run",
		Files: []Entry{
			{Path: "a.txt", Kind: KindFile, BlobKey: fileKey(1), Size: 0},
			{Path: "bin/run", Kind: KindFile, BlobKey: fileKey(2), Size: 1 << 40, Executable: true},
			{Path: "empty", Kind: KindDir},
			{Path: "link", Kind: KindSymlink, Target: "a.txt"},
		},
		Conversation: []json.RawMessage{json.RawMessage(`{"role" : "user"}`), json.RawMessage(`[]`)},
		Artifacts: []Artifact{{ArtifactID: "art", Name: "n", MimeType: "text/plain",
			BlobKey: ArtifactPrefix + strings.Repeat("ab", 32), Size: 3, CreatedAt: 7}},
	}
}

func TestBlobKeysDistinctSorted(t *testing.T) {
	cp := sample()
	cp.Files = append(cp.Files, Entry{Path: "dup", Kind: KindFile, BlobKey: fileKey(1), Size: 0})
	want := []string{cp.Artifacts[0].BlobKey, fileKey(1), fileKey(2)}
	if diff := cmp.Diff(want, cp.BlobKeys()); diff != "" {
		t.Error(diff)
	}
}

func TestCheckpointJSONWireShape(t *testing.T) {
	root := &Checkpoint{ID: "r", ThreadID: "t", CreatedAt: 5, Reason: ReasonAutomatic,
		Files: []Entry{{Path: "e", Kind: KindFile, BlobKey: fileKey(0)}, {Path: "d", Kind: KindDir}}}
	b, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"r","threadId":"t","parentCheckpointId":null,"createdAt":5,"reason":"automatic",` +
		`"files":[{"path":"e","kind":"file","blobKey":"` + fileKey(0) + `","size":0},{"path":"d","kind":"dir"}],` +
		`"conversation":[],"artifacts":[]}`
	if string(b) != want {
		t.Errorf("wire JSON\n got %s\nwant %s", b, want)
	}
	cp := sample()
	b, _ = json.Marshal(cp)
	back, err := ParseCheckpoint(b)
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
		{"lone surrogate id", in(with("id", `"\ud800"`), "null"), CodeInvalidID},
		{"lone low surrogate id", in(with("id", `"a\udc00"`), "null"), CodeInvalidID},
		{"surrogate pair id is fine", in(with("id", `"\ud83d\ude00"`), "null"), ""},
		{"numeric thread", in(with("threadId", `7`), "null"), CodeInvalidID},
		{"empty parent", in(with("parentCheckpointId", `""`), "null"), CodeInvalidID},
		{"empty expected head", in(cpOK, `""`), CodeInvalidID},
		{"NaN createdAt", in(with("createdAt", `NaN`), "null"), CodeInvalidEntry},
		{"infinite createdAt", in(with("createdAt", `1e400`), "null"), CodeInvalidEntry},
		{"fraction createdAt", in(with("createdAt", `1.5`), "null"), CodeInvalidEntry},
		{"unsafe createdAt", in(with("createdAt", `9007199254740992`), "null"), CodeInvalidEntry},
		{"exponent createdAt is integral", in(with("createdAt", `1e3`), "null"), ""},
		{"files null", in(with("files", `null`), "null"), CodeInvalidEntry},
		{"files [1]", in(with("files", `[1]`), "null"), CodeInvalidEntry},
		{"file without size", in(with("files", `[{"path":"a","kind":"file","blobKey":"`+fileKey(1)+`"}]`), "null"), CodeInvalidEntry},
		{"dir with size 0", in(with("files", `[{"path":"a","kind":"dir","size":0}]`), "null"), CodeInvalidEntry},
		{"file with target", in(with("files", `[{"path":"a","kind":"file","blobKey":"`+fileKey(1)+`","size":1,"target":"x"}]`), "null"), CodeInvalidEntry},
		{"file with empty target", in(with("files", `[{"path":"a","kind":"file","blobKey":"`+fileKey(1)+`","size":1,"target":""}]`), "null"), CodeInvalidEntry},
		{"dir with target", in(with("files", `[{"path":"a","kind":"dir","target":"x"}]`), "null"), CodeInvalidEntry},
		{"symlink with executable", in(with("files", `[{"path":"a","kind":"symlink","target":"x","executable":false}]`), "null"), CodeInvalidEntry},
		{"symlink", in(with("files", `[{"path":"a","kind":"symlink","target":"x"}]`), "null"), ""},
		{"surrogate in blob key", in(with("files", `[{"path":"a","kind":"file","blobKey":"sandbox-files/sha256/\ud800","size":1}]`), "null"), CodeInvalidEntry},
		{"id beats entry", in(strings.Replace(with("files", `7`), `"id":"c"`, `"id":""`, 1), "null"), CodeInvalidID},
		{"conversation object", in(with("conversation", `{}`), "null"), CodeInvalidEntry},
		{"bad reason", in(with("reason", `"other"`), "null"), CodeInvalidEntry},
		{"writer fence string", strings.Replace(in(cpOK, "null"), `"fence":1`, `"fence":"1"`, 1), CodeWriterLost},
		{"not JSON", `{"checkpoint":`, CodeInvalidEntry},
	}
	for _, c := range cases {
		_, err := ParseAppendInput([]byte(c.input))
		if got := Code(err); got != c.code {
			t.Errorf("%s: code %q (%v), want %q", c.name, got, err, c.code)
		}
	}
}

func TestValidateFilesAncestors(t *testing.T) {
	f := func(p string) Entry { return Entry{Path: p, Kind: KindFile, BlobKey: fileKey(1), Size: 1} }
	d := func(p string) Entry { return Entry{Path: p, Kind: KindDir} }
	l := func(p string) Entry { return Entry{Path: p, Kind: KindSymlink, Target: "x"} }
	ok := [][]Entry{
		{d("a"), f("a/b"), f("a/c/d")},
		{f("a/b/c"), d("a/b"), d("a")},
		{f("ab"), f("a/b")},
		{f("C:foo")},
	}
	bad := [][]Entry{
		{f("a"), f("a/b")}, {f("a/b"), f("a")}, {f("a/b/c"), f("a")}, {l("a"), f("a/b")},
		{f("a/b"), l("a")}, {f("a"), d("a")}, {f("x/../y")}, {f("C:/x")}, {f("C:")}, {f("a\\b")},
		{f("a/")}, {f("./a")}, {f("")}, {f("a\x00")}, {{Path: "a", Kind: "other"}},
		{{Path: "a", Kind: KindSymlink}}, {{Path: "a", Kind: KindDir, Size: 1}},
		{{Path: "a", Kind: KindFile, BlobKey: fileKey(1), Size: -1}},
		{{Path: "a", Kind: KindFile, BlobKey: ArtifactPrefix + strings.Repeat("0", 64)}},
		{{Path: "a", Kind: KindFile, BlobKey: FilePrefix + strings.Repeat("A", 64)}},
	}
	for _, files := range ok {
		if err := ValidateFiles(files); err != nil {
			t.Errorf("%v: %v", files, err)
		}
	}
	for _, files := range bad {
		if err := ValidateFiles(files); !errors.Is(err, ErrInvalidEntry) {
			t.Errorf("%+v: %v, want INVALID_ENTRY", files, err)
		}
	}
}

func TestCheckID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "é😀": true, strings.Repeat("x", MaxIDBytes): true,
		"": false, "\xed\xa0\x80": false, "a\x00": false, strings.Repeat("x", MaxIDBytes+1): false, "\xff": false,
	} {
		err := CheckID("id", id)
		if (err == nil) != want || err != nil && !errors.Is(err, ErrInvalidID) {
			t.Errorf("CheckID(%q) = %v, want valid=%v", id, err, want)
		}
	}
}

func TestCodeAndIs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", Errorf(ErrStaleHead, "thread %q", "t"))
	if !errors.Is(err, ErrStaleHead) || errors.Is(err, ErrParentMismatch) {
		t.Error("errors.Is does not match the sentinel alone")
	}
	if Code(err) != CodeStaleHead || Code(errors.New("x")) != "" || Code(nil) != "" {
		t.Error("Code")
	}
	if !strings.Contains(err.Error(), `thread "t"`) {
		t.Errorf("message %q does not name the thread", err)
	}
}
