package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
)

// kase is one named subtest of a Run* entry point.
type kase struct {
	name string
	run  func(e *env)
}

// runCases runs each case as a subtest with a fresh store.
func runCases(t *testing.T, newStore Factory, cases []kase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, newStore)) })
	}
}

// env is one subtest's store with the suite's conveniences: a movable clock
// (frozen at 1000 ms unless a case moves it), one cached writer per thread,
// and the set of threads and ids the case touched, which "unchanged"
// snapshots cover.
type env struct {
	t       *testing.T
	sub     *Subject
	s       sbxdb.Store
	clock   *Clock
	writers map[string]chain.Writer
	threads map[string]bool
	ids     map[string]bool
}

func newEnv(t *testing.T, newStore Factory) *env {
	t.Helper()
	clock := NewClock(1000)
	sub := newStore(t, ConformanceOptions(clock))
	if sub == nil || sub.Store == nil {
		t.Fatal("factory returned no store")
	}
	return &env{t: t, sub: sub, s: sub.Store, clock: clock,
		writers: map[string]chain.Writer{}, threads: map[string]bool{}, ids: map[string]bool{}}
}

var bg = context.Background()

// Values used throughout the kit.
const (
	lone = "\xed\xa0\x80" // '\uD800' as Go sees it: invalid UTF-8
	// leaseMs and renewMs are the durations of ConformanceOptions.
	leaseMs = 100
	renewMs = 25
)

// track records threads whose head, list and transcript the state snapshots
// cover.
func (e *env) track(threads ...string) {
	for _, th := range threads {
		e.threads[th] = true
	}
}

// trackIDs records checkpoint ids that the state snapshots Get.
func (e *env) trackIDs(ids ...string) {
	for _, id := range ids {
		e.ids[id] = true
	}
}

// needHook skips the subtest when the subject lacks a hook.
func (e *env) needHook(name string, present bool) {
	e.t.Helper()
	if !present {
		e.t.Skipf("store offers no %s hook", name)
	}
}

// ---- checkpoints ----

// digits returns the number formed by the ASCII digits of id, or 1.
func digits(id string) int64 {
	var b strings.Builder
	for _, r := range id {
		if r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	n, err := strconv.ParseInt(b.String(), 10, 64)
	if err != nil || n > chain.MaxSafeInteger {
		return 1
	}
	return n
}

// artKey is a valid artifact blob key: n in hex, left-padded to 64 (as
// testkit.FileKey makes file keys).
func artKey(n int64) string { return chain.ArtifactPrefix + fmt.Sprintf("%064x", n) }

// msg is the conversation message {"role":"user","content":text}.
func msg(text string) json.RawMessage {
	b, err := json.Marshal(struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}{"user", text})
	if err != nil {
		panic(err)
	}
	return b
}

func file(path, key string) chain.Entry {
	return chain.Entry{Path: path, Kind: chain.KindFile, BlobKey: key, Size: 1}
}

func artifact(id string, key string) chain.Artifact {
	return chain.Artifact{ArtifactID: id, Name: id + ".txt", MimeType: "text/plain", BlobKey: key, Size: 1, CreatedAt: 1}
}

// cp is the suite's helper checkpoint (SPEC §9): createdAt the digits of id
// (or 1), reason automatic, one file "<id>.txt" whose key is those digits in
// hex, conversation [{"role":"user","content":id}], no artifacts.
func cp(id, thread, parent string) *chain.Checkpoint {
	n := digits(id)
	return &chain.Checkpoint{
		ID: id, ThreadID: thread, ParentID: parent, CreatedAt: n,
		Reason:       chain.ReasonAutomatic,
		Files:        []chain.Entry{file(id+".txt", testkit.FileKey(n))},
		Conversation: []json.RawMessage{msg(id)},
	}
}

// with returns a copy of c changed by fn.
func with(c *chain.Checkpoint, fn func(c *chain.Checkpoint)) *chain.Checkpoint {
	c = c.Clone()
	fn(c)
	return c
}

// scribble changes, in place, every part of c that a store could share
// with its own copy: fields, entries, artifacts, message bytes, and the
// spare capacity of each slice.
func scribble(c *chain.Checkpoint) {
	c.ID, c.ThreadID, c.ParentID, c.Label, c.SourceRunID = "m", "m", "m", "m", "m"
	c.CreatedAt++
	for i := range c.Files {
		c.Files[i].Path += "m"
		c.Files[i].BlobKey += "m"
	}
	for i := range c.Artifacts {
		c.Artifacts[i].Name += "m"
	}
	scribbleMsgs(c.Conversation)
	c.Files = append(c.Files, file("extra", testkit.FileKey(9)))
	c.Artifacts = append(c.Artifacts, artifact("extra", artKey(9)))
	c.Conversation = append(c.Conversation, msg("extra"))
}

