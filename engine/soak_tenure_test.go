package engine_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/lease"
)

// ---- tenures: everything done while holding a lease ----

// soakHeld is a lease in a tenure and what its holder knows of it.
type soakHeld struct {
	l              *lease.Lease
	th             *soakThread
	lost, released bool
	renewed        int64 // clock at the last acquire or renew
}

// knownDead reports whether the lease cannot be live: released, reported
// lost, expired on the clock, or superseded by a later acquisition. Leases
// never come back, so a write begun after this is true must fail.
func (h *soakHeld) knownDead(s *soak) bool {
	return h.lost || h.released || s.now() >= h.l.ExpiresAt().UnixMilli() || h.th.fence.Load() > h.l.Fence
}

// outcome classifies a write's result. deadBefore is knownDead before the
// call; writerFirst says the writer is checked before anything the call's
// input could fail (so a dead lease must give WRITER_LOST). allowed lists
// the other codes the situation admits. It returns whether the write
// succeeded.
func (w *soakWorker) outcome(op soakOp, h *soakHeld, what string, err error, deadBefore, writerFirst bool, allowed ...string) bool {
	s := w.s
	s.count(op, err)
	h.th.note(s, "w%d fence %d %s: dead before %v: %v", w.g, h.l.Fence, what, deadBefore, err)
	if deadBefore {
		s.deadProbes.Add(1)
	} else if chain.Code(err) == chain.CodeWriterLost {
		s.lostMidway.Add(1)
	}
	if err == nil {
		if deadBefore {
			s.failf("fencing: %s on thread %s succeeded with fence %d, a lease dead before the call", what, h.th.name, h.l.Fence)
		}
		return true
	}
	code := chain.Code(err)
	if code == chain.CodeWriterLost {
		if !h.released && s.now() < h.l.ExpiresAt().UnixMilli() {
			s.failf("%s on thread %s: WRITER_LOST while fence %d was live until %d (now %d): %v", what, h.th.name, h.l.Fence, h.l.ExpiresAt().UnixMilli(), s.now(), err)
		}
		h.lost = true
		return false
	}
	if deadBefore && writerFirst {
		s.failf("%s on thread %s with a dead lease (fence %d): %v, want WRITER_LOST", what, h.th.name, h.l.Fence, err)
		return false
	}
	if !slices.Contains(allowed, code) {
		s.failf("%s on thread %s (fence %d): unexpected error %v", what, h.th.name, h.l.Fence, err)
	}
	return false
}

