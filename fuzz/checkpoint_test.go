package fuzz

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lease"
)

// FuzzCheckpoint appends a checkpoint built from the fuzz arguments to a
// real engine store (bbolt, NoSync) and checks the outcome against an
// oracle written from SPEC §1 and §2.5 alone: identifier rules, path rules,
// entry kinds and fields, the ancestor rule, artifacts, messages, then the
// writer, duplicate id, head and parent checks, in that order.
//
// It proves that Append never panics, and that for every input:
//   - the error code is exactly the one the oracle predicts (an error always
//     carries a contract code; success exactly when the oracle has none);
//   - after a failure the store is unchanged: the thread's head and list,
//     Get of the id, and the blob references equal their values before;
//   - after a success Append returns the id, Head is the id, Get returns
//     exactly what was appended (absent lists as empty, the parent as given,
//     messages byte for byte), List is the previous list plus it in
//     (createdAt, id) order, each distinct blob key of the checkpoint gained
//     exactly one reference, and the checkpoint's JSON form (MarshalJSON)
//     parses back (ParseCheckpoint) to the same checkpoint;
//   - DeleteHead then restores the state before the append.
//
// Input: the checkpoint's id, threadId, parentCheckpointId ("" is null),
// createdAt, reason, label and sourceRunId; a scenario byte (which writer,
// whether the parent is appended first as the thread's root, which expected
// head, identifiers padded to the length limit); and a byte string decoded
// by ckDecode into up to 8 manifest entries, 4 artifacts and 4
// conversation messages.
func FuzzCheckpoint(f *testing.F) {
	for _, s := range ckSeeds() {
		f.Add(s.id, s.thread, s.parent, s.createdAt, s.reason, s.label, s.run, s.scenario, s.items)
	}
	st := &ckStore{root: f.TempDir()}
	f.Cleanup(st.close)
	f.Fuzz(func(t *testing.T, id, thread, parent string, createdAt int64, reason, label, run string, scenario byte, items []byte) {
		db := st.get(t)
		defer func() {
			if t.Failed() {
				st.close() // the next exec starts on a fresh store
			}
		}()
		switch scenario & ckLongMask {
		case ckLong4096:
			id = ckPad(id, 4096)
		case ckLongBoth:
			id, thread = ckPad(id, 4096), ckPad(thread, 4096)
		case ckLong4097:
			id = ckPad(id, 4097)
		}
		cp := &chain.Checkpoint{
			ID: id, ThreadID: thread, ParentID: parent, CreatedAt: createdAt,
			Reason: chain.Reason(reason), Label: label, SourceRunID: run,
		}
		ckDecode(cp, scenario, items)
		ckRun(t, db, st.clean, cp, scenario)
	})
}

// The baseline every exec starts from: one checkpoint in another thread,
// so that a reused id is DUPLICATE_ID and a shared blob key already has a
// reference.
const (
	ckOtherThread = "ck-other"
	ckTakenID     = "ck-taken"
	// ckReopenEvery bounds the store's growth (each fuzzed thread keeps its
	// fence counter): the store is rebuilt after this many execs.
	ckReopenEvery = 2000
)

// ckStore is the store one fuzz worker reuses across execs.
type ckStore struct {
	root  string
	n     int // execs on db
	gen   int // stores opened
	db    *engine.DB
	clean []chain.BlobRef // references of the baseline
}

func (s *ckStore) close() {
	if s.db != nil {
		s.db.Close()
		os.RemoveAll(s.db.Dir())
		s.db = nil
	}
}

// get returns the worker's store, opening a fresh one with the baseline
// when there is none yet or the current one has served ckReopenEvery execs.
func (s *ckStore) get(t *testing.T) *engine.DB {
	if s.db != nil && s.n < ckReopenEvery {
		s.n++
		return s.db
	}
	s.close()
	s.gen++
	db, err := engine.Open(filepath.Join(s.root, strconv.Itoa(s.gen)), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatalf("engine.Open: %v", err)
	}
	ctx := context.Background()
	l, err := db.AcquireWriter(ctx, ckOtherThread)
	if err != nil {
		t.Fatalf("baseline AcquireWriter: %v", err)
	}
	base := &chain.Checkpoint{
		ID: ckTakenID, ThreadID: ckOtherThread, CreatedAt: 5, Reason: chain.ReasonNamed,
		Files:        []chain.Entry{{Path: "base.txt", Kind: chain.KindFile, BlobKey: ckFileKey(0), Size: 1}},
		Conversation: []json.RawMessage{json.RawMessage(`{"role":"user","content":"base"}`)},
	}
	if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: base, Writer: l.Writer}); err != nil {
		t.Fatalf("baseline Append: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("baseline Release: %v", err)
	}
	if s.clean, err = db.BlobReferences(ctx); err != nil {
		t.Fatalf("baseline BlobReferences: %v", err)
	}
	s.db, s.n = db, 1
	return db
}

func ckFileKey(n int) string { return fmt.Sprintf("%s%064x", chain.FilePrefix, n) }
func ckArtKey(n int) string  { return fmt.Sprintf("%s%064x", chain.ArtifactPrefix, n) }