// scribbleMsgs overwrites the first byte of every message.
func scribbleMsgs(msgs []json.RawMessage) {
	for _, m := range msgs {
		if len(m) > 0 {
			m[0] = 'X'
		}
	}
}

func ids(cps []*chain.Checkpoint) []string {
	out := make([]string, len(cps))
	for i, c := range cps {
		out[i] = c.ID
	}
	return out
}

func ref(key string, n int64) chain.BlobRef { return chain.BlobRef{Key: key, References: n} }

// ---- writers and writes ----

// writer returns the cached writer of thread, acquiring it on first use.
// The suite never releases it.
func (e *env) writer(thread string) chain.Writer {
	e.t.Helper()
	if w, ok := e.writers[thread]; ok {
		return w
	}
	w := e.acquire(thread).Writer
	e.writers[thread] = w
	return w
}

// acquire takes a fresh lease on thread, failing the test on error.
func (e *env) acquire(thread string) *lease.Lease {
	e.t.Helper()
	e.track(thread)
	l, err := e.s.AcquireWriter(bg, thread)
	if err != nil {
		e.t.Fatalf("AcquireWriter(%q): %v", thread, err)
	}
	if l == nil {
		e.t.Fatalf("AcquireWriter(%q) returned a nil lease", thread)
	}
	return l
}

// trackAppend records what an append of c by w names.
func (e *env) trackAppend(c *chain.Checkpoint, w chain.Writer) {
	if c != nil {
		e.track(c.ThreadID)
		e.trackIDs(c.ID)
		if c.ParentID != "" {
			e.trackIDs(c.ParentID)
		}
	}
	e.track(w.ThreadID)
}

// tryAppend appends c on expected with w, tracking what it names.
func (e *env) tryAppend(c *chain.Checkpoint, expected string, w chain.Writer) (string, error) {
	e.trackAppend(c, w)
	return e.s.Append(bg, chain.AppendInput{Checkpoint: c, ExpectedHeadID: expected, Writer: w})
}

// appendErr appends with the cached writer of c's thread and returns the error.
func (e *env) appendErr(c *chain.Checkpoint, expected string) error {
	e.t.Helper()
	_, err := e.tryAppend(c, expected, e.writer(c.ThreadID))
	return err
}

// append appends with the cached writer and requires success.
func (e *env) append(c *chain.Checkpoint, expected string) {
	e.t.Helper()
	e.appendWith(c, expected, e.writer(c.ThreadID))
}

func (e *env) appendWith(c *chain.Checkpoint, expected string, w chain.Writer) {
	e.t.Helper()
	head, err := e.tryAppend(c, expected, w)
	if err != nil {
		e.t.Fatalf("Append(%q, expected %q): %v", c.ID, expected, err)
	}
	if head != c.ID {
		e.t.Fatalf("Append(%q) returned head %q, want %q", c.ID, head, c.ID)
	}
}

// chain appends helper checkpoints ids[0] ← ids[1] ← … to thread.
func (e *env) chain(thread string, ids ...string) {
	e.t.Helper()
	parent := ""
	for _, id := range ids {
		e.append(cp(id, thread, parent), parent)
		parent = id
	}
}

func (e *env) deleteHead(thread, id string) {
	e.t.Helper()
	e.track(thread)
	e.trackIDs(id)
	if err := e.s.DeleteHead(bg, thread, id, e.writer(thread)); err != nil {
		e.t.Fatalf("DeleteHead(%q, %q): %v", thread, id, err)
	}
}

func (e *env) saveThread(thread string, msgs ...json.RawMessage) {
	e.t.Helper()
	e.track(thread)
	if msgs == nil {
		msgs = []json.RawMessage{}
	}
	if err := e.s.SaveThread(bg, thread, msgs); err != nil {
		e.t.Fatalf("SaveThread(%q): %v", thread, err)
	}
}

func (e *env) trackFork(in chain.ForkInput) {
	e.track(in.SourceThreadID, in.DestinationThreadID, in.Writer.ThreadID)
	e.trackIDs(in.SourceCheckpointID, in.DestinationCheckpointID)
}

func (e *env) fork(in chain.ForkInput) (*chain.Checkpoint, error) {
	e.trackFork(in)
	return e.s.Fork(bg, in)
}

// ---- reads ----

func (e *env) head(thread string) string {
	e.t.Helper()
	h, err := e.s.Head(bg, thread)
	if err != nil {
		e.t.Fatalf("Head(%q): %v", thread, err)
	}
	return h
}

func (e *env) list(thread string) []*chain.Checkpoint {
	e.t.Helper()
	l, err := e.s.List(bg, thread)
	if err != nil {
		e.t.Fatalf("List(%q): %v", thread, err)
	}
	return l
}

