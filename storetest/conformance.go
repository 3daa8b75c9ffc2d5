package storetest

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// RunConformance runs the checkpoint-store cases of SPEC §9: the C cases
// (§9.1), the U cases (§9.4), the S cases of §9.6 that need no fork, the D
// and Y cases (§9.7), and the X cases beyond §9 (extraCases; the X case of
// instance keys runs with the instance cases). Every subtest calls
// newStore for a fresh store.
func RunConformance(t *testing.T, newStore Factory) {
	var cases []kase
	for _, group := range [][]kase{checkpointCases(), unitCases(), durableCases(), retentionCases(), extraCases()} {
		cases = append(cases, group...)
	}
	runCases(t, newStore, cases)
}

// checkpointCases are SPEC §9.1.
func checkpointCases() []kase {
	return []kase{
		{"C1_UnknownThreadIsEmpty", func(e *env) {
			e.wantAbsent("missing")
			e.wantHead("missing-thread", "")
			e.wantList("missing-thread")
		}},
		{"C2_AppendRootThenChild", func(e *env) {
			one, two := cp("1", "thread", ""), cp("2", "thread", "1")
			e.append(one, "")
			e.append(two, "1")
			e.wantHead("thread", "2")
			e.wantList("thread", "1", "2")
			e.equal("Get(1)", e.get("1"), one)
			e.equal("Get(2)", e.get("2"), two)
			e.wantRefs("after two appends", ref(testkit.FileKey(1), 1), ref(testkit.FileKey(2), 1))
		}},
		{"C3_NullParentOnExistingHead", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			e.appendFails("append 2 (parent null) expecting null on head 1", chain.CodeStaleHead, cp("2", "thread", ""), "")
			e.appendFails("append 3 (parent null) expecting 1", chain.CodeParentMismatch, cp("3", "thread", ""), "1")
		}},
		{"C4_DuplicateID", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			e.appendFails("re-append 1 expecting 1", chain.CodeDuplicateID, cp("1", "thread", ""), "1")
		}},
		{"C5_ThreadsAreIndependent", func(e *env) {
			e.append(cp("a", "thread-a", ""), "")
			e.append(cp("b", "thread-b", ""), "")
			e.wantHead("thread-a", "a")
			e.wantHead("thread-b", "b")
			e.wantList("thread-a", "a")
			e.wantList("thread-b", "b")
		}},
		{"C6_ListSortsByCreatedAt", func(e *env) {
			e.append(with(cp("z", "thread", ""), func(c *chain.Checkpoint) { c.CreatedAt = 2 }), "")
			e.append(cp("a", "thread", "z"), "z")
			e.append(cp("b", "thread", "a"), "a")
			e.wantList("thread", "a", "b", "z")
		}},
		{"C7_ListSortsTiesByIDBytes", func(e *env) {
			parent := ""
			for i, id := range []string{"é", "a", "B", "😀"} {
				c := cp(id, "thread", parent)
				c.Files[0].BlobKey = testkit.FileKey(int64(i + 1))
				e.append(c, parent)
				parent = id
			}
			e.wantList("thread", "B", "a", "é", "😀")
			e.wantRefs("keys 1..4", ref(testkit.FileKey(1), 1), ref(testkit.FileKey(2), 1), ref(testkit.FileKey(3), 1), ref(testkit.FileKey(4), 1))
		}},
		{"C8_LoneSurrogateIDAndBlobKey", func(e *env) {
			e.appendFails(`checkpoint id "\uD800"`, chain.CodeInvalidID, cp(lone, "thread", ""), "")
			bad := with(cp("1", "thread", ""), func(c *chain.Checkpoint) {
				c.Files[0].BlobKey = chain.FilePrefix + lone + strings.Repeat("0", 61)
			})
			e.appendFails(`blobKey with "\uD800"`, chain.CodeInvalidEntry, bad, "")
			in := e.input(cp("1", "thread", ""), "")
			e.parseFails(`JSON id "\ud800"`, chain.CodeInvalidID, in, map[string]string{"id": `"\ud800"`}, nil)
			e.parseFails(`JSON blobKey with "\ud800"`, chain.CodeInvalidEntry, in, map[string]string{
				"files": `[{"path":"1.txt","kind":"file","blobKey":"` + chain.FilePrefix + `\ud800` + strings.Repeat("0", 63) + `","size":1}]`,
			}, nil)
			e.wantHead("thread", "")
			e.wantRefs("after rejected appends")
		}},
		{"C9_CreatedAtNaN", func(e *env) { nonFinite(e, false, []string{"NaN"}, []int64{chain.MaxSafeInteger + 1}) }},
		{"C10_CreatedAtInfinity", func(e *env) { nonFinite(e, false, []string{"Infinity", "1e400"}, []int64{math.MaxInt64}) }},
		{"C11_CreatedAtMinusInfinity", func(e *env) {
			nonFinite(e, false, []string{"-Infinity", "-1e400"}, []int64{math.MinInt64, -chain.MaxSafeInteger - 1})
		}},
		{"C12_StoredDataNotAliased", func(e *env) {
			in := cp("1", "thread", "")
			in.Files = append(in.Files, file("copy.txt", testkit.FileKey(1)))
			want := in.Clone()
			e.append(in, "")
			scribble(in)
			got := e.mustGet("1")
			if got == in {
				e.t.Error("Get returned the input object")
			}
			e.equal("Get after mutating the input", got, want)
			scribble(got)
			e.equal("Get after mutating a Get result", e.get("1"), want)
			l := e.mustList("thread", 1)
			scribble(l[0])
			e.equal("List after mutating a List result", e.list("thread"), []*chain.Checkpoint{want})
			e.wantRefs("two files, one key", ref(testkit.FileKey(1), 1))
		}},
		{"C13_SharedKeyReferenceCounts", func(e *env) {
			f := testkit.FileKey(0xf)
			e.append(with(cp("1", "thread", ""), func(c *chain.Checkpoint) { c.Files = []chain.Entry{file("a", f)} }), "")
			e.append(with(cp("2", "thread", "1"), func(c *chain.Checkpoint) { c.Files = []chain.Entry{file("b", f)} }), "1")
			e.wantRefs("1 and 2 share F", ref(f, 2))
			e.deleteHead("thread", "2")
			e.wantRefs("after DeleteHead(2)", ref(f, 1))
		}},
		{"C14_OneWriterPerThread", func(e *env) {
			a := e.acquire("thread-a")
			e.fails("second AcquireWriter(thread-a)", chain.CodeWriterConflict, acquireOp(e, "thread-a"))
			b := e.acquire("thread-b")
			e.noErr("release thread-a", a.Release(bg))
			e.noErr("release thread-b", b.Release(bg))
			e.acquire("thread-a")
		}},
		{"C15_RenewExtendsLease", func(e *env) {
			l := e.acquire("thread")
			before := l.ExpiresAt()
			e.clock.Advance(l.RenewAfter)
			exp, err := l.Renew(bg)
			e.noErr("Renew", err)
			if want := e.clock.Ms() + leaseMs; exp.UnixMilli() != want || l.ExpiresAt().UnixMilli() != want {
				e.t.Errorf("Renew at %d: returned %d, ExpiresAt() %d, want both %d",
					e.clock.Ms(), exp.UnixMilli(), l.ExpiresAt().UnixMilli(), want)
			}
			if !l.ExpiresAt().After(before) {
				e.t.Errorf("ExpiresAt() %v not after the first expiry %v", l.ExpiresAt(), before)
			}
		}},
		{"C16_StaleReleaseKeepsReplacement", func(e *env) {
			old := e.acquire("thread")
			e.clock.Advance((leaseMs + 1) * time.Millisecond)
			repl := e.acquire("thread")
			e.noErr("old.Release", old.Release(bg))
			e.fails("acquire after the stale release", chain.CodeWriterConflict, acquireOp(e, "thread"))
			e.noErr("replacement.Release", repl.Release(bg))
			e.acquire("thread")
		}},
		{"C17_ExpiredWriterIsLost", func(e *env) {
			old := e.acquire("thread")
			e.appendWith(cp("root", "thread", ""), "", old.Writer)
			e.clock.Advance((leaseMs + 1) * time.Millisecond)
			stale := func(phase string) {
				e.fails(phase+": old.Renew", chain.CodeWriterLost, func() error { _, err := old.Renew(bg); return err })
				e.appendFailsWith(phase+": old appends stale", chain.CodeWriterLost, cp("stale", "thread", "root"), "root", old.Writer)
				e.wantAbsent("stale")
				e.fails(phase+": old DeleteHead(root)", chain.CodeWriterLost, func() error {
					return e.s.DeleteHead(bg, "thread", "root", old.Writer)
				})
			}
			stale("expired")
			next := e.acquire("thread")
			if next.Fence <= old.Fence {
				e.t.Errorf("takeover fence %d, want above %d", next.Fence, old.Fence)
			}
			stale("taken over")
			before := e.state()
			e.noErr("old.Release", old.Release(bg))
			e.same("old.Release", before)
			_, err := next.Renew(bg)
			e.noErr("next.Renew after the stale release", err)
			e.noErr("next.Release", next.Release(bg))
		}},
		{"C18_DeleteHeadWalksBackToEmpty", func(e *env) {
			e.chain("thread", "1", "2")
			e.fails("DeleteHead(1) under head 2", chain.CodeNotHead, deleteHeadOp(e, "thread", "1"))
			e.deleteHead("thread", "2")
			e.wantHead("thread", "1")
			e.deleteHead("thread", "1")
			e.wantHead("thread", "")
			e.wantList("thread")
			e.wantRefs("after emptying the thread")
		}},
	}
}