func (w *soakWorker) tenure(th *soakThread, fresh bool) {
	s := w.s
	before := th.fence.Load()
	l, err := s.db.AcquireWriter(s.ctx, th.name)
	if err != nil {
		s.count(soakOpAcquire, err)
		if chain.Code(err) != chain.CodeWriterConflict || fresh {
			s.failf("AcquireWriter(%s): %v", th.name, err)
		}
		return
	}
	s.count(soakOpAcquire, nil)
	switch {
	case l.Fence <= before:
		s.failf("AcquireWriter(%s) gave fence %d, but fence %d was acquired before the call", th.name, l.Fence, before)
	case fresh && l.Fence != 1:
		s.failf("AcquireWriter(%s), a new thread, gave fence %d", th.name, l.Fence)
	case l.ThreadID != th.name:
		s.failf("AcquireWriter(%s) gave a writer of thread %q", th.name, l.ThreadID)
	}
	th.bumpFence(l.Fence)
	h := &soakHeld{l: l, th: th, renewed: s.now()}
	tn := &soakTenure{fence: l.Fence, worker: w.g}
	defer func() {
		th.mu.Lock()
		th.tenures = append(th.tenures, tn)
		th.mu.Unlock()
	}()

	// The state at the start, read while holding the lease; a renewal
	// after the reads proves the lease was live (and so nobody else wrote)
	// throughout them.
	head, err := s.db.Head(s.ctx, th.name)
	if err != nil {
		s.failf("Head(%s): %v", th.name, err)
		return
	}
	list, err := s.db.List(s.ctx, th.name)
	if err != nil {
		s.failf("List(%s): %v", th.name, err)
		return
	}
	dead := h.knownDead(s)
	_, err = l.Renew(s.ctx)
	tn.valid = w.outcome(soakOpRenew, h, "renew after the start reads", err, dead, true)
	model := soakChainOf(list, head)
	tn.start = model.clone()
	th.note(s, "w%d fence %d acquired; valid %v; start %v", w.g, l.Fence, tn.valid, model)
	if tn.valid {
		h.renewed = s.now()
		if _, ok := model.parents[head]; head != "" && !ok {
			s.failf("thread %s: head %q is not among its checkpoints %v", th.name, head, model)
		}
		if fresh && !model.empty() {
			s.failf("new thread %s is not empty: %v", th.name, model)
		}
	}

	ops := 1 + w.r.IntN(6)
	if fresh {
		w.fork(h, &model, tn)
		ops = w.r.IntN(3)
	}
	for range ops {
		if s.stop.Load() {
			break
		}
		if s.now()-h.renewed >= soakRenew.Milliseconds() && !h.lost {
			w.renew(h)
		}
		switch k := w.r.IntN(100); {
		case k < 24:
			w.appendGood(h, &model, tn)
		case k < 46:
			w.capture(h, &model, tn)
		case k < 56:
			w.deleteHead(h, &model, tn)
		case k < 64:
			w.deleteCheckpoints(h, &model, tn)
		case k < 74:
			w.appendBad(h, model)
		case k < 80 || (k < 90 && model.empty()):
			w.fork(h, &model, tn)
		case k < 92:
			w.checkHead(h, model)
		case k < 95:
			s.expireLeases() // this lease (and every other) expires now, perhaps
		default:
			w.renew(h)
		}
	}
	tn.end = model
	th.note(s, "w%d fence %d ends with %v", w.g, l.Fence, model)

	if w.r.IntN(5) > 0 {
		err := l.Release(s.ctx)
		s.count(soakOpRelease, err)
		if err != nil {
			s.failf("Release(%s fence %d): %v", th.name, l.Fence, err)
		}
		h.released = true
		if w.r.IntN(3) == 0 {
			w.appendGood(h, &model, tn) // must fail: released
		}
		s.addDead(&soakDead{l: l, released: true})
	} else {
		// Abandoned: it blocks the thread until the clock passes it.
		s.addDead(&soakDead{l: l, expires: l.ExpiresAt().UnixMilli()})
	}
}

// renew renews the lease: the new expiry is the clock at the renewal plus
// the lease duration, and ExpiresAt then reads it.
func (w *soakWorker) renew(h *soakHeld) {
	s := w.s
	dead := h.knownDead(s)
	from := s.now()
	exp, err := h.l.Renew(s.ctx)
	to := s.now()
	if !w.outcome(soakOpRenew, h, "renew", err, dead, true) {
		return
	}
	lo, hi := from+soakLease.Milliseconds(), to+soakLease.Milliseconds()
	if e := exp.UnixMilli(); e < lo || e > hi || !h.l.ExpiresAt().Equal(exp) {
		s.failf("renew of %s returned expiry %d (ExpiresAt %d), outside [%d, %d]", h.th.name, e, h.l.ExpiresAt().UnixMilli(), lo, hi)
	}
	h.renewed = from
}

func (w *soakWorker) rawCheckpoint(id, thread, parent string) (*chain.Checkpoint, map[string]fstree.Node) {
	tmpl := w.s.templates[w.r.IntN(len(w.s.templates))]
	cp := &chain.Checkpoint{
		ID: id, ThreadID: thread, ParentID: parent, CreatedAt: w.s.now(), Reason: chain.ReasonAutomatic,
		Files:        slices.Clone(tmpl.files),
		Conversation: []json.RawMessage{soakMsg("raw " + id)},
	}
	if w.r.IntN(3) == 0 {
		cp.Reason, cp.Label, cp.SourceRunID = chain.ReasonNamed, "label "+id, "run-"+id
	}
	return cp, tmpl.tree
}

