package storetest

import (
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// durableCases are SPEC §9.6 S1, S2, S4–S6, the durable SQLite example's
// tests; S3 and S7 are fork cases (RunForkConformance).
func durableCases() []kase {
	return []kase{
		// S1: the example shares one lease between two connections. bbolt
		// locks its file, so the two handles are sequential: the lease
		// must persist from one handle to the next.
		{"S1_LeaseSharedAcrossHandles", func(e *env) {
			e.needHook("Reopen", e.sub.Reopen != nil)
			a := e.acquire("thread")
			e.appendWith(cp("1", "thread", ""), "", a.Writer)
			e.s = e.sub.Reopen(e.t)
			e.fails("AcquireWriter on the second handle", chain.CodeWriterConflict, acquireOp(e, "thread"))
			e.clock.Advance((leaseMs + 1) * time.Millisecond)
			b := e.acquire("thread")
			if b.Fence <= a.Fence {
				e.t.Errorf("second handle's takeover fence %d, want above %d", b.Fence, a.Fence)
			}
			e.s = e.sub.Reopen(e.t)
			e.appendFailsWith("append with the first handle's writer", chain.CodeWriterLost, cp("2", "thread", "1"), "1", a.Writer)
			e.appendWith(cp("2", "thread", "1"), "1", b.Writer)
		}},
		{"S2_DeletedIDReusable", func(e *env) {
			e.append(cp("reusable", "thread", ""), "")
			e.deleteHead("thread", "reusable")
			again := with(cp("reusable", "thread", ""), func(c *chain.Checkpoint) {
				c.CreatedAt, c.Files = 5, []chain.Entry{file("other.txt", testkit.FileKey(5))}
			})
			e.append(again, "")
			e.equal("Get(reusable) after reuse", e.get("reusable"), again)
			e.wantRefs("after reuse", ref(testkit.FileKey(5), 1))
		}},
		{"S4_InvalidEntries", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			for what, entries := range map[string][]chain.Entry{
				"file/child beneath file": {file("file", testkit.FileKey(2)), file("file/child", testkit.FileKey(2))},
				"C:/absolute.txt":         {file("C:/absolute.txt", testkit.FileKey(2))},
				"kind other":              {{Path: "x", Kind: "other"}},
				"kind empty":              {{Path: "x"}},
				"dir with blobKey":        {{Path: "d", Kind: chain.KindDir, BlobKey: testkit.FileKey(2)}},
				"dir with size":           {{Path: "d", Kind: chain.KindDir, Size: 1}},
			} {
				e.appendFails(what, chain.CodeInvalidEntry, withFiles(cp("2", "thread", "1"), entries...), "1")
			}
		}},
		{"S5_ContentMembersMustBeArrays", func(e *env) {
			in := onRootInput(e)
			for _, member := range []string{"files", "artifacts", "conversation"} {
				for _, v := range []string{"null", `"string"`, "{}", omit} {
					e.parseFails(member+" = "+v, chain.CodeInvalidEntry, in, map[string]string{member: v}, nil)
				}
			}
			for _, member := range []string{"files", "artifacts"} {
				for _, v := range []string{"[null]", "[1]", `["x"]`, "[[]]"} {
					e.parseFails(member+" = "+v, chain.CodeInvalidEntry, in, map[string]string{member: v}, nil)
				}
			}
		}},
		{"S6_InvalidIdentifiers", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			e.fails(`AcquireWriter("")`, chain.CodeInvalidID, acquireOp(e, ""))
			e.fails(`List("")`, chain.CodeInvalidID, func() error { _, err := e.s.List(bg, ""); return err })
			e.parseFails("JSON threadId 7", chain.CodeInvalidID, e.input(cp("2", "thread", "1"), "1"), map[string]string{"threadId": "7"}, nil)
		}},
	}
}
