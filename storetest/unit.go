package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// unitCases are SPEC §9.4, the reference's unit tests.
func unitCases() []kase {
	return []kase{
		{"U1_FirstLeaseAndConflict", func(e *env) {
			l := e.acquire("thread")
			if l.ThreadID != "thread" || l.OwnerToken == "" || l.Fence != 1 {
				e.t.Errorf("first lease = {ThreadID %q, OwnerToken %q, Fence %d}, want {thread, non-empty, 1}", l.ThreadID, l.OwnerToken, l.Fence)
			}
			if l.RenewAfter != renewMs*time.Millisecond {
				e.t.Errorf("RenewAfter = %v, want %dms", l.RenewAfter, renewMs)
			}
			left := l.ExpiresAt().UnixMilli() - e.clock.Ms()
			if left != leaseMs || l.RenewAfter.Milliseconds() >= left {
				e.t.Errorf("ExpiresAt() - now = %dms, want %dms and above RenewAfter %v", left, leaseMs, l.RenewAfter)
			}
			e.fails("second AcquireWriter", chain.CodeWriterConflict, acquireOp(e, "thread"))
		}},
		// U2–U6: constructor validation. A zero duration means the default
		// in Go, so the reference's 0 maps to sub-millisecond and negative
		// durations, and NaN (which Go has not) to -1ns.
		{"U2_LeaseDurationUnderOneMs", optionCase(sbxdb.Options{LeaseDuration: time.Nanosecond}, sbxdb.Options{LeaseDuration: -time.Millisecond},
			sbxdb.Options{LeaseDuration: 999 * time.Microsecond, RenewAfter: time.Millisecond})},
		{"U3_LeaseDurationNegative", optionCase(sbxdb.Options{LeaseDuration: -1})},
		{"U4_RenewAfterUnderOneMs", optionCase(sbxdb.Options{RenewAfter: time.Nanosecond}, sbxdb.Options{RenewAfter: -time.Millisecond})},
		{"U5_RenewAfterNegative", optionCase(sbxdb.Options{RenewAfter: -1})},
		{"U6_RenewAfterNotBelowLease", optionCase(sbxdb.Options{LeaseDuration: 100 * time.Millisecond, RenewAfter: 100 * time.Millisecond},
			sbxdb.Options{LeaseDuration: 100 * time.Millisecond, RenewAfter: 200 * time.Millisecond},
			sbxdb.Options{LeaseDuration: 30 * time.Second})},
		{"U7_OtherThreadWriterIsLost", func(e *env) {
			e.append(cp("b1", "thread-b", ""), "")
			wa := e.writer("thread-a")
			e.appendFailsWith("thread-a writer appending to thread-b", chain.CodeWriterLost, cp("b2", "thread-b", "b1"), "b1", wa)
			e.fails("thread-a writer deleting the thread-b head", chain.CodeWriterLost, func() error {
				return e.s.DeleteHead(bg, "thread-b", "b1", wa)
			})
		}},
		{"U8_ReferencesAndStaleHead", func(e *env) {
			c := cp("1", "thread", "")
			c.Artifacts = []chain.Artifact{artifact("art-1", artKey(1))}
			e.append(c, "")
			e.wantRefs("file and artifact", ref(artKey(1), 1), ref(testkit.FileKey(1), 1))
			e.appendFails("append expecting a wrong head", chain.CodeStaleHead, cp("2", "thread", "other"), "other")
		}},
		{"U9_ParentMismatch", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			e.appendFails("parent other, expected 1", chain.CodeParentMismatch, cp("2", "thread", "other"), "1")
		}},
		{"U10_DuplicateIDAcrossThreads", func(e *env) {
			e.append(cp("1", "thread-a", ""), "")
			e.appendFails("same id, same thread", chain.CodeDuplicateID, cp("1", "thread-a", "1"), "1")
			e.appendFails("same id, another thread", chain.CodeDuplicateID, cp("1", "thread-b", ""), "")
		}},
		{"U11_EmptyIdentifiers", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			e.appendFails("empty checkpoint id", chain.CodeInvalidID, cp("", "thread", "1"), "1")
			// Go's "" is null for the parent and expected head; the empty
			// string exists on the JSON path only (SPEC §10 Q11).
			in := e.input(cp("2", "thread", "1"), "1")
			e.parseFails("JSON empty id", chain.CodeInvalidID, in, map[string]string{"id": `""`}, nil)
			e.parseFails("JSON empty parentCheckpointId", chain.CodeInvalidID, in, map[string]string{"parentCheckpointId": `""`}, nil)
			e.parseFails("JSON empty expectedHeadId", chain.CodeInvalidID, in, nil, map[string]string{"expectedHeadId": `""`})
		}},
		{"U12_LoneSurrogates", func(e *env) {
			e.appendFails(`lone-surrogate id`, chain.CodeInvalidID, cp(lone, "thread", ""), "")
			e.appendFails(`lone-surrogate blob key`, chain.CodeInvalidEntry, with(cp("1", "thread", ""), func(c *chain.Checkpoint) {
				c.Files[0].BlobKey = chain.FilePrefix + strings.Repeat("0", 61) + lone
			}), "")
			in := e.input(cp("1", "thread", ""), "")
			for _, id := range []string{`"\ud800"`, `"\udc00"`, `"a\ud800b"`, `"\ud800\u0041"`, `"\udc00\ud800"`} {
				e.parseFails("JSON id "+id, chain.CodeInvalidID, in, map[string]string{"id": id}, nil)
			}
			e.wantHead("thread", "")
			e.wantRefs("after rejected appends")
			// Control: a surrogate pair is well formed.
			pair, err := chain.ParseAppendInput(appendJSON(in, map[string]string{"id": `"\ud83d\ude00"`}, nil))
			e.noErr(`JSON id "\ud83d\ude00"`, err)
			if pair.Checkpoint.ID != "😀" {
				e.t.Errorf(`JSON id "\ud83d\ude00" decoded as %q, want "😀"`, pair.Checkpoint.ID)
			}
		}},
		{"U13_InvalidIdentifierArguments", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			w := e.writer("thread")
			for what, op := range map[string]func() error{
				`AcquireWriter("")`:      acquireOp(e, ""),
				`List("")`:               func() error { _, err := e.s.List(bg, ""); return err },
				`Head("")`:               func() error { _, err := e.s.Head(bg, ""); return err },
				`Get("")`:                func() error { _, err := e.s.Get(bg, ""); return err },
				`DeleteHead("", 1)`:      func() error { return e.s.DeleteHead(bg, "", "1", w) },
				`DeleteHead(thread, "")`: func() error { return e.s.DeleteHead(bg, "thread", "", w) },
				`DeleteHead writer thread ""`: func() error {
					return e.s.DeleteHead(bg, "thread", "1", chain.Writer{OwnerToken: w.OwnerToken, Fence: w.Fence})
				},
				`Append threadId ""`: func() error { _, err := e.tryAppend(cp("2", "", "1"), "1", w); return err },
			} {
				e.fails(what, chain.CodeInvalidID, op)
			}
			in := e.input(cp("2", "thread", "1"), "1")
			e.parseFails("JSON threadId 7", chain.CodeInvalidID, in, map[string]string{"threadId": "7"}, nil)
			e.parseFails("JSON threadId {}", chain.CodeInvalidID, in, map[string]string{"threadId": "{}"}, nil)
			e.parseFails("JSON id 7", chain.CodeInvalidID, in, map[string]string{"id": "7"}, nil)
			e.parseFails("JSON writer threadId 7", chain.CodeInvalidID, in, nil,
				map[string]string{"writer": fmt.Sprintf(`{"threadId":7,"ownerToken":%q,"fence":%d}`, w.OwnerToken, w.Fence)})
		}},
		{"U14_CreatedAtNaNWithWriter", func(e *env) { nonFinite(e, true, []string{"NaN"}, []int64{chain.MaxSafeInteger + 1}) }},
		{"U15_CreatedAtInfinityWithWriter", func(e *env) { nonFinite(e, true, []string{"Infinity", "1e400"}, []int64{1 << 62}) }},
		{"U16_CreatedAtMinusInfinityWithWriter", func(e *env) { nonFinite(e, true, []string{"-Infinity", "-1e400"}, []int64{-1 << 62}) }},
		{"U17_AbsentParentIsNull", func(e *env) {
			in := e.parseOK(e.input(cp("1", "thread", ""), ""))
			parsed, err := chain.ParseAppendInput(appendJSON(in, map[string]string{"parentCheckpointId": omit}, nil))
			e.noErr("ParseAppendInput without parentCheckpointId", err)
			e.appendWith(parsed.Checkpoint, parsed.ExpectedHeadID, parsed.Writer)
			if got := e.mustGet("1"); got.ParentID != "" {
				e.t.Errorf("Get(1).ParentID = %q, want \"\" (null)", got.ParentID)
			}
		}},
		{"U18_EntryFieldsMatchKind", func(e *env) {
			e.appendFails("file without blobKey and size", chain.CodeInvalidEntry,
				withFiles(cp("1", "thread", ""), chain.Entry{Path: "f", Kind: chain.KindFile}), "")
			e.appendFails("dir with blobKey", chain.CodeInvalidEntry,
				withFiles(cp("1", "thread", ""), chain.Entry{Path: "d", Kind: chain.KindDir, BlobKey: testkit.FileKey(1)}), "")
			in := e.input(cp("1", "thread", ""), "")
			for _, files := range []string{
				`[{"path":"f","kind":"file"}]`,
				`[{"path":"f","kind":"file","size":1}]`,
				`[{"path":"d","kind":"dir","blobKey":"` + testkit.FileKey(1) + `"}]`,
				`[{"path":"d","kind":"dir","size":null}]`,
				`[{"path":"d","kind":"dir","blobKey":null}]`,
			} {
				e.parseFails("JSON files "+files, chain.CodeInvalidEntry, in, map[string]string{"files": files}, nil)
			}
		}},
		{"U19_FileSizeMissingOrNegative", func(e *env) {
			in := onRootInput(e)
			e.parseFails("JSON file without size", chain.CodeInvalidEntry, in,
				map[string]string{"files": `[{"path":"f","kind":"file","blobKey":"` + testkit.FileKey(2) + `"}]`}, nil)
			e.appendFails("Go size -1", chain.CodeInvalidEntry, with(in.Checkpoint, func(c *chain.Checkpoint) { c.Files[0].Size = -1 }), "1")
		}},
		{"U20_FileSizeNotSafeInteger", func(e *env) {
			in := onRootInput(e)
			for _, size := range []string{"1.5", "-1", "9007199254740992", "1e400", `"1"`} {
				e.parseFails("JSON size "+size, chain.CodeInvalidEntry, in,
					map[string]string{"files": `[{"path":"f","kind":"file","blobKey":"` + testkit.FileKey(2) + `","size":` + size + `}]`}, nil)
			}
			e.appendFails("Go size 2^53", chain.CodeInvalidEntry,
				with(in.Checkpoint, func(c *chain.Checkpoint) { c.Files[0].Size = chain.MaxSafeInteger + 1 }), "1")
		}},
		{"U21_MalformedPaths", func(e *env) {
			badPaths(e, "bad\x00name", "nested/../bad", "nested//bad", "/absolute", "C:/absolute")
		}},
		{"U22_MalformedBlobKeys", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			for _, key := range []string{
				"bad", chain.FilePrefix + "not-hex", chain.FilePrefix + strings.Repeat("a", 63),
				chain.FilePrefix + strings.Repeat("a", 65), chain.FilePrefix + strings.Repeat("A", 64),
				chain.ArtifactPrefix + strings.Repeat("a", 64), "",
			} {
				e.appendFails(fmt.Sprintf("file blobKey %q", key), chain.CodeInvalidEntry,
					withFiles(cp("2", "thread", "1"), chain.Entry{Path: "f", Kind: chain.KindFile, BlobKey: key, Size: 1}), "1")
			}
		}},
		{"U23_EscapingAndNonCanonicalPaths", func(e *env) {
			badPaths(e, "/absolute.txt", `\absolute.txt`, "C:/absolute.txt", `C:\absolute.txt`, "C:", "../outside.txt",
				"nested/../../outside.txt", "nested//file.txt", "./file.txt", "nested/", "", `nested\file.txt`,
				"nested/.", "nested/..")
			// Control: "C:foo" is not a drive path for the store.
			e.append(withFiles(cp("3", "thread", "1"), file("C:foo", testkit.FileKey(3))), "1")
		}},
		{"U24_DuplicatePathOrBeneathFile", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			k := testkit.FileKey(2)
			for what, files := range map[string][]chain.Entry{
				"file same + dir same":    {file("same", k), {Path: "same", Kind: chain.KindDir}},
				"file same + file same":   {file("same", k), file("same", k)},
				"file a, then file a/b":   {file("a", k), file("a/b", k)},
				"file a/b, then file a":   {file("a/b", k), file("a", k)},
				"file a, then dir a/b/c":  {file("a", k), {Path: "a/b/c", Kind: chain.KindDir}},
				"file a/b/c, then file a": {file("a/b/c", k), file("a", k)},
			} {
				e.appendFails(what, chain.CodeInvalidEntry, withFiles(cp("2", "thread", "1"), files...), "1")
			}
			if n := len(e.list("thread")); n != 1 {
				e.t.Errorf("List has %d checkpoints, want 1", n)
			}
			// Control: a directory may have entries beneath it, in either order.
			e.append(withFiles(cp("2", "thread", "1"), chain.Entry{Path: "a", Kind: chain.KindDir}, file("a/b", k),
				file("c/d", k), chain.Entry{Path: "c", Kind: chain.KindDir}), "1")
		}},
		{"U25_InvalidArtifacts", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			good := artifact("art", artKey(1))
			for what, edit := range map[string]func(a *chain.Artifact){
				"empty artifactId and bad key": func(a *chain.Artifact) { a.ArtifactID, a.BlobKey = "", chain.ArtifactPrefix+"bad" },
				"empty artifactId":             func(a *chain.Artifact) { a.ArtifactID = "" },
				"lone-surrogate artifactId":    func(a *chain.Artifact) { a.ArtifactID = lone },
				"empty name":                   func(a *chain.Artifact) { a.Name = "" },
				"empty mimeType":               func(a *chain.Artifact) { a.MimeType = "" },
				"bad key":                      func(a *chain.Artifact) { a.BlobKey = chain.ArtifactPrefix + "bad" },
				"file-namespace key":           func(a *chain.Artifact) { a.BlobKey = testkit.FileKey(1) },
				"size -1":                      func(a *chain.Artifact) { a.Size = -1 },
				"size 2^53":                    func(a *chain.Artifact) { a.Size = chain.MaxSafeInteger + 1 },
				"createdAt 2^53":               func(a *chain.Artifact) { a.CreatedAt = chain.MaxSafeInteger + 1 },
			} {
				a := good
				edit(&a)
				e.appendFails("artifact with "+what, chain.CodeInvalidEntry,
					with(cp("2", "thread", "1"), func(c *chain.Checkpoint) { c.Artifacts = []chain.Artifact{good, a} }), "1")
			}
			// Control: duplicate artifact ids are not rejected, and a key
			// used twice counts once.
			e.append(with(cp("2", "thread", "1"), func(c *chain.Checkpoint) {
				c.Artifacts = []chain.Artifact{good, good}
			}), "1")
			e.wantRefs("two artifacts sharing a key", ref(artKey(1), 1), ref(testkit.FileKey(1), 1), ref(testkit.FileKey(2), 1))
		}},
		{"U26_StoredCopyIndependentOfInput", func(e *env) {
			in := cp("1", "thread", "")
			in.Artifacts = []chain.Artifact{artifact("art", artKey(1))}
			in.Label, in.SourceRunID, in.Reason = "label", "run", chain.ReasonNamed
			want := in.Clone()
			e.append(in, "")
			scribble(in)
			got := e.get("1")
			e.equal("Get after mutating the input", got, want)
			e.equal("List vs [Get]", e.list("thread"), []*chain.Checkpoint{got})
		}},
		{"U27_LeaseNoWaitAndReacquire", func(e *env) {
			first := e.acquire("thread")
			e.fails("second AcquireWriter (must not wait)", chain.CodeWriterConflict, acquireOp(e, "thread"))
			other := e.acquire("other-thread")
			if other.Fence != 1 {
				e.t.Errorf("other thread's first fence = %d, want 1", other.Fence)
			}
			e.noErr("Release", first.Release(bg))
			e.noErr("second Release (idempotent)", first.Release(bg))
			again := e.acquire("thread")
			if again.Fence != 2 || again.OwnerToken == first.OwnerToken {
				e.t.Errorf("re-acquired lease fence %d token %q, want fence 2 and a token other than %q", again.Fence, again.OwnerToken, first.OwnerToken)
			}
		}},
		{"U28_TakeoverFencesStaleWriter", func(e *env) {
			first := e.acquire("thread")
			e.appendWith(cp("1", "thread", ""), "", first.Writer)
			e.clock.Set(1101)
			second := e.acquire("thread")
			if second.Fence <= first.Fence {
				e.t.Errorf("takeover fence %d, want above %d", second.Fence, first.Fence)
			}
			e.fails("stale Renew", chain.CodeWriterLost, func() error { _, err := first.Renew(bg); return err })
			e.appendFailsWith("stale Append", chain.CodeWriterLost, cp("2", "thread", "1"), "1", first.Writer)
			e.fails("stale DeleteHead", chain.CodeWriterLost, func() error { return e.s.DeleteHead(bg, "thread", "1", first.Writer) })
			before := e.state()
			e.noErr("stale Release", first.Release(bg))
			e.same("stale Release", before)
			exp, err := second.Renew(bg)
			e.noErr("second.Renew", err)
			if exp.UnixMilli() != 1201 || second.ExpiresAt().UnixMilli() != 1201 {
				e.t.Errorf("second.Renew at 1101 returned %d, ExpiresAt() %d, want 1201", exp.UnixMilli(), second.ExpiresAt().UnixMilli())
			}
			e.clock.Set(1200)
			e.fails("AcquireWriter at 1200", chain.CodeWriterConflict, acquireOp(e, "thread"))
			e.clock.Set(1201)
			if l := e.acquire("thread"); l.Fence != second.Fence+1 {
				e.t.Errorf("takeover at expiry 1201: fence %d, want %d", l.Fence, second.Fence+1)
			}
		}},
		{"U29_DeleteHeadRequiresHead", func(e *env) {
			e.chain("thread", "1", "2", "3")
			e.fails("DeleteHead of non-head 1", chain.CodeNotHead, deleteHeadOp(e, "thread", "1"))
			e.fails("DeleteHead of unknown id", chain.CodeNotHead, deleteHeadOp(e, "thread", "missing"))
			e.fails("DeleteHead on an empty thread", chain.CodeNotHead, deleteHeadOp(e, "empty", "3"))
			e.deleteHead("thread", "3")
			e.wantHead("thread", "2")
			e.wantAbsent("3")
			e.wantRefs("after DeleteHead(3)", ref(testkit.FileKey(1), 1), ref(testkit.FileKey(2), 1))
		}},
		{"U30_DeleteRootEmptiesThread", func(e *env) {
			e.append(cp("1", "thread", ""), "")
			e.deleteHead("thread", "1")
			e.wantHead("thread", "")
			e.wantList("thread")
			e.wantRefs("after deleting the root")
		}},
		{"U31_RacingAppendsOneWins", func(e *env) { race(e, 2) }},
	}
}