// Scenario bits.
const (
	ckWriterMask   = 0x03 // 0 the lease, 1 fabricated, 2 the lease retargeted to ckOtherThread, 3 released
	ckRootFirst    = 0x04 // append the parent id first, as the thread's root
	ckExpectNull   = 0x08 // expected head null instead of the parent
	ckNilLists     = 0x10 // no items leave Files/Artifacts/Conversation nil (else empty)
	ckExpectParent = 0x20 // with ckExpectNull: expected head is the taken id instead of null
	// ckLongMask pads identifiers to the length limit (SPEC §10 Q12) by
	// repeating them: ckLong4096 the id to 4096 bytes, ckLongBoth the id
	// and the thread to 4096, ckLong4097 the id to 4097. Seeds use it
	// instead of 4 KiB arguments, which make the fuzzer's minimization
	// (quadratic in argument length) crawl.
	ckLongMask = 0xC0
	ckLong4096 = 0x40
	ckLongBoth = 0x80
	ckLong4097 = 0xC0
)

// ckPad repeats s (or "x" if empty) to exactly n bytes; the cut may split
// a UTF-8 sequence.
func ckPad(s string, n int) string {
	if s == "" {
		s = "x"
	}
	return strings.Repeat(s, n/len(s)+1)[:n]
}

// ckPaths are paths the decoder picks by index: near neighbours in byte
// order around "a/" (for the ancestor rule and the sorted fast path of
// ValidateFiles) and every path defect of SPEC §1.2.
var ckPaths = []string{
	"a", "a/b", "a/b/c", "a-b", "a.b", "a0", "ab", "a/c", "b", "b/a",
	"dir", "dir/x", "dir/x/y", "é", "é/😀", "C:x", "ca:/x",
	"", "a//b", "..", "a/..", "./x", "a/.", "a/", "/abs", "\\abs", "a\\b",
	"C:", "c:/x", "Z:\\x", "a\x00b", "\xed\xa0\x80", "\xff/a",
}

// ckMessages are conversation messages the decoder picks by index.
var ckMessages = []string{
	`{"role":"user","content":"hi"}`,
	` {"role" : "assistant", "content" : [ {"type":"text","text":"x"} ] } `,
	`"<&>\u2028"`, `null`, `1e400`, `-0.0`, `[[[[[[[[]]]]]]]]`, `{"a":1,"a":2}`,
	"\"\xff\"", `"\ud800"`, `{"role":`, ``, `nope`, `NaN`, `1 2`,
}

// ckReader reads the item bytes; past the end it yields zeros.
type ckReader struct{ b []byte }