func (w *soakWorker) appendGood(h *soakHeld, model *soakChain, tn *soakTenure) {
	s := w.s
	id := w.id("a")
	cp, tree := w.rawCheckpoint(id, h.th.name, model.head)
	s.register(id, h.th.name, cp.Clone(), tree)
	dead := h.knownDead(s)
	got, err := s.db.Append(s.ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: model.head, Writer: h.l.Writer})
	cp.Conversation[0][0] = 'X' // the store keeps its own copy
	ok := w.outcome(soakOpAppend, h, "append "+id, err, dead, true)
	s.settle(id, ok, nil, nil)
	if ok {
		if got != id {
			s.failf("Append(%s) returned head %q", id, got)
		}
		model.add(id, model.head)
		tn.writes++
	}
}

// appendBad makes an append the store must refuse: stale expected head,
// parent unlike the expected head, or an id in use.
func (w *soakWorker) appendBad(h *soakHeld, model soakChain) {
	s := w.s
	ghost := w.id("ghost")
	var in chain.AppendInput
	var want string
	switch k := w.r.IntN(3); {
	case k == 0 || (k == 2 && model.head == ""):
		expected := ""
		if model.head == "" {
			expected = ghost
		}
		cp, _ := w.rawCheckpoint(w.id("bad"), h.th.name, expected)
		in, want = chain.AppendInput{Checkpoint: cp, ExpectedHeadID: expected}, chain.CodeStaleHead
	case k == 1:
		parent := ""
		if model.head == "" {
			parent = ghost
		}
		cp, _ := w.rawCheckpoint(w.id("bad"), h.th.name, parent)
		in, want = chain.AppendInput{Checkpoint: cp, ExpectedHeadID: model.head}, chain.CodeParentMismatch
	default:
		cp, _ := w.rawCheckpoint(model.head, h.th.name, model.head)
		in, want = chain.AppendInput{Checkpoint: cp, ExpectedHeadID: model.head}, chain.CodeDuplicateID
	}
	in.Writer = h.l.Writer
	dead := h.knownDead(s)
	fresh := want != chain.CodeDuplicateID
	if fresh {
		s.register(in.Checkpoint.ID, h.th.name, in.Checkpoint.Clone(), nil)
	}
	_, err := s.db.Append(s.ctx, in)
	if fresh {
		s.settle(in.Checkpoint.ID, err == nil, nil, nil)
	}
	if err == nil {
		s.count(soakOpAppendBad, err)
		s.failf("append %s on thread %s (model %v) succeeded, want %s", in.Checkpoint.ID, h.th.name, model, want)
		return
	}
	w.outcome(soakOpAppendBad, h, "bad append "+in.Checkpoint.ID, err, dead, true, want)
}

func (w *soakWorker) capture(h *soakHeld, model *soakChain, tn *soakTenure) {
	s := w.s
	if err := w.mutate(); err != nil {
		s.failf("worker %d: mutating the workspace: %v", w.g, err)
		return
	}
	tree, err := fstree.Read(w.ws)
	if err != nil {
		s.failf("worker %d: reading the workspace: %v", w.g, err)
		return
	}
	in := sbxdb.CaptureInput{Writer: h.l.Writer, Dir: w.ws, ID: w.id("c"), Conversation: []json.RawMessage{soakMsg("capture")}}
	if w.r.IntN(4) == 0 {
		a, err := s.db.PutArtifact(s.ctx, engine.ArtifactInput{
			ArtifactID: w.id("art"), Name: "out.txt", MimeType: "text/plain", Data: bytes.NewReader(s.artData[w.r.IntN(len(s.artData))]),
		})
		s.count(soakOpPutArtifact, err)
		if err != nil {
			s.failf("PutArtifact: %v", err)
			return
		}
		in.Artifacts = []chain.Artifact{a}
	}
	if w.r.IntN(3) == 0 {
		in.Reason, in.Label = chain.ReasonNamed, "named"
	}
	s.register(in.ID, h.th.name, nil, tree)
	dead := h.knownDead(s)
	res, err := s.db.Capture(s.ctx, in)
	var allowed []string
	if len(in.Artifacts) > 0 {
		// A sweep may take the artifact's blob between PutArtifact and
		// the capture pinning it: nothing referenced it yet.
		allowed = append(allowed, chain.CodeMissingBlob)
	}
	ok := w.outcome(soakOpCapture, h, "capture "+in.ID, err, dead, true, allowed...)
	if !ok {
		s.settle(in.ID, false, nil, nil)
		return
	}
	cp := res.Checkpoint
	if cp.ID != in.ID || cp.ThreadID != h.th.name || cp.ParentID != model.head {
		s.failf("lost update: capture %s on thread %s appended {id %q thread %q parent %q}, the thread's head was %q",
			in.ID, h.th.name, cp.ID, cp.ThreadID, cp.ParentID, model.head)
	}
	s.settle(in.ID, true, cp, tree)
	model.add(cp.ID, cp.ParentID)
	tn.writes++
}