func (e *env) get(id string) *chain.Checkpoint {
	e.t.Helper()
	c, err := e.s.Get(bg, id)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", id, err)
	}
	return c
}

// mustGet returns the stored checkpoint id, failing the test when absent.
func (e *env) mustGet(id string) *chain.Checkpoint {
	e.t.Helper()
	c := e.get(id)
	if c == nil {
		e.t.Fatalf("Get(%q) = nil, want the checkpoint", id)
	}
	return c
}

// mustList returns the thread's checkpoints, failing the test unless there
// are n.
func (e *env) mustList(thread string, n int) []*chain.Checkpoint {
	e.t.Helper()
	l := e.list(thread)
	if len(l) != n {
		e.t.Fatalf("List(%q) has %d checkpoints, want %d", thread, len(l), n)
	}
	return l
}

func (e *env) refs() []chain.BlobRef {
	e.t.Helper()
	r, err := e.s.BlobReferences(bg)
	if err != nil {
		e.t.Fatalf("BlobReferences: %v", err)
	}
	return r
}

func (e *env) transcript(thread string) []json.RawMessage {
	e.t.Helper()
	m, err := e.s.LoadThread(bg, thread)
	if err != nil {
		e.t.Fatalf("LoadThread(%q): %v", thread, err)
	}
	return m
}

// ---- assertions ----

var equateEmpty = cmpopts.EquateEmpty()

var sentinels = map[string]error{
	chain.CodeStaleHead:                chain.ErrStaleHead,
	chain.CodeParentMismatch:           chain.ErrParentMismatch,
	chain.CodeDuplicateID:              chain.ErrDuplicateID,
	chain.CodeNotHead:                  chain.ErrNotHead,
	chain.CodeWriterConflict:           chain.ErrWriterConflict,
	chain.CodeWriterLost:               chain.ErrWriterLost,
	chain.CodeInvalidID:                chain.ErrInvalidID,
	chain.CodeInvalidEntry:             chain.ErrInvalidEntry,
	chain.CodeForkSourceNotFound:       chain.ErrForkSourceNotFound,
	chain.CodeForkSourceThreadMismatch: chain.ErrForkSourceThreadMismatch,
	chain.CodeForkDestinationNotEmpty:  chain.ErrForkDestinationNotEmpty,
}

// wantCode reports whether err carries the contract code (and matches its
// sentinel with errors.Is); otherwise it records a failure.
func (e *env) wantCode(what string, err error, code string) bool {
	e.t.Helper()
	got := chain.Code(err)
	if got != code || !errors.Is(err, sentinels[code]) {
		e.t.Errorf("%s: got error %v (code %q), want code %s", what, err, got, code)
		return false
	}
	return true
}

func (e *env) noErr(what string, err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: unexpected error %v", what, err)
	}
}

// equal compares with go-cmp (nil and empty slices equal) and reports a diff.
func (e *env) equal(what string, got, want any) bool {
	e.t.Helper()
	if d := cmp.Diff(want, got, equateEmpty); d != "" {
		e.t.Errorf("%s: mismatch (-want +got):\n%s", what, d)
		return false
	}
	return true
}

func (e *env) wantHead(thread, want string) {
	e.t.Helper()
	if got := e.head(thread); got != want {
		e.t.Errorf("Head(%q) = %q, want %q", thread, got, want)
	}
}

func (e *env) wantList(thread string, want ...string) {
	e.t.Helper()
	e.equal(fmt.Sprintf("List(%q) ids", thread), ids(e.list(thread)), want)
}

// recount computes the reference table from the checkpoints of threads:
// each checkpoint counts once for each of its distinct blob keys.
func (e *env) recount(threads ...string) []chain.BlobRef {
	e.t.Helper()
	counts := map[string]int64{}
	for _, th := range threads {
		for _, c := range e.list(th) {
			for _, k := range c.BlobKeys() {
				counts[k]++
			}
		}
	}
	refs := []chain.BlobRef{}
	for k, n := range counts {
		refs = append(refs, ref(k, n))
	}
	slices.SortFunc(refs, func(a, b chain.BlobRef) int { return strings.Compare(a.Key, b.Key) })
	return refs
}

func (e *env) wantRefs(what string, want ...chain.BlobRef) {
	e.t.Helper()
	e.equal(what+": BlobReferences", e.refs(), want)
}

func (e *env) wantAbsent(id string) {
	e.t.Helper()
	if c := e.get(id); c != nil {
		e.t.Errorf("Get(%q) = %+v, want nil", id, c)
	}
}

// ---- "unchanged" ----

// state is what a failing write must leave as it was: head, list and
// transcript of every tracked thread, Get of every tracked id, and the
// global blob references.
type state struct {
	Heads       map[string]string
	Lists       map[string][]*chain.Checkpoint
	Transcripts map[string][]json.RawMessage
	Gets        map[string]*chain.Checkpoint
	Refs        []chain.BlobRef
}