func (r *ckReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// str reads a length byte and that many bytes (fewer at the end).
func (r *ckReader) str() string { return r.bytes(r.byte()) }

// bytes reads n bytes (fewer at the end).
func (r *ckReader) bytes(n byte) string {
	k := min(int(n), len(r.b))
	s := string(r.b[:k])
	r.b = r.b[k:]
	return s
}

// path is a pool path (tag >= 0xC0) or raw bytes of length tag.
func (r *ckReader) path() string {
	c := r.byte()
	if c >= 0xC0 {
		return ckPaths[int(c-0xC0)%len(ckPaths)]
	}
	return r.bytes(c)
}

// key is a well-formed key of prefix from a pool of 8 (tag < 0xC0), or a
// defect.
func (r *ckReader) key(prefix string) string {
	c := r.byte()
	if c < 0xC0 {
		return fmt.Sprintf("%s%064x", prefix, c&7)
	}
	good := fmt.Sprintf("%s%064x", prefix, 1)
	switch c & 0x0F {
	case 0:
		return ""
	case 1: // the other namespace
		if prefix == chain.FilePrefix {
			return ckArtKey(1)
		}
		return ckFileKey(1)
	case 2:
		return strings.ToUpper(good[:len(prefix)]) + good[len(prefix):]
	case 3:
		return prefix + strings.Repeat("A", 64)
	case 4:
		return good[:len(good)-1]
	case 5:
		return good + "0"
	case 6:
		return good[:len(good)-3] + "\xed\xa0\x80"
	case 7:
		return "/" + good
	default:
		return r.str()
	}
}

// num is a size or time: small values, the edges of the safe range, or 8
// raw bytes.
func (r *ckReader) num() int64 {
	c := r.byte()
	switch c >> 4 {
	case 0x0C:
		return -1
	case 0x0D:
		return chain.MaxSafeInteger
	case 0x0E:
		return chain.MaxSafeInteger + 1
	case 0x0F:
		if c&1 == 0 {
			return -chain.MaxSafeInteger
		}
		var w [8]byte
		r.b = r.b[copy(w[:], r.b):]
		return int64(binary.LittleEndian.Uint64(w[:]))
	}
	return int64(c)
}

// ckDecode fills cp's files, artifacts and conversation from items. Each
// item starts with a tag byte t: t&3 is 0 or 1 for an entry, 2 for an
// artifact, 3 for a message.
//
// Entry: kind (t>>2)&3 is file, dir, symlink or a raw kind string; t&0x10
// adds a field the kind must not have; t&0x20 sets executable; then the
// path, then per kind the blob key and size, or the symlink target.
// Artifact: t&0x04 takes a raw artifactId (may be empty or invalid),
// t&0x08 empties name, t&0x10 empties mimeType; then key, size, createdAt.
// Message: a pool message (next byte < 0x80) or raw bytes.
func ckDecode(cp *chain.Checkpoint, scenario byte, items []byte) {
	if scenario&ckNilLists == 0 {
		cp.Files, cp.Artifacts, cp.Conversation = []chain.Entry{}, []chain.Artifact{}, []json.RawMessage{}
	}
	r := &ckReader{b: items}
	for n := 0; len(r.b) > 0 && n < 16; n++ {
		t := r.byte()
		switch t & 3 {
		case 0, 1:
			if len(cp.Files) >= 8 {
				continue
			}
			cp.Files = append(cp.Files, ckEntry(r, t))
		case 2:
			if len(cp.Artifacts) >= 4 {
				continue
			}
			a := chain.Artifact{ArtifactID: r.str(), Name: "out.bin", MimeType: "application/octet-stream"}
			if t&0x04 == 0 {
				a.ArtifactID = "art-" + a.ArtifactID
			}
			if t&0x08 != 0 {
				a.Name = ""
			}
			if t&0x10 != 0 {
				a.MimeType = ""
			}
			a.BlobKey, a.Size, a.CreatedAt = r.key(chain.ArtifactPrefix), r.num(), r.num()
			cp.Artifacts = append(cp.Artifacts, a)
		case 3:
			if len(cp.Conversation) >= 4 {
				continue
			}
			var m string
			if c := r.byte(); c < 0x80 {
				m = ckMessages[int(c)%len(ckMessages)]
			} else {
				m = r.str()
			}
			cp.Conversation = append(cp.Conversation, json.RawMessage(m))
		}
	}
}

func ckEntry(r *ckReader, t byte) chain.Entry {
	var e chain.Entry
	switch (t >> 2) & 3 {
	case 0:
		e.Kind = chain.KindFile
	case 1:
		e.Kind = chain.KindDir
	case 2:
		e.Kind = chain.KindSymlink
	default:
		e.Kind = chain.Kind(r.str())
	}
	e.Path = r.path()
	e.Executable = t&0x20 != 0
	switch e.Kind {
	case chain.KindFile:
		e.BlobKey, e.Size = r.key(chain.FilePrefix), r.num()
		if t&0x10 != 0 {
			e.Target = "x"
		}
	case chain.KindSymlink:
		switch c := r.byte(); c {
		case 0xFF:
			e.Target = ""
		case 0xFE:
			e.Target = "a\x00b"
		case 0xFD:
			e.Target = "\xed\xa0\x80"
		case 0xFC:
			e.Target = "/etc/passwd"
		default:
			e.Target = "../" + r.bytes(c)
		}
		if t&0x10 != 0 {
			ckStray(r, &e)
		}
	default:
		if t&0x10 != 0 {
			ckStray(r, &e)
		}
	}
	return e
}

// ckStray gives a dir or symlink a file field.
func ckStray(r *ckReader, e *chain.Entry) {
	switch r.byte() & 3 {
	case 0:
		e.BlobKey = ckFileKey(1)
	case 1:
		e.Size = 1 + r.num()&0xFF
	case 2:
		e.Executable = true
	default:
		if e.Kind == chain.KindDir {
			e.Target = "x"
		} else {
			e.BlobKey = "x"
		}
	}
}

// ckState is what a failed append must leave unchanged.
type ckState struct {
	head string
	list []*chain.Checkpoint
	get  *chain.Checkpoint
	refs []chain.BlobRef
}

func ckSnapshot(t *testing.T, db *engine.DB, thread, id string) ckState {
	t.Helper()
	ctx := context.Background()
	var s ckState
	var err error
	if chain.CheckID("", thread) == nil {
		if s.head, err = db.Head(ctx, thread); err != nil {
			t.Fatalf("Head(%q): %v", thread, err)
		}
		if s.list, err = db.List(ctx, thread); err != nil {
			t.Fatalf("List(%q): %v", thread, err)
		}
	}
	if chain.CheckID("", id) == nil {
		if s.get, err = db.Get(ctx, id); err != nil {
			t.Fatalf("Get(%q): %v", id, err)
		}
	}
	if s.refs, err = db.BlobReferences(ctx); err != nil {
		t.Fatalf("BlobReferences: %v", err)
	}
	return s
}

// ckRun appends cp in the scenario's setting, checks the outcome and the
// state, and restores the store's baseline.
func ckRun(t *testing.T, db *engine.DB, baseline []chain.BlobRef, cp *chain.Checkpoint, scenario byte) {
	ctx := context.Background()
	thread := cp.ThreadID
	var l *lease.Lease
	if ckBadID(thread) == "" {
		var err error
		if l, err = db.AcquireWriter(ctx, thread); err != nil {
			t.Fatalf("AcquireWriter(%q) on a store with no live lease: %v", thread, err)
		}
	}
	// Restore the baseline whatever happens: delete what this exec
	// appended (newest first), release the lease, and check that the
	// thread and the references are as they were.
	var appended []string
	defer func() {
		if l != nil {
			for i := len(appended) - 1; i >= 0; i-- {
				if err := db.DeleteHead(ctx, thread, appended[i], l.Writer); err != nil {
					t.Fatalf("cleanup DeleteHead(%q, %q): %v", thread, appended[i], err)
				}
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("cleanup Release: %v", err)
			}
			wantHead := ""
			if thread == ckOtherThread {
				wantHead = ckTakenID
			}
			if h, err := db.Head(ctx, thread); err != nil || h != wantHead {
				t.Fatalf("after cleanup Head(%q) = %q, %v; want %q", thread, h, err, wantHead)
			}
		}
		if refs, err := db.BlobReferences(ctx); err != nil || !slices.Equal(refs, baseline) {
			t.Fatalf("after cleanup BlobReferences = %v, %v; want the baseline %v", refs, err, baseline)
		}
	}()

	// The root: the parent appended first, when the scenario asks and it
	// can be appended (a valid id not used yet).
	rootOK := false
	if scenario&ckRootFirst != 0 && l != nil && ckBadID(cp.ParentID) == "" && cp.ParentID != ckTakenID && thread != ckOtherThread {
		root := &chain.Checkpoint{
			ID: cp.ParentID, ThreadID: thread, CreatedAt: 3, Reason: chain.ReasonAutomatic,
			Files: []chain.Entry{{Path: "root.txt", Kind: chain.KindFile, BlobKey: ckFileKey(1), Size: 2}},
		}
		if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: root, Writer: l.Writer}); err != nil {
			t.Fatalf("root Append(%q): %v", root.ID, err)
		}
		appended = append(appended, root.ID)
		rootOK = true
	}

	in := chain.AppendInput{Checkpoint: cp, ExpectedHeadID: cp.ParentID}
	if scenario&ckExpectNull != 0 {
		in.ExpectedHeadID = ""
		if scenario&ckExpectParent != 0 {
			in.ExpectedHeadID = ckTakenID
		}
	}
	// The writer, and whether it is the thread's live lease.
	live := false
	switch scenario & ckWriterMask {
	case 0:
		if l != nil {
			in.Writer, live = l.Writer, true
		} else {
			in.Writer = lease.Writer{ThreadID: thread, OwnerToken: "none", Fence: 1}
		}
	case 1:
		in.Writer = lease.Writer{ThreadID: thread, OwnerToken: "fabricated", Fence: 1}
	case 2:
		if l != nil {
			in.Writer = l.Writer
			live = thread == ckOtherThread
		}
		in.Writer.ThreadID = ckOtherThread
	case 3:
		if l != nil {
			in.Writer = l.Writer
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			// Cleanup deletes with a fresh lease.
			defer func() {
				var err error
				if l, err = db.AcquireWriter(ctx, thread); err != nil {
					t.Fatalf("re-AcquireWriter(%q): %v", thread, err)
				}
			}()
		} else {
			in.Writer = lease.Writer{ThreadID: thread, OwnerToken: "released", Fence: 1}
		}
	}

	head := ""
	switch {
	case rootOK:
		head = cp.ParentID
	case thread == ckOtherThread:
		head = ckTakenID
	}
	want := ckExpect(in, live, head, func(id string) bool { return id == ckTakenID || rootOK && id == cp.ParentID })

	before := ckSnapshot(t, db, thread, cp.ID)
	input := cp.Clone()
	gotHead, err := db.Append(ctx, in)
	if err == nil {
		appended = append(appended, cp.ID)
	}
	if got := chain.Code(err); got != want || (err != nil) != (want != "") {
		t.Fatalf("Append(%s) = %q, %v; oracle expects code %q", ckShow(in), gotHead, err, want)
	}
	if d := cmp.Diff(input, cp, ckEmpty); d != "" {
		t.Fatalf("Append changed its input:\n%s", d)
	}
	after := ckSnapshot(t, db, thread, cp.ID)
	if err != nil {
		if d := cmp.Diff(before, after, cmp.AllowUnexported(ckState{}), ckEmpty); d != "" {
			t.Fatalf("Append failed with %v but changed the store (-before +after):\n%s", err, d)
		}
		return
	}

	// Success.
	if gotHead != cp.ID || after.head != cp.ID {
		t.Fatalf("Append returned head %q, Head is %q; want %q", gotHead, after.head, cp.ID)
	}
	wantCP := input.Clone()
	if d := cmp.Diff(wantCP, after.get, ckEmpty); d != "" {
		t.Fatalf("Get after Append (-appended +stored):\n%s", d)
	}
	wantList := append(slices.Clone(before.list), wantCP)
	slices.SortFunc(wantList, func(a, b *chain.Checkpoint) int {
		if a.CreatedAt != b.CreatedAt {
			if a.CreatedAt < b.CreatedAt {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	if d := cmp.Diff(wantList, after.list, ckEmpty); d != "" {
		t.Fatalf("List after Append (-want +got):\n%s", d)
	}
	if d := cmp.Diff(ckAddRefs(before.refs, input), after.refs); d != "" {
		t.Fatalf("BlobReferences after Append (-want +got):\n%s", d)
	}
	// The JSON form parses back to the same checkpoint. Strings that are
	// not valid UTF-8 cannot survive encoding/json (FuzzJSON's known
	// finding), so only checkpoints without them are compared here.
	if ckAllUTF8(after.get) {
		b, err := json.Marshal(after.get)
		if err != nil {
			t.Fatalf("json.Marshal of a stored checkpoint: %v", err)
		}
		back, err := chain.ParseCheckpoint(b)
		if err != nil {
			t.Fatalf("ParseCheckpoint rejects the JSON of a checkpoint Append accepted: %v\n%s", err, b)
		}
		norm := after.get.Clone()
		for i, m := range norm.Conversation {
			norm.Conversation[i] = jsMarshaledMessage(m)
		}
		if d := cmp.Diff(norm, back, ckEmpty); d != "" {
			t.Fatalf("checkpoint JSON round trip (-stored +parsed):\n%s\n%s", d, b)
		}
	}
}

// ckExpect is the oracle: the code Append must return, "" for success. It
// follows SPEC §1 and the check order of §2.5 (§10 Q6), written
// independently of chain's validators. live reports whether in.Writer is
// the current lease of the checkpoint's thread; head is the thread's head;
// exists reports whether an id is used in any thread.
func ckExpect(in chain.AppendInput, live bool, head string, exists func(string) bool) string {
	cp := in.Checkpoint
	ids := []string{cp.ID, cp.ThreadID, in.Writer.ThreadID}
	if in.ExpectedHeadID != "" {
		ids = append(ids, in.ExpectedHeadID)
	}
	if cp.ParentID != "" {
		ids = append(ids, cp.ParentID)
	}
	for _, id := range ids {
		if ckBadID(id) != "" {
			return chain.CodeInvalidID
		}
	}
	if ckBadContent(cp) != "" {
		return chain.CodeInvalidEntry
	}
	switch {
	case in.Writer.ThreadID != cp.ThreadID || !live:
		return chain.CodeWriterLost
	case exists(cp.ID):
		return chain.CodeDuplicateID
	case head != in.ExpectedHeadID:
		return chain.CodeStaleHead
	case cp.ParentID != in.ExpectedHeadID:
		return chain.CodeParentMismatch
	}
	return ""
}

// ckBadID says why id is not a valid identifier (SPEC §1.6, §10 Q10, Q12),
// or "".
func ckBadID(id string) string {
	switch {
	case id == "":
		return "empty"
	case len(id) > 4096:
		return "longer than 4096 bytes"
	case !utf8.ValidString(id):
		return "not UTF-8"
	case strings.Contains(id, "\x00"):
		return "NUL"
	}
	return ""
}

const ckMaxSafe = 1<<53 - 1

// ckEmpty makes nil and empty lists equal: the contract does not tell them
// apart (stores return empty lists, JSON renders both as []).
var ckEmpty = cmpopts.EquateEmpty()

var (
	ckFileKeyRE = regexp.MustCompile(`^sandbox-files/sha256/[0-9a-f]{64}$`)
	ckArtKeyRE  = regexp.MustCompile(`^sandbox-artifacts/sha256/[0-9a-f]{64}$`)
)

// ckBadContent says what is wrong with cp's createdAt, reason, files,
// artifacts or messages (SPEC §1.1–1.3, §10 Q5, Q9, Q13), or "".
func ckBadContent(cp *chain.Checkpoint) string {
	if cp.CreatedAt > ckMaxSafe || cp.CreatedAt < -ckMaxSafe {
		return "createdAt"
	}
	switch cp.Reason {
	case "automatic", "named", "fork-root":
	default:
		return "reason"
	}
	for i, e := range cp.Files {
		if why := ckBadPath(e.Path); why != "" {
			return fmt.Sprintf("files[%d] path: %s", i, why)
		}
		switch e.Kind {
		case "file":
			if !ckFileKeyRE.MatchString(e.BlobKey) || e.Size < 0 || e.Size > ckMaxSafe || e.Target != "" {
				return fmt.Sprintf("files[%d] file fields", i)
			}
		case "dir":
			if e.BlobKey != "" || e.Size != 0 || e.Executable || e.Target != "" {
				return fmt.Sprintf("files[%d] dir fields", i)
			}
		case "symlink":
			if e.BlobKey != "" || e.Size != 0 || e.Executable ||
				e.Target == "" || !utf8.ValidString(e.Target) || strings.Contains(e.Target, "\x00") {
				return fmt.Sprintf("files[%d] symlink fields", i)
			}
		default:
			return fmt.Sprintf("files[%d] kind", i)
		}
		for j, o := range cp.Files {
			if j == i {
				continue
			}
			if o.Path == e.Path {
				return fmt.Sprintf("files[%d] and files[%d] share a path", i, j)
			}
			if e.Kind != "dir" && strings.HasPrefix(o.Path, e.Path+"/") {
				return fmt.Sprintf("files[%d] lies beneath %s files[%d]", j, e.Kind, i)
			}
		}
	}
	for i, a := range cp.Artifacts {
		if a.ArtifactID == "" || !utf8.ValidString(a.ArtifactID) || a.Name == "" || a.MimeType == "" ||
			!ckArtKeyRE.MatchString(a.BlobKey) || a.Size < 0 || a.Size > ckMaxSafe ||
			a.CreatedAt > ckMaxSafe || a.CreatedAt < -ckMaxSafe {
			return fmt.Sprintf("artifacts[%d]", i)
		}
	}
	for i, m := range cp.Conversation {
		if !json.Valid(m) {
			return fmt.Sprintf("conversation[%d]", i)
		}
	}
	return ""
}

// ckBadPath applies the path rules of SPEC §1.2 as written there.
func ckBadPath(p string) string {
	letter := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	switch {
	case p == "":
		return "empty"
	case strings.Contains(p, "\x00"):
		return "NUL"
	case strings.HasPrefix(p, "/"):
		return "leading /"
	case strings.HasPrefix(p, "\\"):
		return "leading \\"
	case len(p) >= 2 && letter(p[0]) && p[1] == ':' && (len(p) == 2 || p[2] == '/' || p[2] == '\\'):
		return "drive"
	case strings.Contains(p, "\\"):
		return "backslash"
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "segment " + strconv.Quote(seg)
		}
	}
	return ""
}

// ckAddRefs is refs plus one reference for each distinct blob key of cp
// (file entries and artifacts), in key order (SPEC §1.5).
func ckAddRefs(refs []chain.BlobRef, cp *chain.Checkpoint) []chain.BlobRef {
	counts := map[string]int64{}
	for _, r := range refs {
		counts[r.Key] = r.References
	}
	distinct := map[string]bool{}
	for _, e := range cp.Files {
		if e.Kind == chain.KindFile {
			distinct[e.BlobKey] = true
		}
	}
	for _, a := range cp.Artifacts {
		distinct[a.BlobKey] = true
	}
	for k := range distinct {
		counts[k]++
	}
	out := make([]chain.BlobRef, 0, len(counts))
	for k, n := range counts {
		out = append(out, chain.BlobRef{Key: k, References: n})
	}
	slices.SortFunc(out, func(a, b chain.BlobRef) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// ckAllUTF8 reports whether every string of cp is valid UTF-8.
func ckAllUTF8(cp *chain.Checkpoint) bool {
	ss := []string{cp.ID, cp.ThreadID, cp.ParentID, string(cp.Reason), cp.Label, cp.SourceRunID}
	for _, e := range cp.Files {
		ss = append(ss, e.Path, string(e.Kind), e.BlobKey, e.Target)
	}
	for _, a := range cp.Artifacts {
		ss = append(ss, a.ArtifactID, a.Name, a.MimeType, a.BlobKey)
	}
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// ckShow renders an append input for failure messages.
func ckShow(in chain.AppendInput) string {
	return fmt.Sprintf("expected=%q writer=%+v checkpoint=%+v", in.ExpectedHeadID, in.Writer, *in.Checkpoint)
}

// ckSeed is one seed of FuzzCheckpoint.
type ckSeed struct {
	id, thread, parent string
	createdAt          int64
	reason, label, run string
	scenario           byte
	items              []byte
}

// Seed item builders (see ckDecode). Paths are raw (length < 0xC0); keys
// are pool tags (< 0xC0: pool key n&7) or defects (0xC0|n, see key); sizes
// and times are num tags (< 0xC0 the value itself; 0xC0 -1, 0xD0 2^53−1,
// 0xE0 2^53, 0xF0 −(2^53−1)).
func ckItems(items ...[]byte) []byte { return bytes.Join(items, nil) }

func ckFile(path string, key, size byte) []byte {
	return append(append([]byte{0x00, byte(len(path))}, path...), key, size)
}

func ckExecFile(path string, key, size byte) []byte {
	b := ckFile(path, key, size)
	b[0] |= 0x20
	return b
}

func ckDir(path string) []byte { return append([]byte{0x04, byte(len(path))}, path...) }

func ckLink(path, target string) []byte {
	return append(append(append([]byte{0x08, byte(len(path))}, path...), byte(len(target))), target...)
}

// ckStrayEntry is a dir (kind 1) or symlink (kind 2) carrying a file field
// (field: 0 blobKey, 1 size, 2 executable, 3 target or raw blobKey).
func ckStrayEntry(kind byte, path string, field byte) []byte {
	b := append([]byte{kind<<2 | 0x10, byte(len(path))}, path...)
	if kind == 2 {
		b = append(b, 1, 'x')
	}
	return append(b, field)
}

func ckKindEntry(kind, path string) []byte {
	b := append([]byte{0x0C, byte(len(kind))}, kind...)
	return append(append(b, byte(len(path))), path...)
}

func ckArt(id string, flags, key, size, createdAt byte) []byte {
	return append(append([]byte{0x02 | flags, byte(len(id))}, id...), key, size, createdAt)
}

func ckMsg(pool byte) []byte { return []byte{0x03, pool} }

func ckRawMsg(m string) []byte { return append([]byte{0x03, 0x80, byte(len(m))}, m...) }

// ckSeeds are the nasty cases of SPEC §9 (U11–U25, C8, S4, S5, Y1, D4) and
// each branch of the oracle.
func ckSeeds() []ckSeed {
	one := ckItems(ckFile("1.txt", 1, 1), ckMsg(0))
	seeds := []ckSeed{
		// Valid: a root; a child on a root; on the baseline thread.
		{"1", "thread-a", "", 1, "automatic", "", "", 0, one},
		{"2", "thread-a", "1", 2, "named", "label", "run-1", ckRootFirst, ckItems(
			ckDir("dir"), ckFile("dir/x", 2, 5), ckLink("link", "dir/x"), ckExecFile("run.sh", 2, 0),
			ckArt("a1", 0, 1, 3, 4), ckArt("a1", 0, 1, 3, 4), ckMsg(1), ckMsg(2))},
		{"child", ckOtherThread, ckTakenID, 9, "fork-root", "", "", 0, ckItems(ckFile("base.txt", 0, 1))},
		{"é", "😀", "", -ckMaxSafe, "automatic", "", "", 0, nil},
		{"nil-lists", "thread-a", "", ckMaxSafe, "named", "", "", ckNilLists, nil},
		{"x", "y", "", 0, "automatic", "", "", ckLongBoth, one},
		{"x", "y", "", 0, "automatic", "", "", ckLong4096, one},
		{"c-x", "t", "", 0, "automatic", "", "", 0, ckItems(ckFile("C:x", 1, 1), ckFile("ca:/x", 1, 1))},
		{"sizes", "t", "", 0, "automatic", "", "", 0, ckItems(ckFile("max", 1, 0xD0), ckFile("zero", 1, 0))},
		{"shared", "t", "", 0, "automatic", "", "", 0, ckItems(ckFile("a", 3, 1), ckFile("b", 3, 1), ckFile("c", 0, 1), ckArt("x", 0, 3, 1, 1), ckArt("y", 0, 3, 1, 1))},
		{"sorted", "t", "", 0, "automatic", "", "", 0, ckItems(ckFile("a", 1, 1), ckFile("a-b", 1, 1), ckFile("a.b", 1, 1), ckDir("a0"), ckFile("b", 1, 1))},
		{"dir-parent", "t", "", 0, "automatic", "", "", 0, ckItems(ckDir("a"), ckFile("a/b", 1, 1), ckDir("a/c"), ckFile("a/c/d", 1, 1))},
		{"label", "t", "", 0, "automatic", "\xed\xa0\x80\xff", "\x00", 0, one},

		// INVALID_ID (U11, U12, U13, C8, Q10, Q12).
		{"\xed\xa0\x80", "t", "", 1, "automatic", "", "", 0, one},
		{"a\x00b", "t", "", 1, "automatic", "", "", 0, one},
		{"1", "t\x00", "", 1, "automatic", "", "", 0, one},
		{"", "t", "", 1, "automatic", "", "", 0, one},
		{"1", "", "", 1, "automatic", "", "", 0, one},
		{"1", "t", "\xed\xa0\x80", 1, "automatic", "", "", 0, one},
		{"x", "t", "", 1, "automatic", "", "", ckLong4097, one},
		{"éx", "t", "", 1, "automatic", "", "", ckLong4096, one},               // ends in half an é
		{"1", "t", "\xff", 1, "bogus", "", "", 0, ckItems(ckFile("..", 1, 1))}, // ids before content

		// INVALID_ENTRY: createdAt, reason (C9–C11 have no int64 form; Q13).
		{"1", "t", "", ckMaxSafe + 1, "automatic", "", "", 0, one},
		{"1", "t", "", -ckMaxSafe - 1, "automatic", "", "", 0, one},
		{"1", "t", "", -1 << 63, "automatic", "", "", 0, one},
		{"1", "t", "", 1, "bogus", "", "", 0, one},
		{"1", "t", "", 1, "", "", "", 0, one},
		{"1", "t", "", 1, "Automatic", "", "", 0, one},

		// INVALID_ENTRY: paths (U21, U23, S4).
		{"p1", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("bad\x00name", 1, 1))},
		{"p2", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("nested/../bad", 1, 1))},
		{"p3", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("nested//bad", 1, 1))},
		{"p4", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("/absolute", 1, 1))},
		{"p5", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("C:/absolute", 1, 1))},
		{"p6", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("\\absolute.txt", 1, 1))},
		{"p7", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("..", 1, 1))},
		{"p8", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("./x", 1, 1))},
		{"p9", "t", "", 1, "automatic", "", "", 0, ckItems(ckDir("nested/"))},
		{"p10", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("", 1, 1))},
		{"p11", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("a\\b", 1, 1))},
		{"p12", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("c:", 1, 1))},
		{"p13", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("Z:\\x", 1, 1))},
		{"p14", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("a/.", 1, 1))},
		{"p15", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("\xed\xa0\x80", 1, 1))}, // accepted: no Unicode check on paths

		// INVALID_ENTRY: duplicates and the ancestor rule (U24, S4, Y1).
		{"d1", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("same", 1, 1), ckDir("same"))},
		{"d2", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("a", 1, 1), ckFile("a/b", 1, 1))},
		{"d3", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("a/b", 1, 1), ckFile("a", 1, 1))},
		{"d4", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("a", 1, 1), ckFile("a-b", 1, 1), ckFile("a/c", 1, 1))},
		{"d5", "t", "", 1, "automatic", "", "", 0, ckItems(ckLink("l", "x"), ckDir("l/d"))},
		{"d6", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("a/b/c", 1, 1), ckDir("a"), ckLink("a/b", "x"))},
		{"d7", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("x/y", 1, 1), ckFile("x.y", 1, 1), ckFile("x", 1, 1))},

		// INVALID_ENTRY: fields (U18–U20, U22, S4, Y1, Q5).
		{"f1", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("neg", 1, 0xC0))},
		{"f2", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("big", 1, 0xE0))},
		{"f3", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("k", 0xC0, 1))}, // empty key
		{"f4", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("k", 0xC1, 1))}, // artifact namespace
		{"f5", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("k", 0xC3, 1))}, // uppercase hex
		{"f6", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("k", 0xC4, 1))}, // 63 digits
		{"f7", "t", "", 1, "automatic", "", "", 0, ckItems(ckFile("k", 0xC6, 1))}, // lone surrogate in key (C8)
		{"f8", "t", "", 1, "automatic", "", "", 0, ckItems(ckStrayEntry(1, "d", 0))},
		{"f9", "t", "", 1, "automatic", "", "", 0, ckItems(ckStrayEntry(1, "d", 1))},
		{"f10", "t", "", 1, "automatic", "", "", 0, ckItems(ckStrayEntry(1, "d", 2))},
		{"f11", "t", "", 1, "automatic", "", "", 0, ckItems(ckStrayEntry(2, "l", 0))},
		{"f12", "t", "", 1, "automatic", "", "", 0, ckItems(ckStrayEntry(2, "l", 1))},
		{"f13", "t", "", 1, "automatic", "", "", 0, ckItems([]byte{0x08, 1, 'l', 0xFF})}, // empty target
		{"f14", "t", "", 1, "automatic", "", "", 0, ckItems([]byte{0x08, 1, 'l', 0xFE})}, // NUL in target
		{"f15", "t", "", 1, "automatic", "", "", 0, ckItems([]byte{0x08, 1, 'l', 0xFD})}, // surrogate target
		{"f16", "t", "", 1, "automatic", "", "", 0, ckItems([]byte{0x08, 1, 'l', 0xFC})}, // absolute target: accepted
		{"f17", "t", "", 1, "automatic", "", "", 0, ckItems(ckKindEntry("other", "o"))},
		{"f18", "t", "", 1, "automatic", "", "", 0, ckItems(ckKindEntry("File", "o"))},
		{"f19", "t", "", 1, "automatic", "", "", 0, ckItems([]byte{0x10, 1, 'f', 1, 1})}, // file with a target

		// INVALID_ENTRY: artifacts (U25) and messages (Q9).
		{"a1", "t", "", 1, "automatic", "", "", 0, ckItems(ckArt("", 0x04, 1, 1, 1))},
		{"a2", "t", "", 1, "automatic", "", "", 0, ckItems(ckArt("x", 0x08, 1, 1, 1))},
		{"a3", "t", "", 1, "automatic", "", "", 0, ckItems(ckArt("x", 0x10, 1, 1, 1))},
		{"a4", "t", "", 1, "automatic", "", "", 0, ckItems(ckArt("x", 0, 0xC1, 1, 1))},
		{"a5", "t", "", 1, "automatic", "", "", 0, ckItems(ckArt("x", 0, 1, 0xC0, 1))},
		{"a6", "t", "", 1, "automatic", "", "", 0, ckItems(ckArt("x", 0, 1, 1, 0xE0))},
		{"a7", "t", "", 1, "automatic", "", "", 0, ckItems(ckArt("\xed\xa0\x80", 0x04, 1, 1, 1))},
		{"m1", "t", "", 1, "automatic", "", "", 0, ckItems(ckRawMsg(`{"role":`))},
		{"m2", "t", "", 1, "automatic", "", "", 0, ckItems(ckRawMsg(``))},
		{"m3", "t", "", 1, "automatic", "", "", 0, ckItems(ckRawMsg("\"\xff\""), ckRawMsg(` [ 1 , 2 ] `), ckRawMsg(`"\ud800"`))},

		// Writer, duplicate, head and parent (U7, U9, U10, C3, C4, C17).
		{"w1", "t", "", 1, "automatic", "", "", 1, one},
		{"w2", "t", "", 1, "automatic", "", "", 2, one},
		{"w3", ckOtherThread, ckTakenID, 1, "automatic", "", "", 2, one},
		{"w4", "t", "", 1, "automatic", "", "", 3, one},
		{"w5", "t", "", 1, "bogus", "", "", 3, one}, // content before writer
		{ckTakenID, "t", "", 1, "automatic", "", "", 0, one},
		{ckTakenID, "t", "", 1, "automatic", "", "", 1, one}, // writer before duplicate
		{"p", "t", "p", 1, "automatic", "", "", ckRootFirst, one},
		{"s1", "t", "r", 1, "automatic", "", "", ckRootFirst | ckExpectNull, one},
		{"s2", "t", "r", 1, "automatic", "", "", ckExpectNull, one},
		{"s3", "t", "", 1, "automatic", "", "", ckExpectNull | ckExpectParent, one},
		{"s4", "t", "r", 1, "automatic", "", "", 0, one},
		{"pm", ckOtherThread, "", 1, "automatic", "", "", ckExpectNull | ckExpectParent, one},
		{"pm2", ckOtherThread, "other", 1, "automatic", "", "", ckExpectNull | ckExpectParent, one},
	}
	return seeds
}
