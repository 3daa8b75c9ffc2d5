package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/google/go-cmp/cmp"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// extraCases go beyond SPEC §9: aliasing, a wide append race, persistence,
// exclusive open, atomicity under injected failures, reference counts over
// many appends and every way of dropping them, and the §10 decisions Q6
// (append check order), Q9 (reason, conversation bytes), Q10 and Q12
// (identifier limits) and Q13 (createdAt range).
func extraCases() []kase {
	return []kase{
		{"X1_NoAliasing", func(e *env) {
			in := cp("1", "thread", "")
			in.Artifacts = []chain.Artifact{artifact("art", artKey(1))}
			in.Label = "label"
			want := in.Clone()
			e.append(in, "")
			scribble(in)
			e.equal("Get after mutating the Append input", e.get("1"), want)
			scribble(e.mustGet("1"))
			e.equal("Get after mutating a Get result", e.get("1"), want)
			l := e.mustList("thread", 1)
			scribble(l[0])
			l[0] = nil
			e.equal("List after mutating a List result", e.list("thread"), []*chain.Checkpoint{want})

			msgs := []json.RawMessage{json.RawMessage(`{"a":1}`)}
			e.saveThread("thread", msgs...)
			scribbleMsgs(msgs)
			wantMsgs := []json.RawMessage{json.RawMessage(`{"a":1}`)}
			e.equal("LoadThread after mutating the SaveThread input", e.transcript("thread"), wantMsgs)
			scribbleMsgs(e.transcript("thread"))
			e.equal("LoadThread after mutating a LoadThread result", e.transcript("thread"), wantMsgs)

			rec := sbxdb.InstanceRecord{Key: "k", Provider: "fake", ProviderSandboxID: "sb", ThreadID: "thread", UpdatedAt: 1}
			e.noErr("Upsert", e.s.Instances().Upsert(bg, rec))
			got, err := e.s.Instances().Get(bg, "k")
			e.noErr("Instances().Get", err)
			if got == nil {
				e.t.Fatal("Instances().Get(k) = nil after Upsert")
			}
			got.ProviderSandboxID, got.LatestSnapshotID = "m", "m"
			got, err = e.s.Instances().Get(bg, "k")
			e.noErr("Instances().Get", err)
			e.equal("Instances().Get after mutating a result", got, &rec)
		}},
		{"X2_Race64Appends", func(e *env) { race(e, 64) }},
		{"X3_PersistAcrossReopen", func(e *env) {
			e.needHook("Reopen", e.sub.Reopen != nil)
			e.chain("thread", "1", "2", "3")
			e.deleteHead("thread", "3")
			e.append(with(cp("o1", "other", ""), func(c *chain.Checkpoint) {
				c.Artifacts = []chain.Artifact{artifact("art", artKey(1))}
			}), "")
			e.saveThread("thread", msg("hello"), json.RawMessage(`{"a" : 1}`))
			e.saveThread("empty")
			rec := sbxdb.InstanceRecord{Key: "k", Provider: "fake", ProviderSandboxID: "sb", ThreadID: "thread", LatestRunID: "run", UpdatedAt: 7}
			e.noErr("Upsert", e.s.Instances().Upsert(bg, rec))
			held := e.acquire("held")
			for range 2 {
				e.noErr("Release", e.acquire("fenced").Release(bg))
			}
			before := e.state()

			e.s = e.sub.Reopen(e.t)
			e.same("after Reopen", before)
			got, err := e.s.Instances().Get(bg, "k")
			e.noErr("Instances().Get after Reopen", err)
			e.equal("instance record after Reopen", got, &rec)
			e.fails("AcquireWriter of a held thread after Reopen", chain.CodeWriterConflict, acquireOp(e, "held"))
			e.appendWith(cp("h1", "held", ""), "", held.Writer)
			if l := e.acquire("fenced"); l.Fence != 3 {
				e.t.Errorf("fence after two acquisitions and a Reopen = %d, want 3", l.Fence)
			}
			e.append(cp("4", "thread", "2"), "2")
		}},
		{"X4_SecondOpenRefused", func(e *env) {
			e.needHook("OpenSecond", e.sub.OpenSecond != nil)
			e.append(cp("1", "thread", ""), "")
			if err := e.sub.OpenSecond(); err == nil {
				e.t.Error("a second handle opened on files that are in use")
			}
			e.append(cp("2", "thread", "1"), "1")
		}},
		{"X5_AtomicAppend", atomicCase("append.publish",
			func(e *env) {
				e.append(cp("1", "thread", ""), "")
				e.trackIDs("2")
			},
			func(e *env) error {
				return e.appendErr(with(cp("2", "thread", "1"), func(c *chain.Checkpoint) {
					c.Files = append(c.Files, file("shared", testkit.FileKey(1)))
					c.Artifacts = []chain.Artifact{artifact("art", artKey(2))}
				}), "1")
			})},
		{"X5_AtomicDeleteHead", atomicCase("deleteHead.publish",
			func(e *env) { e.chain("thread", "1", "2") },
			func(e *env) error { return deleteHeadOp(e, "thread", "2")() })},
		{"X5_AtomicDeleteCheckpoints", atomicCase("deleteCheckpoints.publish",
			func(e *env) { e.chain("thread", "1", "2", "3") },
			func(e *env) error { return pruneOp(e, "thread", 1, e.writer("thread"))() })},
		{"X6_AppendCheckOrder", func(e *env) {
			e.chain("thread", "1", "2")
			w, other := e.writer("thread"), e.writer("other")
			badFiles := []chain.Entry{file("/abs", testkit.FileKey(3))}
			three := cp("3", "thread", "2")
			for _, c := range []struct {
				what     string
				c        *chain.Checkpoint
				expected string
				w        chain.Writer
				code     string
			}{
				{"bad id + bad entry", withFiles(cp(lone, "thread", "2"), badFiles...), "2", w, chain.CodeInvalidID},
				{"bad parent + bad createdAt", with(cp("3", "thread", lone), func(c *chain.Checkpoint) { c.CreatedAt = -1 << 60 }), "2", w, chain.CodeInvalidID},
				{"bad expected head + bad createdAt", with(three, func(c *chain.Checkpoint) { c.CreatedAt = 1 << 60 }), "a\x00", w, chain.CodeInvalidID},
				{"empty writer thread + bad entry", withFiles(three, badFiles...), "2", chain.Writer{OwnerToken: w.OwnerToken, Fence: w.Fence}, chain.CodeInvalidID},
				{"bad entry + wrong-thread writer", withFiles(three, badFiles...), "2", other, chain.CodeInvalidEntry},
				{"bad reason + wrong-thread writer", with(three, func(c *chain.Checkpoint) { c.Reason = "manual" }), "2", other, chain.CodeInvalidEntry},
				{"wrong-thread writer + duplicate", cp("1", "thread", "2"), "2", other, chain.CodeWriterLost},
				{"fabricated writer + duplicate", cp("1", "thread", "2"), "2", chain.Writer{ThreadID: "thread", OwnerToken: "nobody", Fence: w.Fence}, chain.CodeWriterLost},
				{"wrong-thread writer + stale head", three, "1", other, chain.CodeWriterLost},
				{"duplicate + stale head", cp("1", "thread", ""), "", w, chain.CodeDuplicateID},
				{"duplicate + parent mismatch", cp("1", "thread", "x"), "2", w, chain.CodeDuplicateID},
				{"stale head + parent mismatch", cp("3", "thread", "x"), "1", w, chain.CodeStaleHead},
			} {
				e.appendFailsWith(c.what, c.code, c.c, c.expected, c.w)
			}
			in := e.input(three, "2")
			e.parseFails("JSON empty expectedHeadId + createdAt 1e400", chain.CodeInvalidID, in,
				map[string]string{"createdAt": "1e400"}, map[string]string{"expectedHeadId": `""`})
			e.parseFails("JSON threadId 7 + files null", chain.CodeInvalidID, in,
				map[string]string{"threadId": "7", "files": "null"}, nil)
			e.fails("DeleteHead: empty id + wrong-thread writer", chain.CodeInvalidID, func() error {
				return e.s.DeleteHead(bg, "thread", "", other)
			})
			e.fails("DeleteHead: wrong-thread writer + not the head", chain.CodeWriterLost, func() error {
				return e.s.DeleteHead(bg, "thread", "1", other)
			})
		}},
		{"X7_ReasonsAndConversation", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			for _, r := range []chain.Reason{"", "manual", "Automatic", "fork_root"} {
				e.appendFails(fmt.Sprintf("reason %q", r), chain.CodeInvalidEntry,
					with(cp("2", "thread", "1"), func(c *chain.Checkpoint) { c.Reason = r }), "1")
			}
			for _, m := range []string{`{"a"`, ``, `nope`, `{"a":1} {"b":2}`, `NaN`} {
				e.appendFails(fmt.Sprintf("conversation message %q", m), chain.CodeInvalidEntry,
					with(cp("2", "thread", "1"), func(c *chain.Checkpoint) {
						c.Conversation = append(c.Conversation, json.RawMessage(m))
					}), "1")
			}
			in := e.input(cp("2", "thread", "1"), "1")
			e.parseFails("JSON reason missing", chain.CodeInvalidEntry, in, map[string]string{"reason": omit}, nil)
			e.parseFails("JSON reason 7", chain.CodeInvalidEntry, in, map[string]string{"reason": "7"}, nil)
			// Accepted: every reason, label and run id, and conversation
			// bytes exactly as given.
			conv := []json.RawMessage{[]byte(`{"a" : 1}`), []byte(`[1,  2]`), []byte(`"\u00e9"`), []byte(`null`),
				[]byte("{\n\t\"k\": [true, false]\n}")}
			named := with(cp("2", "thread", "1"), func(c *chain.Checkpoint) {
				c.Reason, c.Label, c.SourceRunID, c.Conversation = chain.ReasonNamed, "my label", "run-7", conv
			})
			e.append(named, "1")
			e.equal("named checkpoint", e.get("2"), named)
			fork := with(cp("3", "thread", "2"), func(c *chain.Checkpoint) { c.Reason = chain.ReasonForkRoot })
			e.append(fork, "2")
			e.equal("fork-root checkpoint", e.get("3"), fork)
			e.saveThread("thread", conv...)
			e.equal("transcript bytes", e.transcript("thread"), conv)
			e.saveThread("thread", msg("only"))
			e.equal("SaveThread replaces", e.transcript("thread"), []json.RawMessage{msg("only")})
			if got := e.transcript("never-saved"); len(got) != 0 {
				e.t.Errorf("LoadThread of an unknown thread = %s, want []", got)
			}
		}},
		{"X10_ManyCheckpointsExactCounts", func(e *env) {
			// Enough appends for a store that batches reference-count
			// updates to do so several times, mixed with every way of
			// dropping references; the counts must always be the ones
			// recomputed from the checkpoints themselves.
			heads := map[string]string{}
			next := func(thread string, i int) {
				id := fmt.Sprintf("%s%d", thread, i)
				c := with(cp(id, thread, heads[thread]), func(c *chain.Checkpoint) {
					c.Files = append(c.Files, file("shared.txt", testkit.FileKey(1)), file("rolling.txt", testkit.FileKey(int64(100+i%7))))
					if i%3 == 0 {
						c.Artifacts = []chain.Artifact{artifact("art", artKey(int64(i%4)))}
					}
				})
				e.append(c, heads[thread])
				heads[thread] = id
			}
			for i := 1; i <= 150; i++ {
				next("a", i)
				if i%2 == 0 {
					next("b", i)
				}
				switch {
				case i%40 == 0:
					parent := e.get(heads["a"]).ParentID
					e.deleteHead("a", heads["a"])
					heads["a"] = parent
				case i == 100:
					_, err := e.s.DeleteCheckpoints(bg, "a", 5, e.writer("a"))
					e.noErr("DeleteCheckpoints(a, keep 5)", err)
				case i == 120:
					_, err := e.fork(chain.ForkInput{SourceThreadID: "b", SourceCheckpointID: heads["b"],
						DestinationThreadID: "c", DestinationCheckpointID: "c-root", CreatedAt: 1, Writer: e.writer("c")})
					e.noErr("Fork(b → c)", err)
				}
				if i%10 == 0 {
					e.wantRefs(fmt.Sprintf("after %d rounds", i), e.recount("a", "b", "c")...)
				}
			}
			_, err := e.s.DeleteCheckpoints(bg, "b", 0, e.writer("b"))
			e.noErr("DeleteCheckpoints(b, keep 0)", err)
			e.wantRefs("after pruning b to its head", e.recount("a", "b", "c")...)
		}},
		{"X8_IdentifierAndCreatedAtLimits", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			w := e.writer("thread")
			long := func(n int) string { return strings.Repeat("é", n/2) + strings.Repeat("i", n%2) }
			for _, id := range []string{"a\x00b", "\x00", long(chain.MaxIDBytes + 1), strings.Repeat("i", chain.MaxIDBytes+1)} {
				what := fmt.Sprintf("id %.20q… (%d bytes)", id, len(id))
				for op, f := range map[string]func() error{
					"Get":           func() error { _, err := e.s.Get(bg, id); return err },
					"Head":          func() error { _, err := e.s.Head(bg, id); return err },
					"List":          func() error { _, err := e.s.List(bg, id); return err },
					"AcquireWriter": acquireOp(e, id),
					"DeleteHead":    func() error { return e.s.DeleteHead(bg, "thread", id, w) },
					"append id":     func() error { _, err := e.tryAppend(cp(id, "thread", "1"), "1", w); return err },
					"append thread": func() error { _, err := e.tryAppend(cp("2", id, ""), "", w); return err },
					"append parent": func() error { _, err := e.tryAppend(cp("2", "thread", id), "1", w); return err },
					"append expected": func() error {
						_, err := e.tryAppend(cp("2", "thread", "1"), id, w)
						return err
					},
				} {
					e.fails(op+" with "+what, chain.CodeInvalidID, f)
				}
			}
			// 4096 bytes is allowed, for ids and thread ids, counted in bytes.
			for i, id := range []string{long(chain.MaxIDBytes), strings.Repeat("i", chain.MaxIDBytes)} {
				thread := strings.Repeat(fmt.Sprint(i), chain.MaxIDBytes)
				e.append(cp(id, thread, ""), "")
				e.wantHead(thread, id)
				if got := e.get(id); got == nil || got.ThreadID != thread {
					e.t.Errorf("Get of a %d-byte id = %v, want the checkpoint", len(id), got)
				}
			}
			// createdAt spans ±(2^53−1) and sorts numerically, negatives first.
			e.append(with(cp("lo", "span", ""), func(c *chain.Checkpoint) { c.CreatedAt = -chain.MaxSafeInteger }), "")
			e.append(with(cp("hi", "span", "lo"), func(c *chain.Checkpoint) { c.CreatedAt = chain.MaxSafeInteger }), "lo")
			e.append(with(cp("mid", "span", "hi"), func(c *chain.Checkpoint) { c.CreatedAt = -1 }), "hi")
			e.append(with(cp("zero", "span", "mid"), func(c *chain.Checkpoint) { c.CreatedAt = 0 }), "mid")
			e.wantList("span", "lo", "mid", "zero", "hi")
		}},
	}
}

// atomicCase makes an X5 case: with a hook failing at point, op must fail with
// the hook's error and change nothing; without the hook op succeeds.
func atomicCase(point string, setup func(e *env), op func(e *env) error) func(e *env) {
	return func(e *env) {
		e.needHook("OnPoint", e.sub.OnPoint != nil)
		setup(e)
		injected := errors.New("injected failure at " + point)
		var ran atomic.Bool
		remove := e.sub.OnPoint(point, func() error { ran.Store(true); return injected })
		before := e.state()
		if err := op(e); !errors.Is(err, injected) {
			e.t.Errorf("%s with a failing %s hook: got %v, want the hook's error", point, point, err)
		}
		if !ran.Load() {
			e.t.Errorf("the %s hook never ran", point)
		}
		e.same("after the injected failure", before)
		remove()
		e.noErr("retry without the hook", op(e))
		if cmp.Diff(before, e.state(), equateEmpty) == "" {
			e.t.Errorf("%s: the retry without the hook changed nothing", point)
		}
	}
}