func acquireOp(e *env, thread string) func() error {
	return func() error { _, err := e.s.AcquireWriter(bg, thread); return err }
}

// deleteHeadOp deletes id from thread with the thread's cached writer.
func deleteHeadOp(e *env, thread, id string) func() error {
	w := e.writer(thread)
	return func() error { return e.s.DeleteHead(bg, thread, id, w) }
}

// nonFinite covers C9–C11 and U14–U16: each JSON createdAt text is
// INVALID_ENTRY on the JSON path, and each Go value outside ±(2^53−1) is
// INVALID_ENTRY on the Go API; nothing changes. With onRoot the checkpoint
// goes on top of a root written with an explicitly acquired writer.
func nonFinite(e *env, onRoot bool, jsonTexts []string, goValues []int64) {
	e.t.Helper()
	c, expected := cp("1", "thread", ""), ""
	var w chain.Writer
	if onRoot {
		w = e.acquire("thread").Writer
		e.appendWith(c, "", w)
		c, expected = cp("2", "thread", "1"), "1"
	} else {
		w = e.writer("thread")
	}
	in := chain.AppendInput{Checkpoint: c, ExpectedHeadID: expected, Writer: w}
	for _, text := range jsonTexts {
		e.parseFails("createdAt "+text, chain.CodeInvalidEntry, in, map[string]string{"createdAt": text}, nil)
	}
	for _, v := range goValues {
		bad := with(c, func(c *chain.Checkpoint) { c.CreatedAt = v })
		e.appendFailsWith("Go createdAt "+strconv.FormatInt(v, 10), chain.CodeInvalidEntry, bad, expected, w)
	}
}
