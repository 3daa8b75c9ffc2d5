package storetest

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

// RunForkConformance runs the fork cases of SPEC §9: F1–F10 (§9.2), M1–M11
// (§9.5) and S3, S7 (§9.6). Every subtest calls newStore for a fresh store.
func RunForkConformance(t *testing.T, newStore Factory) {
	runCases(t, newStore, forkCases())
}

// The fork fixture of SPEC §9.2.
const (
	srcThread = "source"
	srcRoot   = "source-root"
	dstThread = "destination"
	forkID    = "fork-root"
)

var aKey = chain.FilePrefix + strings.Repeat("a", 64)

// source appends the fixture's source-root (thread source, root, createdAt
// 10, named, label and run id, file a.txt with key a×64) and returns it.
func (e *env) source() *chain.Checkpoint {
	e.t.Helper()
	c := &chain.Checkpoint{
		ID: srcRoot, ThreadID: srcThread, CreatedAt: 10, Reason: chain.ReasonNamed,
		Label: "source label", SourceRunID: "run-1",
		Files:        []chain.Entry{file("a.txt", aKey)},
		Conversation: []json.RawMessage{msg("checkpoint conversation")},
	}
	e.append(c.Clone(), "")
	e.track(dstThread)
	e.trackIDs(forkID)
	return c
}

// forkInput is the default fork: source/source-root to
// destination/fork-root at createdAt 20, by w.
func forkInput(w chain.Writer) chain.ForkInput {
	return chain.ForkInput{SourceThreadID: srcThread, SourceCheckpointID: srcRoot,
		DestinationThreadID: dstThread, DestinationCheckpointID: forkID, CreatedAt: 20, Writer: w}
}

// defaultFork is the default fork by the destination's cached writer.
func (e *env) defaultFork() chain.ForkInput {
	e.t.Helper()
	return forkInput(e.writer(dstThread))
}

// forkFails runs the fork, which must fail with code and change nothing
// (destination transcript, head, list, references, and every tracked
// thread and id).
func (e *env) forkFails(what, code string, in chain.ForkInput) {
	e.t.Helper()
	e.trackFork(in)
	e.fails(what, code, func() error { _, err := e.fork(in); return err })
}

// forked checks a successful fork of src by in: the result and the stored
// checkpoint are exactly the fork root (no label, no run id), the
// destination head, list and transcript are the new root's.
func (e *env) forked(got *chain.Checkpoint, err error, src *chain.Checkpoint, in chain.ForkInput) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("Fork(%s → %s/%s): %v", in.SourceCheckpointID, in.DestinationThreadID, in.DestinationCheckpointID, err)
	}
	if got == nil {
		e.t.Fatal("Fork returned a nil checkpoint and no error")
	}
	want := &chain.Checkpoint{
		ID: in.DestinationCheckpointID, ThreadID: in.DestinationThreadID, CreatedAt: in.CreatedAt,
		Reason: chain.ReasonForkRoot, Files: src.Files, Conversation: src.Conversation, Artifacts: src.Artifacts,
	}
	e.equal("Fork result", got, want)
	e.equal("stored fork root", e.get(in.DestinationCheckpointID), want)
	e.wantHead(in.DestinationThreadID, in.DestinationCheckpointID)
	e.wantList(in.DestinationThreadID, in.DestinationCheckpointID)
	e.equal("destination transcript", e.transcript(in.DestinationThreadID), src.Conversation)
}

// wantEmptyDestination checks the destination has no transcript
// messages, no checkpoint and no head.
func (e *env) wantEmptyDestination() {
	e.t.Helper()
	if got := e.transcript(dstThread); len(got) != 0 {
		e.t.Errorf("destination transcript = %s, want []", got)
	}
	e.wantList(dstThread)
	e.wantHead(dstThread, "")
	e.wantAbsent(forkID)
}