// optionCase checks that sbxdb.Options.Check rejects each of bad with
// sbxdb.ErrInvalidOptions, after the control that it accepts the defaults
// and the conformance options.
func optionCase(bad ...sbxdb.Options) func(e *env) {
	return func(e *env) {
		e.t.Helper()
		o, err := sbxdb.Options{}.Check()
		if err != nil || o.LeaseDuration != sbxdb.DefaultLeaseDuration || o.RenewAfter != sbxdb.DefaultRenewAfter {
			e.t.Errorf("CheckOptions(zero) = %v/%v, %v; want the defaults", o.LeaseDuration, o.RenewAfter, err)
		}
		if _, err := (sbxdb.Options{LeaseDuration: leaseMs * time.Millisecond, RenewAfter: renewMs * time.Millisecond}).Check(); err != nil {
			e.t.Errorf("CheckOptions(100ms, 25ms): %v", err)
		}
		for _, b := range bad {
			if _, err := b.Check(); !errors.Is(err, sbxdb.ErrInvalidOptions) {
				e.t.Errorf("CheckOptions(LeaseDuration %v, RenewAfter %v) = %v, want ErrInvalidOptions", b.LeaseDuration, b.RenewAfter, err)
			}
		}
	}
}

func withFiles(c *chain.Checkpoint, files ...chain.Entry) *chain.Checkpoint {
	c = c.Clone()
	c.Files = files
	return c
}

