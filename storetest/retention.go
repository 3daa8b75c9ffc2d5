package storetest

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// retentionCases are SPEC §9.7 D1–D7 (DeleteCheckpoints with the §10
// decisions Q1–Q4) and Y1 (symlink entries, Q5).
func retentionCases() []kase {
	return []kase{
		{"D1_PruneKeepsNewest", func(e *env) {
			e.chain("thread", "1", "2", "3", "4", "5")
			e.prune("thread", 3, "1", "2")
			e.wantList("thread", "3", "4", "5")
			e.wantHead("thread", "5")
			e.wantAbsent("1")
			e.wantAbsent("2")
			e.wantRefs("after keeping 3", ref(testkit.FileKey(3), 1), ref(testkit.FileKey(4), 1), ref(testkit.FileKey(5), 1))
		}},
		{"D2_KeepAtLeastChainLength", func(e *env) {
			e.chain("thread", "1", "2", "3")
			for _, keep := range []int{3, 4, 100} {
				before := e.state()
				e.prune("thread", keep)
				e.same(fmt.Sprintf("DeleteCheckpoints(keep %d)", keep), before)
			}
			e.prune("empty-thread", 1)
		}},
		{"D3_KeepZeroOrOneLeavesHead", func(e *env) {
			for _, keep := range []int{0, 1} {
				th := fmt.Sprintf("keep-%d", keep)
				e.chain(th, "1"+th, "2"+th, "3"+th)
				e.prune(th, keep, "1"+th, "2"+th)
				e.wantList(th, "3"+th)
				e.wantHead(th, "3"+th)
			}
		}},
		{"D4_PruneRejectsBadInput", func(e *env) {
			e.chain("thread", "1", "2", "3")
			w := e.writer("thread")
			type call struct {
				thread string
				keep   int
				w      chain.Writer
				code   string
			}
			calls := map[string]call{
				"empty threadId":                    {"", 1, w, chain.CodeInvalidID},
				"lone-surrogate threadId":           {lone, 1, w, chain.CodeInvalidID},
				"empty writer threadId":             {"thread", 1, chain.Writer{OwnerToken: w.OwnerToken, Fence: w.Fence}, chain.CodeInvalidID},
				"invalid threadId beats keep -1":    {"", -1, w, chain.CodeInvalidID},
				"keep -1":                           {"thread", -1, w, chain.CodeInvalidEntry},
				"keep MinInt":                       {"thread", math.MinInt, w, chain.CodeInvalidEntry},
				"keep -1 beats a wrong writer":      {"thread", -1, e.writer("other"), chain.CodeInvalidEntry},
				"wrong-thread writer":               {"thread", 1, e.writer("other"), chain.CodeWriterLost},
				"fabricated writer":                 {"thread", 1, chain.Writer{ThreadID: "thread", OwnerToken: "x", Fence: w.Fence}, chain.CodeWriterLost},
				"writer of the thread, other fence": {"thread", 1, chain.Writer{ThreadID: "thread", OwnerToken: w.OwnerToken, Fence: w.Fence + 1}, chain.CodeWriterLost},
			}
			if notSafe := int64(chain.MaxSafeInteger + 1); math.MaxInt >= notSafe {
				calls["keep 2^53 (not a safe integer)"] = call{"thread", int(notSafe), w, chain.CodeInvalidEntry}
			}
			for what, c := range calls {
				e.fails("DeleteCheckpoints with "+what, c.code, func() error {
					_, err := e.s.DeleteCheckpoints(bg, c.thread, c.keep, c.w)
					return err
				})
			}
			// Released, then expired.
			l := e.acquire("released")
			e.appendWith(cp("r1", "released", ""), "", l.Writer)
			e.appendWith(cp("r2", "released", "r1"), "r1", l.Writer)
			e.noErr("Release", l.Release(bg))
			e.fails("DeleteCheckpoints with a released writer", chain.CodeWriterLost, pruneOp(e, "released", 1, l.Writer))
			l = e.acquire("released")
			e.clock.Advance(leaseMs * time.Millisecond) // expiresAt == now: expired
			e.fails("DeleteCheckpoints with an expired writer", chain.CodeWriterLost, pruneOp(e, "released", 1, l.Writer))
		}},
		{"D5_PruneSharedKeys", func(e *env) {
			k, s := testkit.FileKey(0xaa), testkit.FileKey(0xbb)
			e.append(withFiles(cp("1", "thread", ""), file("x", k), file("y", k), file("z", s)), "")
			e.append(withFiles(cp("2", "thread", "1"), file("z", s), file("two", testkit.FileKey(2))), "1")
			e.append(cp("3", "thread", "2"), "2")
			e.wantRefs("before", ref(testkit.FileKey(2), 1), ref(testkit.FileKey(3), 1), ref(k, 1), ref(s, 2))
			e.prune("thread", 2, "1")
			e.wantRefs("after deleting 1", ref(testkit.FileKey(2), 1), ref(testkit.FileKey(3), 1), ref(s, 1))
		}},
		{"D6_DeleteHeadAfterPrune", func(e *env) {
			e.chain("thread", "1", "2", "3", "4")
			e.prune("thread", 2, "1", "2")
			e.deleteHead("thread", "4")
			e.wantHead("thread", "3")
			e.deleteHead("thread", "3") // its parent 2 is gone: the head clears (Q4)
			e.wantHead("thread", "")
			e.wantList("thread")
			e.wantRefs("after emptying the thread")
			e.append(cp("5", "thread", ""), "") // the thread is empty, not dangling
		}},
		{"D7_PruneOffChainCheckpoints", func(e *env) {
			e.needHook("InsertRaw", e.sub.InsertRaw != nil)
			e.chain("thread", "1", "2", "3")
			e.chain("other", "o7", "o8")
			// Off-chain checkpoints with no files: InsertRaw adds no
			// references, so the counts stay exact.
			for _, c := range []*chain.Checkpoint{
				{ID: "orphan", ThreadID: "thread", CreatedAt: 2, Reason: chain.ReasonAutomatic},
				{ID: "branch", ThreadID: "thread", ParentID: "1", CreatedAt: 9, Reason: chain.ReasonAutomatic},
			} {
				e.noErr("InsertRaw("+c.ID+")", e.sub.InsertRaw(c))
				e.trackIDs(c.ID)
			}
			e.wantList("thread", "1", "2", "orphan", "3", "branch")
			e.track("other")
			otherBefore := e.state()
			e.prune("thread", 1, "1", "2", "orphan", "branch")
			e.wantList("thread", "3")
			e.wantHead("thread", "3")
			e.equal("other thread", e.list("other"), otherBefore.Lists["other"])
			e.wantHead("other", "o8")
			e.wantRefs("after pruning", ref(testkit.FileKey(3), 1), ref(testkit.FileKey(7), 1), ref(testkit.FileKey(8), 1))
		}},
		{"Y1_SymlinkEntries", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			link := chain.Entry{Path: "link", Kind: chain.KindSymlink, Target: "run.sh"}
			exe := chain.Entry{Path: "run.sh", Kind: chain.KindFile, BlobKey: testkit.FileKey(2), Size: 1, Executable: true}
			bad := map[string][]chain.Entry{
				"symlink with blobKey":      {{Path: "l", Kind: chain.KindSymlink, Target: "t", BlobKey: testkit.FileKey(2)}},
				"symlink with size":         {{Path: "l", Kind: chain.KindSymlink, Target: "t", Size: 1}},
				"symlink marked executable": {{Path: "l", Kind: chain.KindSymlink, Target: "t", Executable: true}},
				"symlink with empty target": {{Path: "l", Kind: chain.KindSymlink}},
				"symlink target with NUL":   {{Path: "l", Kind: chain.KindSymlink, Target: "a\x00b"}},
				"symlink target not UTF-8":  {{Path: "l", Kind: chain.KindSymlink, Target: lone}},
				"entry beneath a symlink":   {link, file("link/x", testkit.FileKey(2))},
				"symlink above an entry":    {{Path: "link/x", Kind: chain.KindDir}, link},
				"symlink at a taken path":   {file("link", testkit.FileKey(2)), link},
				"file with a target":        {{Path: "f", Kind: chain.KindFile, BlobKey: testkit.FileKey(2), Size: 1, Target: "t"}},
				"dir marked executable":     {{Path: "d", Kind: chain.KindDir, Executable: true}},
				"symlink with a bad path":   {{Path: "/l", Kind: chain.KindSymlink, Target: "t"}},
			}
			for what, files := range bad {
				e.appendFails(what, chain.CodeInvalidEntry, withFiles(cp("2", "thread", "1"), files...), "1")
			}
			in := e.input(cp("2", "thread", "1"), "1")
			for _, files := range []string{
				`[{"path":"l","kind":"symlink","target":"t","size":0}]`,
				`[{"path":"l","kind":"symlink","target":"t","blobKey":"` + testkit.FileKey(2) + `"}]`,
				`[{"path":"l","kind":"symlink"}]`,
				`[{"path":"l","kind":"symlink","target":""}]`,
				`[{"path":"f","kind":"file","blobKey":"` + testkit.FileKey(2) + `","size":1,"executable":"yes"}]`,
			} {
				e.parseFails("JSON files "+files, chain.CodeInvalidEntry, in, map[string]string{"files": files}, nil)
			}
			// Accepted: a symlink (no reference) and an executable file
			// round-trip, on the Go API and on the JSON path.
			good := withFiles(cp("2", "thread", "1"), link, exe, chain.Entry{Path: "dir", Kind: chain.KindDir},
				chain.Entry{Path: "dir/up", Kind: chain.KindSymlink, Target: "../run.sh"})
			parsed, err := chain.ParseAppendInput(appendJSON(e.input(good, "1"), nil, nil))
			e.noErr("ParseAppendInput of symlink and executable entries", err)
			e.equal("JSON round trip of the entries", parsed.Checkpoint.Files, good.Files)
			e.append(good, "1")
			e.equal("Get(2)", e.get("2"), good)
			e.wantRefs("symlinks add no reference", ref(testkit.FileKey(1), 1), ref(testkit.FileKey(2), 1))
		}},
	}
}

// prune runs DeleteCheckpoints with the thread's cached writer and checks
// the deleted ids (in List order).
func (e *env) prune(thread string, keep int, wantDeleted ...string) {
	e.t.Helper()
	e.track(thread)
	e.trackIDs(wantDeleted...)
	got, err := e.s.DeleteCheckpoints(bg, thread, keep, e.writer(thread))
	if err != nil {
		e.t.Fatalf("DeleteCheckpoints(%q, keep %d): %v", thread, keep, err)
	}
	if !slices.Equal(got, wantDeleted) {
		e.t.Errorf("DeleteCheckpoints(%q, keep %d) deleted %q, want %q", thread, keep, got, wantDeleted)
	}
}

func pruneOp(e *env, thread string, keep int, w chain.Writer) func() error {
	return func() error { _, err := e.s.DeleteCheckpoints(bg, thread, keep, w); return err }
}