func (w *soakWorker) deleteHead(h *soakHeld, model *soakChain, tn *soakTenure) {
	s := w.s
	if model.head == "" || w.r.IntN(5) == 0 {
		// Not the head: NOT_HEAD.
		target := w.id("ghost")
		for id := range model.parents {
			if id != model.head {
				target = id
				break
			}
		}
		dead := h.knownDead(s)
		err := s.db.DeleteHead(s.ctx, h.th.name, target, h.l.Writer)
		if err == nil {
			s.count(soakOpDeleteHead, err)
			s.failf("DeleteHead(%s, %s) of a non-head (model %v) succeeded", h.th.name, target, model)
			return
		}
		w.outcome(soakOpDeleteHead, h, "delete non-head "+target, err, dead, true, chain.CodeNotHead)
		return
	}
	id := model.head
	marked := s.markDeleting([]string{id})
	dead := h.knownDead(s)
	err := s.db.DeleteHead(s.ctx, h.th.name, id, h.l.Writer)
	ok := w.outcome(soakOpDeleteHead, h, "delete head "+id, err, dead, true)
	if ok {
		s.endDelete(marked, []string{id})
	} else {
		s.endDelete(marked, nil)
	}
	if ok {
		model.deleteHead()
		tn.writes++
	}
}

func (w *soakWorker) deleteCheckpoints(h *soakHeld, model *soakChain, tn *soakTenure) {
	s := w.s
	keep := w.r.IntN(4)
	next, predicted := model.retain(keep)
	slices.Sort(predicted)
	marked := s.markDeleting(predicted)
	dead := h.knownDead(s)
	got, err := s.db.DeleteCheckpoints(s.ctx, h.th.name, keep, h.l.Writer)
	ok := w.outcome(soakOpDeleteCheckpoints, h, fmt.Sprintf("DeleteCheckpoints(keep %d) predicted %v got %v", keep, predicted, got), err, dead, true)
	if !ok {
		s.endDelete(marked, nil)
		return
	}
	s.endDelete(marked, got)
	if !slices.Equal(slices.Sorted(slices.Values(got)), predicted) {
		s.failf("DeleteCheckpoints(%s, keep %d) deleted %v; the thread (%v) says %v", h.th.name, keep, got, model, predicted)
	}
	// In List order: createdAt, then id bytes (for those whose createdAt
	// is known: a capture's is known once its writer has returned).
	var prev *chain.Checkpoint
	for _, id := range got {
		r, _ := s.rec(id)
		if r.cp == nil {
			prev = nil
			continue
		}
		if prev != nil && cmp.Or(cmp.Compare(prev.CreatedAt, r.cp.CreatedAt), strings.Compare(prev.ID, id)) >= 0 {
			s.failf("DeleteCheckpoints(%s) returned %v, not in List order (%s before %s)", h.th.name, got, prev.ID, id)
		}
		prev = r.cp
	}
	*model = next
	tn.writes++
}