// onRootInput appends root 1 and returns the input appending 2 on it.
func onRootInput(e *env) chain.AppendInput {
	e.t.Helper()
	e.append(cp("1", "thread", ""), "")
	return e.input(cp("2", "thread", "1"), "1")
}

// badPaths appends, on top of a root, a checkpoint with a file at each
// path; each must be INVALID_ENTRY and change nothing.
func badPaths(e *env, paths ...string) {
	e.t.Helper()
	e.append(cp("1", "thread", ""), "")
	for _, p := range paths {
		e.appendFails(fmt.Sprintf("path %q", p), chain.CodeInvalidEntry, withFiles(cp("2", "thread", "1"), file(p, testkit.FileKey(2))), "1")
	}
}

// race appends n different checkpoints on one expected head from n
// goroutines: exactly one wins, every other gets STALE_HEAD, and the head,
// list and references are the winner's.
func race(e *env, n int) {
	e.t.Helper()
	e.append(cp("1", "thread", ""), "")
	w := e.writer("thread")
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		c := cp(fmt.Sprint(i+2), "thread", "1")
		e.trackIDs(c.ID)
		wg.Go(func() {
			<-start
			_, errs[i] = e.s.Append(bg, chain.AppendInput{Checkpoint: c, ExpectedHeadID: "1", Writer: w})
		})
	}
	close(start)
	wg.Wait()
	winner := ""
	for i, err := range errs {
		id := fmt.Sprint(i + 2)
		switch {
		case err == nil && winner == "":
			winner = id
		case err == nil:
			e.t.Errorf("appends %s and %s both won", winner, id)
		default:
			e.wantCode("racing append "+id, err, chain.CodeStaleHead)
		}
	}
	if winner == "" {
		e.t.Fatal("no racing append won")
	}
	e.wantHead("thread", winner)
	e.wantList("thread", "1", winner)
	e.wantRefs("after the race", ref(testkit.FileKey(1), 1), ref(testkit.FileKey(digits(winner)), 1))
	for i := range n {
		if id := fmt.Sprint(i + 2); id != winner {
			e.wantAbsent(id)
		}
	}
}