func forkCases() []kase {
	return []kase{
		{"F1_ForkCopiesSourceCheckpoint", func(e *env) {
			src := e.source()
			e.append(&chain.Checkpoint{ID: "source-head", ThreadID: srcThread, ParentID: srcRoot, CreatedAt: 11,
				Reason: chain.ReasonAutomatic, Conversation: []json.RawMessage{msg("newer conversation")}}, srcRoot)
			e.saveThread(srcThread, msg("current source message"))
			in := e.defaultFork()
			got, err := e.fork(in)
			e.forked(got, err, src, in)
			e.wantHead(srcThread, "source-head")
			e.equal("source transcript", e.transcript(srcThread), []json.RawMessage{msg("current source message")})
			e.wantRefs("after the fork", ref(aKey, 2))
			// The fork does not release the destination lease.
			e.fails("AcquireWriter(destination) after the fork", chain.CodeWriterConflict, acquireOp(e, dstThread))
		}},
		{"F2_ForkCapabilityDetected", func(e *env) {
			// The reference's plain store has no fork member because a fork
			// must also write a transcript it does not own. Ours own their
			// transcripts, so F2 becomes: a host holding only the required
			// contract detects the fork capability at run time (as
			// isForkCapableSandboxCheckpointStore does), and the detected
			// fork writes the transcript the same store then returns.
			src := e.source()
			var plain sbxdb.CheckpointStore = e.s
			forker, ok := plain.(sbxdb.Forker)
			if !ok {
				e.t.Fatalf("%T offers no fork capability to a host holding sbxdb.CheckpointStore", plain)
			}
			in := e.defaultFork()
			got, err := forker.Fork(bg, in)
			e.forked(got, err, src, in)
		}},
		{"F3_MissingSource", func(e *env) {
			e.track(dstThread)
			e.forkFails("fork without a source", chain.CodeForkSourceNotFound, e.defaultFork())
		}},
		{"F4_WrongSourceThread", func(e *env) {
			e.source()
			in := e.defaultFork()
			in.SourceThreadID = "another-source"
			e.forkFails("sourceThreadId another-source", chain.CodeForkSourceThreadMismatch, in)
		}},
		{"F5_DestinationIsSource", func(e *env) {
			e.source()
			e.saveThread(srcThread, msg("source transcript"))
			in := forkInput(e.writer(srcThread))
			in.DestinationThreadID = srcThread
			e.forkFails("destination = source, with the source writer", chain.CodeForkSourceThreadMismatch, in)
		}},
		{"F6_FabricatedWriter", func(e *env) {
			e.source()
			e.forkFails("fabricated writer, no lease", chain.CodeWriterLost,
				forkInput(chain.Writer{ThreadID: dstThread, OwnerToken: "missing-owner", Fence: 1}))
		}},
		{"F7_OtherThreadWriter", func(e *env) {
			e.source()
			e.forkFails("writer of another-thread", chain.CodeWriterLost, forkInput(e.writer("another-thread")))
		}},
		{"F8_ReleasedWriter", func(e *env) {
			e.source()
			l := e.acquire(dstThread)
			e.noErr("Release", l.Release(bg))
			e.forkFails("released destination writer", chain.CodeWriterLost, forkInput(l.Writer))
		}},
		{"F9_DestinationHasTranscript", func(e *env) {
			e.source()
			e.saveThread(dstThread, msg("existing"))
			e.forkFails("destination transcript saved", chain.CodeForkDestinationNotEmpty, e.defaultFork())
		}},
		{"F10_DestinationIDUsedElsewhere", func(e *env) {
			e.source()
			e.append(cp("orphaned-id", "orphan-thread", ""), "")
			in := e.defaultFork()
			in.DestinationCheckpointID = "orphaned-id"
			e.forkFails("destinationCheckpointId used in orphan-thread", chain.CodeForkDestinationNotEmpty, in)
		}},
		{"M1_TranscriptSavedDuringFork", func(e *env) {
			e.needHook("OnPoint", e.sub.OnPoint != nil)
			e.source()
			saved := []json.RawMessage{msg("saved while the fork was in flight")}
			remove := e.sub.OnPoint("fork.preflight", func() error { return e.s.SaveThread(bg, dstThread, saved) })
			defer remove()
			_, err := e.fork(e.defaultFork())
			e.wantCode("fork racing a SaveThread", err, chain.CodeForkDestinationNotEmpty)
			e.equal("the concurrent transcript", e.transcript(dstThread), saved)
			e.wantList(dstThread)
			e.wantHead(dstThread, "")
			e.wantAbsent(forkID)
			e.wantRefs("after the failed fork", ref(aKey, 1))
		}},
		{"M2_OrphanInDestination", func(e *env) {
			e.needHook("InsertRaw", e.sub.InsertRaw != nil)
			e.source()
			e.noErr("InsertRaw", e.sub.InsertRaw(&chain.Checkpoint{ID: "orphan", ThreadID: dstThread, CreatedAt: 1, Reason: chain.ReasonAutomatic}))
			e.trackIDs("orphan")
			e.forkFails("orphan checkpoint in the destination", chain.CodeForkDestinationNotEmpty, e.defaultFork())
			e.wantHead(dstThread, "")
		}},
		{"M3_DestinationHasHead", func(e *env) {
			e.source()
			e.append(cp("dest-root", dstThread, ""), "")
			e.forkFails("destination with a head", chain.CodeForkDestinationNotEmpty, e.defaultFork())
			e.wantHead(dstThread, "dest-root")
		}},
		// M4: of the destination-owned states of the reference (transcript,
		// run, generation run, interrupt, artifact record) the engine owns
		// transcripts only (SPEC §10 Q8); checkpoints and heads are M2, M3.
		{"M4_EmptyTranscriptBlocksFork", func(e *env) {
			e.source()
			e.saveThread(dstThread)
			e.forkFails("destination transcript []", chain.CodeForkDestinationNotEmpty, e.defaultFork())
			e.wantHead(dstThread, "")
		}},
		{"M5_FailedStagingChangesNothing", func(e *env) {
			src := e.source()
			e.append(with(cp("other", "other-thread", ""), func(c *chain.Checkpoint) {
				c.Artifacts = []chain.Artifact{artifact("art", artKey(1))}
			}), "")
			publishFailure(e, src)
		}},
		{"M6_ForkOfHistoricalCheckpoint", func(e *env) {
			f, a := testkit.FileKey(0xf), artKey(0xa)
			hist := &chain.Checkpoint{ID: "historical", ThreadID: srcThread, CreatedAt: 10, Reason: chain.ReasonNamed,
				Label: "old", SourceRunID: "run-0",
				Files:        []chain.Entry{file("x", f), {Path: "d", Kind: chain.KindDir}, file("y", f)},
				Artifacts:    []chain.Artifact{artifact("a1", a), artifact("a2", a)},
				Conversation: []json.RawMessage{msg("historical")}}
			e.append(hist.Clone(), "")
			e.append(&chain.Checkpoint{ID: "newer", ThreadID: srcThread, ParentID: "historical", CreatedAt: 11,
				Reason: chain.ReasonAutomatic, Conversation: []json.RawMessage{msg("newer")}}, "historical")
			in := e.defaultFork()
			in.SourceCheckpointID = "historical"
			got, err := e.fork(in)
			e.forked(got, err, hist, in)
			e.wantHead(srcThread, "newer")
			e.wantRefs("after the fork", ref(a, 2), ref(f, 2))
		}},
		{"M7_ForkErrorCodes", func(e *env) {
			e.source()
			def := e.defaultFork()
			released := e.acquire("released")
			e.noErr("Release", released.Release(bg))
			for what, c := range map[string]struct {
				edit func(in *chain.ForkInput)
				code string
			}{
				"missing source":                        {func(in *chain.ForkInput) { in.SourceCheckpointID = "missing" }, chain.CodeForkSourceNotFound},
				"missing source + other-thread writer":  {func(in *chain.ForkInput) { in.SourceCheckpointID, in.Writer = "missing", e.writer("other") }, chain.CodeForkSourceNotFound},
				"wrong source thread":                   {func(in *chain.ForkInput) { in.SourceThreadID = "other" }, chain.CodeForkSourceThreadMismatch},
				"destination = source":                  {func(in *chain.ForkInput) { in.DestinationThreadID = srcThread }, chain.CodeForkSourceThreadMismatch},
				"destination = source + missing source": {func(in *chain.ForkInput) { in.DestinationThreadID, in.SourceCheckpointID = srcThread, "missing" }, chain.CodeForkSourceThreadMismatch},
				"other-thread writer":                   {func(in *chain.ForkInput) { in.Writer = e.writer("other") }, chain.CodeWriterLost},
				"wrong owner token":                     {func(in *chain.ForkInput) { in.Writer.OwnerToken = "nobody" }, chain.CodeWriterLost},
				"wrong fence":                           {func(in *chain.ForkInput) { in.Writer.Fence++ }, chain.CodeWriterLost},
				"released writer":                       {func(in *chain.ForkInput) { in.DestinationThreadID, in.Writer = "released", released.Writer }, chain.CodeWriterLost},
				"empty destinationCheckpointId":         {func(in *chain.ForkInput) { in.DestinationCheckpointID = "" }, chain.CodeInvalidID},
				"NUL in destinationCheckpointId":        {func(in *chain.ForkInput) { in.DestinationCheckpointID = "fork\x00" }, chain.CodeInvalidID},
				"empty sourceThreadId":                  {func(in *chain.ForkInput) { in.SourceThreadID = "" }, chain.CodeInvalidID},
				"lone-surrogate sourceCheckpointId":     {func(in *chain.ForkInput) { in.SourceCheckpointID = lone }, chain.CodeInvalidID},
				"empty destinationThreadId":             {func(in *chain.ForkInput) { in.DestinationThreadID = "" }, chain.CodeInvalidID},
				"empty writer threadId":                 {func(in *chain.ForkInput) { in.Writer.ThreadID = "" }, chain.CodeInvalidID},
				"invalid id + createdAt 2^53":           {func(in *chain.ForkInput) { in.SourceThreadID, in.CreatedAt = "", chain.MaxSafeInteger+1 }, chain.CodeInvalidID},
				"createdAt 2^53":                        {func(in *chain.ForkInput) { in.CreatedAt = chain.MaxSafeInteger + 1 }, chain.CodeInvalidEntry},
				"createdAt MaxInt64":                    {func(in *chain.ForkInput) { in.CreatedAt = math.MaxInt64 }, chain.CodeInvalidEntry},
				"createdAt MinInt64":                    {func(in *chain.ForkInput) { in.CreatedAt = math.MinInt64 }, chain.CodeInvalidEntry},
				"createdAt 2^53 + destination = source": {func(in *chain.ForkInput) { in.CreatedAt, in.DestinationThreadID = chain.MaxSafeInteger+1, srcThread }, chain.CodeInvalidEntry},
				"destination not empty + released writer": {func(in *chain.ForkInput) {
					in.DestinationCheckpointID, in.DestinationThreadID, in.Writer = srcRoot, "released", released.Writer
				}, chain.CodeWriterLost},
			} {
				in := def
				c.edit(&in)
				e.forkFails(what, c.code, in)
			}
			e.wantHead(dstThread, "")
			e.wantHead("released", "")
		}},
		{"M8_ForkResultNotAliased", func(e *env) {
			src := e.source()
			e.saveThread(srcThread, msg("source transcript"))
			in := e.defaultFork()
			got, err := e.fork(in)
			e.forked(got, err, src, in)
			e.equal("source transcript", e.transcript(srcThread), []json.RawMessage{msg("source transcript")})
			want := got.Clone()
			scribble(got)
			e.equal("stored fork root after mutating the result", e.get(forkID), want)
			e.equal("destination transcript after mutating the result", e.transcript(dstThread), src.Conversation)
			scribbleMsgs(e.transcript(dstThread))
			e.equal("stored fork root after mutating the transcript", e.get(forkID), want)
			e.equal("source root", e.get(srcRoot), src)
		}},
		{"M9_ConcurrentForksOneWins", func(e *env) {
			src := e.source()
			in := e.defaultFork()
			var wg sync.WaitGroup
			var results [2]*chain.Checkpoint
			var errs [2]error
			start := make(chan struct{})
			for i := range 2 {
				wg.Go(func() { <-start; results[i], errs[i] = e.s.Fork(bg, in) })
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				if err == nil {
					if winner >= 0 {
						e.t.Error("both concurrent forks succeeded")
					}
					winner = i
				} else {
					e.wantCode("losing fork", err, chain.CodeForkDestinationNotEmpty)
				}
			}
			if winner < 0 {
				e.t.Fatal("neither concurrent fork succeeded")
			}
			e.forked(results[winner], nil, src, in)
			e.wantRefs("after one fork", ref(aKey, 2))
		}},
		{"M10_DestinationIDIsSourceID", func(e *env) {
			e.source()
			in := e.defaultFork()
			in.DestinationCheckpointID = srcRoot
			e.forkFails("destinationCheckpointId = source checkpoint id", chain.CodeForkDestinationNotEmpty, in)
			e.wantEmptyDestination()
		}},
		// M11: a fork performs no blob I/O and calls no public store
		// method. These stores have no blob store and the kit cannot see
		// internal calls, so M11 maps to what is observable: the source's
		// keys name no bytes anywhere and the fork still succeeds (it reads
		// none), references change by exactly +1 per distinct key of the
		// source checkpoint, and no other thread changes.
		{"M11_ForkReadsNoBlobs", func(e *env) {
			k1, k2, a := testkit.FileKey(0x11), testkit.FileKey(0x22), artKey(0x33)
			src := &chain.Checkpoint{ID: srcRoot, ThreadID: srcThread, CreatedAt: 10, Reason: chain.ReasonNamed,
				Files:        []chain.Entry{file("x", k1), file("y", k1), file("z", k2), {Path: "l", Kind: chain.KindSymlink, Target: "x"}},
				Artifacts:    []chain.Artifact{artifact("a1", a), artifact("a2", a)},
				Conversation: []json.RawMessage{msg("m11")}}
			e.append(src.Clone(), "")
			e.append(withFiles(cp("9", "bystander", ""), file("z", k2)), "")
			e.saveThread("bystander", msg("bystander"))
			e.track(dstThread)
			bystander := e.stateOf([]string{srcThread, "bystander"}, []string{srcRoot, "9"})
			in := e.defaultFork()
			got, err := e.fork(in)
			e.forked(got, err, src, in)
			e.wantRefs("after the fork", ref(a, 2), ref(k1, 2), ref(k2, 3))
			after := e.stateOf([]string{srcThread, "bystander"}, []string{srcRoot, "9"})
			after.Refs = bystander.Refs
			e.equal("source and bystander threads", after, bystander)
		}},
		{"S3_SourceKeyWithoutReferences", func(e *env) {
			e.needHook("SetRefCount", e.sub.SetRefCount != nil)
			e.source()
			e.noErr("SetRefCount", e.sub.SetRefCount(aKey, 0))
			e.forkFails("source key without a reference row", chain.CodeInvalidEntry, e.defaultFork())
			e.wantEmptyDestination()
		}},
		{"S7_StorageFailureMidForkRollsBack", func(e *env) {
			publishFailure(e, e.source())
			e.wantRefs("after the retry", ref(aKey, 2))
		}},
	}
}

// publishFailure is M5 and S7: a failure injected at fork.publish makes the
// fork fail with it and leaves the destination empty and every count as it
// was; after removing the hook the same fork succeeds.
func publishFailure(e *env, src *chain.Checkpoint) {
	e.t.Helper()
	e.needHook("OnPoint", e.sub.OnPoint != nil)
	injected := errors.New("injected storage failure")
	remove := e.sub.OnPoint("fork.publish", func() error { return injected })
	in := e.defaultFork()
	before := e.state()
	if _, err := e.fork(in); !errors.Is(err, injected) {
		e.t.Errorf("fork with a failing fork.publish hook: got %v, want the hook's error", err)
	}
	e.same("after the failed fork", before)
	e.wantEmptyDestination()
	remove()
	got, err := e.fork(in)
	e.forked(got, err, src, in)
}