func (e *env) state() state {
	e.t.Helper()
	return e.stateOf(slices.Collect(maps.Keys(e.threads)), slices.Collect(maps.Keys(e.ids)))
}

// stateOf snapshots the given threads and ids (invalid ones skipped).
func (e *env) stateOf(threads, ids []string) state {
	e.t.Helper()
	s := state{Heads: map[string]string{}, Lists: map[string][]*chain.Checkpoint{},
		Transcripts: map[string][]json.RawMessage{}, Gets: map[string]*chain.Checkpoint{}, Refs: e.refs()}
	for _, th := range threads {
		if chain.CheckID("thread", th) != nil {
			continue
		}
		s.Heads[th] = e.head(th)
		s.Lists[th] = e.list(th)
		s.Transcripts[th] = e.transcript(th)
	}
	for _, id := range ids {
		if chain.CheckID("id", id) != nil {
			continue
		}
		s.Gets[id] = e.get(id)
	}
	return s
}

// same compares the current state of what before covered with before.
func (e *env) same(what string, before state) {
	e.t.Helper()
	after := e.stateOf(slices.Collect(maps.Keys(before.Heads)), slices.Collect(maps.Keys(before.Gets)))
	if d := cmp.Diff(before, after, equateEmpty); d != "" {
		e.t.Errorf("%s: store changed (-before +after):\n%s", what, d)
	}
}

// fails runs op, which must fail with code and change nothing.
func (e *env) fails(what, code string, op func() error) {
	e.t.Helper()
	before := e.state()
	e.wantCode(what, op(), code)
	e.same(what, before)
}

// appendFails appends c with the cached writer of its thread; it must fail
// with code and change nothing.
func (e *env) appendFails(what, code string, c *chain.Checkpoint, expected string) {
	e.t.Helper()
	w := e.writer(c.ThreadID)
	e.appendFailsWith(what, code, c, expected, w)
}

func (e *env) appendFailsWith(what, code string, c *chain.Checkpoint, expected string, w chain.Writer) {
	e.t.Helper()
	e.trackAppend(c, w)
	e.fails(what, code, func() error { _, err := e.tryAppend(c, expected, w); return err })
}

// ---- the JSON input path ----

// omit, as an edit value, removes the member.
const omit = "\x00omit"

// appendJSON renders in as the JSON text chain.ParseAppendInput reads.
// cpEdit and inEdit replace members of the checkpoint object and of the
// input object with raw text, which need not be valid JSON.
func appendJSON(in chain.AppendInput, cpEdit, inEdit map[string]string) []byte {
	b, err := json.Marshal(in.Checkpoint)
	if err != nil {
		panic(err)
	}
	members := map[string]string{}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		panic(err)
	}
	for k, v := range raw {
		members[k] = string(v)
	}
	wb, err := json.Marshal(in.Writer)
	if err != nil {
		panic(err)
	}
	expected := "null"
	if in.ExpectedHeadID != "" {
		eb, err := json.Marshal(in.ExpectedHeadID)
		if err != nil {
			panic(err)
		}
		expected = string(eb)
	}
	top := map[string]string{"checkpoint": objectText(members, cpEdit), "writer": string(wb), "expectedHeadId": expected}
	return []byte(objectText(top, inEdit))
}

func objectText(members, edits map[string]string) string {
	m := maps.Clone(members)
	for k, v := range edits {
		if v == omit {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", k, m[k])
	}
	b.WriteByte('}')
	return b.String()
}

// parseOK parses the unedited JSON form of in; it is the control that shows
// an edit alone makes parseFails fail.
func (e *env) parseOK(in chain.AppendInput) chain.AppendInput {
	e.t.Helper()
	text := appendJSON(in, nil, nil)
	out, err := chain.ParseAppendInput(text)
	if err != nil {
		e.t.Fatalf("control: ParseAppendInput(%s): %v", text, err)
	}
	return out
}

// parseFails checks that the JSON form of in with the edits is rejected by
// chain.ParseAppendInput with code, so nothing reaches the store (which is
// checked unchanged too).
func (e *env) parseFails(what, code string, in chain.AppendInput, cpEdit, inEdit map[string]string) {
	e.t.Helper()
	e.parseOK(in)
	text := appendJSON(in, cpEdit, inEdit)
	e.fails(fmt.Sprintf("%s: ParseAppendInput(%s)", what, text), code, func() error {
		_, err := chain.ParseAppendInput(text)
		return err
	})
}

// input is an AppendInput with the cached writer of c's thread.
func (e *env) input(c *chain.Checkpoint, expected string) chain.AppendInput {
	e.t.Helper()
	return chain.AppendInput{Checkpoint: c, ExpectedHeadID: expected, Writer: e.writer(c.ThreadID)}
}