// fork forks a checkpoint of another thread into this one. It lands only
// if this thread is empty and has never had a transcript.
func (w *soakWorker) fork(h *soakHeld, model *soakChain, tn *soakTenure) {
	s := w.s
	var src string
	var srcRec soakCP
	for range 8 {
		id := s.ackedID(w.r)
		if id == "" {
			return
		}
		if r, ok := s.rec(id); ok && r.thread != h.th.name && r.cp != nil {
			src, srcRec = id, r
			break
		}
	}
	if src == "" {
		return
	}
	srcThread := srcRec.thread
	wrongThread := w.r.IntN(10) == 0
	if wrongThread {
		for _, th := range s.main {
			if th.name != srcThread && th.name != h.th.name {
				srcThread = th.name
				break
			}
		}
	}
	id := w.id("f")
	want := &chain.Checkpoint{
		ID: id, ThreadID: h.th.name, CreatedAt: s.now(), Reason: chain.ReasonForkRoot,
		Files: srcRec.cp.Files, Conversation: srcRec.cp.Conversation, Artifacts: srcRec.cp.Artifacts,
	}
	s.register(id, h.th.name, want.Clone(), srcRec.tree)
	h.th.mu.Lock()
	h.th.transcripts[soakDigest(want.Conversation)] = true
	h.th.mu.Unlock()
	savedBefore := h.th.saved.Load()
	dead := h.knownDead(s)
	got, err := s.db.Fork(s.ctx, chain.ForkInput{
		SourceThreadID: srcThread, SourceCheckpointID: src, DestinationThreadID: h.th.name,
		DestinationCheckpointID: id, CreatedAt: want.CreatedAt, Writer: h.l.Writer,
	})
	ok := w.outcome(soakOpFork, h, fmt.Sprintf("fork %s/%s → %s", srcThread, src, id), err, dead, false,
		chain.CodeForkSourceNotFound, chain.CodeForkSourceThreadMismatch, chain.CodeForkDestinationNotEmpty)
	s.settle(id, ok, nil, nil)
	if !ok {
		switch chain.Code(err) {
		case chain.CodeForkSourceNotFound:
			if cp, gerr := s.db.Get(s.ctx, src); gerr != nil || cp != nil {
				s.failf("fork from %s: FORK_SOURCE_NOT_FOUND, but Get finds it (%v)", src, gerr)
			}
		case chain.CodeForkSourceThreadMismatch:
			if !wrongThread {
				s.failf("fork from %s of thread %s: %v", src, srcThread, err)
			}
		case chain.CodeForkDestinationNotEmpty:
			if dead {
				s.failf("fork into %s with a dead lease (fence %d): %v, want WRITER_LOST (the writer is checked first)", h.th.name, h.l.Fence, err)
			} else if !h.knownDead(s) && model.empty() && h.th.blockers.Load() == 0 {
				s.failf("fork into %s (empty, no transcript): %v", h.th.name, err)
			}
		}
		return
	}
	switch {
	case wrongThread:
		s.failf("fork from %s named as thread %s succeeded", src, srcThread)
	case !model.empty() || savedBefore > 0:
		s.failf("fork into %s succeeded, but the thread was not empty (%v, %d transcripts saved)", h.th.name, model, savedBefore)
	case !soakSameCP(got, want):
		s.failf("fork %s returned a checkpoint unlike its source:\n%s", id, gocmp.Diff(want.Clone(), got.Clone()))
	}
	h.th.blockers.Add(1)
	h.th.saved.Add(1)
	model.add(id, "")
	tn.writes++
	if strings.HasPrefix(h.th.name, "fk") {
		s.mu.Lock()
		s.forked = append(s.forked, h.th)
		s.mu.Unlock()
	}
}

// checkHead reads the head while holding the lease: it must be the model's
// unless the lease has expired.
func (w *soakWorker) checkHead(h *soakHeld, model soakChain) {
	s := w.s
	head, err := s.db.Head(s.ctx, h.th.name)
	s.count(soakOpHead, err)
	if err != nil {
		s.failf("Head(%s): %v", h.th.name, err)
		return
	}
	if head != model.head && !h.lost && !h.released && s.now() < h.l.ExpiresAt().UnixMilli() {
		s.failf("lost update: thread %s head is %q, its live lease holder (fence %d) wrote up to %v", h.th.name, head, h.l.Fence, model)
	}
}
