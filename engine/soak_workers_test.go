package engine_test

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/gc"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/lease"
)

// ---- a worker ----

type soakWorker struct {
	s  *soak
	g  int
	r  *rand.Rand
	ws string
	n  int
}

func newSoakWorker(s *soak, g int) *soakWorker {
	w := &soakWorker{s: s, g: g, r: rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano()))), ws: filepath.Join(s.dir, "ws", fmt.Sprint(g))}
	return w
}

func (w *soakWorker) id(prefix string) string {
	w.n++
	return fmt.Sprintf("%s%d-%d", prefix, w.g, w.n)
}

func (w *soakWorker) loop() {
	s := w.s
	defer func() {
		if r := recover(); r != nil {
			s.failf("worker %d panicked: %v\n%s", w.g, r, debug.Stack())
		}
	}()
	if err := w.initWorkspace(); err != nil {
		s.failf("worker %d: workspace: %v", w.g, err)
		return
	}
	for !s.stop.Load() {
		switch n := w.r.IntN(100); {
		case n < 34:
			w.tenure(s.main[w.r.IntN(len(s.main))], false)
		case n < 37:
			s.mu.Lock()
			var th *soakThread
			if len(s.forked) > 0 {
				th = s.forked[w.r.IntN(len(s.forked))]
			}
			s.mu.Unlock()
			if th != nil {
				w.tenure(th, false)
			}
		case n < 41:
			w.tenure(s.thread(w.id("fk")), true)
		case n < 46:
			w.get()
		case n < 51:
			w.list()
		case n < 54:
			w.head()
		case n < 56:
			w.blobRefs()
		case n < 62:
			w.restore()
		case n < 64:
			w.readArtifact()
		case n < 67:
			w.saveThread()
		case n < 70:
			w.loadThread()
		case n < 74:
			w.instance()
		case n < 84:
			w.deadWriter()
		case n < 86:
			w.badInput()
		case n < 89:
			w.sweep()
		case n < 91:
			w.gc()
		case n < 92:
			w.repack()
		case n < 93:
			s.expireLeases()
		default:
			w.head()
		}
	}
}

// ---- the workspace ----

func (w *soakWorker) writeFile(rel string, data []byte, mode os.FileMode) error {
	p := filepath.Join(w.ws, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

func (w *soakWorker) initWorkspace() error {
	for i := range w.s.shared {
		if err := w.writeFile(fmt.Sprintf("f%d.txt", i), w.s.shared[i][0], 0o644); err != nil {
			return err
		}
	}
	if err := w.writeFile("sub/g.txt", fmt.Appendf(nil, "worker %d\n", w.g), 0o644); err != nil {
		return err
	}
	if err := w.writeFile("sub/deep/h.txt", fmt.Appendf(nil, "worker %d own 0\n", w.g), 0o644); err != nil {
		return err
	}
	if w.g%soakBigEvery == 0 {
		if err := w.writeFile("big.bin", w.s.large[0], 0o644); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(w.ws, "empty"), 0o755)
}

// mutate changes one to three things in the workspace: file contents
// (mostly to versions other workers use too, so blobs are shared and
// re-used after sweeps), an executable file, a symlink, an empty directory.
func (w *soakWorker) mutate() error {
	for range 1 + w.r.IntN(3) {
		var err error
		switch k := w.r.IntN(10); k {
		case 0, 1, 2, 3:
			i := w.r.IntN(len(w.s.shared))
			err = w.writeFile(fmt.Sprintf("f%d.txt", i), w.s.shared[i][w.r.IntN(4)], 0o644)
		case 4:
			err = w.writeFile("sub/deep/h.txt", fmt.Appendf(nil, "worker %d own %d\n", w.g, w.r.IntN(3)), 0o644)
		case 5:
			p := filepath.Join(w.ws, "run.sh")
			if _, e := os.Lstat(p); e == nil {
				err = os.Remove(p)
			} else {
				err = w.writeFile("run.sh", fmt.Appendf(nil, "#!/bin/sh\necho %d\n", w.r.IntN(3)), 0o755)
			}
		case 6:
			p := filepath.Join(w.ws, "link")
			if _, e := os.Lstat(p); e == nil {
				err = os.Remove(p)
			} else {
				err = os.Symlink("f0.txt", p)
			}
		case 7:
			p := filepath.Join(w.ws, "empty")
			if _, e := os.Lstat(p); e == nil {
				err = os.Remove(p)
			} else {
				err = os.Mkdir(p, 0o755)
			}
		case 8:
			p := filepath.Join(w.ws, "f5.txt")
			if _, e := os.Lstat(p); e == nil {
				err = os.Remove(p)
			} else {
				err = w.writeFile("f5.txt", w.s.shared[5][w.r.IntN(4)], 0o644)
			}
		case 9:
			if w.g%soakBigEvery == 0 && w.r.IntN(4) == 0 {
				err = w.writeFile("big.bin", w.s.large[w.r.IntN(2)], 0o644)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ---- operations without a lease ----

func (w *soakWorker) anyThread() *soakThread {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.forked) > 0 && w.r.IntN(5) == 0 {
		return s.forked[w.r.IntN(len(s.forked))]
	}
	return s.main[w.r.IntN(len(s.main))]
}

func (w *soakWorker) get() {
	s := w.s
	id := s.ackedID(w.r)
	if id == "" {
		return
	}
	r0, _ := s.rec(id)
	active, starts := s.gcMark()
	cp, err := s.db.Get(s.ctx, id)
	s.count(soakOpGet, err)
	if err != nil {
		s.failf("Get(%s): %v", id, err)
		return
	}
	r1, _ := s.rec(id)
	if cp != nil {
		s.checkSeen("Get", cp, r0.status)
		return
	}
	if r0.quiet() && r1.quiet() && !s.gcOverlap(active, starts) {
		again, err := s.db.Get(s.ctx, id)
		s.failf("lost update: Get(%s) found nothing, but it was acknowledged and nobody deleted it (again: %v, %v)\njournal of %s:\n%s",
			id, again != nil, err, r0.thread, s.thread(r0.thread).journalText())
	}
}

func (w *soakWorker) list() {
	s := w.s
	th := w.anyThread()
	th.mu.Lock()
	ids := slices.Clone(th.ids)
	th.mu.Unlock()
	before := map[string]soakCP{}
	s.mu.Lock()
	for _, id := range ids {
		before[id] = *s.cps[id]
	}
	s.mu.Unlock()
	active, starts := s.gcMark()
	list, err := s.db.List(s.ctx, th.name)
	s.count(soakOpList, err)
	if err != nil {
		s.failf("List(%s): %v", th.name, err)
		return
	}
	seen := map[string]bool{}
	for i, cp := range list {
		seen[cp.ID] = true
		s.checkSeen("List("+th.name+")", cp, before[cp.ID].status)
		if i > 0 && cmp.Or(cmp.Compare(list[i-1].CreatedAt, cp.CreatedAt), strings.Compare(list[i-1].ID, cp.ID)) >= 0 {
			s.failf("List(%s) out of order at %d: %s then %s", th.name, i, list[i-1].ID, cp.ID)
		}
	}
	if s.gcOverlap(active, starts) {
		return
	}
	s.mu.Lock()
	var lost []string
	for id, r := range before {
		if r.quiet() && s.cps[id].quiet() && !seen[id] {
			lost = append(lost, id)
		}
	}
	s.mu.Unlock()
	if len(lost) == 0 {
		return
	}
	slices.Sort(lost)
	var b strings.Builder
	for _, id := range lost {
		cp, err := s.db.Get(s.ctx, id)
		fmt.Fprintf(&b, "\n\tGet(%s) now: %v, %v", id, cp != nil, err)
	}
	again, err := s.db.List(s.ctx, th.name)
	ids = ids[:0]
	for _, cp := range again {
		ids = append(ids, cp.ID)
	}
	head, herr := s.db.Head(s.ctx, th.name)
	s.failf("lost update: List(%s) lacks %v, acknowledged and never deleted; it listed %d checkpoints, now %v (%v), head %q (%v)%s\njournal of %s:\n%s",
		th.name, lost, len(list), ids, err, head, herr, b.String(), th.name, th.journalText())
}

func (w *soakWorker) head() {
	s := w.s
	th := w.anyThread()
	head, err := s.db.Head(s.ctx, th.name)
	s.count(soakOpHead, err)
	if err != nil {
		s.failf("Head(%s): %v", th.name, err)
		return
	}
	if head == "" {
		return
	}
	r, ok := s.rec(head)
	switch {
	case !ok:
		s.failf("Head(%s) = %q, which nobody wrote", th.name, head)
	case r.status == soakFailed:
		s.failf("Head(%s) = %q, whose write failed", th.name, head)
	case r.thread != th.name:
		s.failf("Head(%s) = %q, a checkpoint of thread %s", th.name, head, r.thread)
	}
}

func (w *soakWorker) blobRefs() {
	s := w.s
	refs, err := s.db.BlobReferences(s.ctx)
	s.count(soakOpBlobRefs, err)
	if err != nil {
		s.failf("BlobReferences: %v", err)
		return
	}
	for i, ref := range refs {
		if ref.References <= 0 || !(strings.HasPrefix(ref.Key, chain.FilePrefix) || strings.HasPrefix(ref.Key, chain.ArtifactPrefix)) {
			s.failf("BlobReferences: bad entry %+v", ref)
		}
		if i > 0 && refs[i-1].Key >= ref.Key {
			s.failf("BlobReferences out of order: %s then %s", refs[i-1].Key, ref.Key)
		}
	}
}

// goneNow reports whether checkpoint id is gone, as a failed restore or
// artifact read may claim only then.
func (w *soakWorker) goneNow(id string) bool {
	cp, err := w.s.db.Get(w.s.ctx, id)
	return err == nil && cp == nil
}

func (w *soakWorker) restore() {
	s := w.s
	id := s.ackedID(w.r)
	if id == "" {
		return
	}
	r, _ := s.rec(id)
	out := filepath.Join(s.dir, "restore", w.id("r"))
	defer os.RemoveAll(out)
	_, err := s.db.Restore(s.ctx, id, out, nil)
	s.count(soakOpRestore, err)
	if err != nil {
		switch chain.Code(err) {
		case chain.CodeCheckpointNotFound, chain.CodeMissingBlob:
			// Deleted meanwhile (and its blobs swept): fine if it is gone.
			if !w.goneNow(id) {
				s.failf("Restore(%s) of a checkpoint that still exists: %v", id, err)
			}
		default:
			s.failf("Restore(%s): %v", id, err)
		}
		return
	}
	got, err := fstree.Read(out)
	if err != nil {
		s.failf("reading restore of %s: %v", id, err)
		return
	}
	if diff := fstree.Diff(r.tree, got); diff != nil {
		s.failf("checkpoint %s restored wrong:\n%s", id, strings.Join(diff, "\n"))
	}
}

func (w *soakWorker) readArtifact() {
	s := w.s
	s.mu.Lock()
	id := s.pickAcked(w.r, s.withArts)
	s.mu.Unlock()
	if id == "" {
		return
	}
	r, _ := s.rec(id)
	want := r.cp.Artifacts[0]
	a, data, err := s.db.ReadArtifact(s.ctx, r.thread, id, want.ArtifactID)
	s.count(soakOpReadArtifact, err)
	if err != nil {
		switch chain.Code(err) {
		case chain.CodeMissingCheckpointArtifact, chain.CodeInvalidArtifactBytes:
			if !w.goneNow(id) {
				s.failf("ReadArtifact(%s, %s) of a checkpoint that still exists: %v", id, want.ArtifactID, err)
			}
		default:
			s.failf("ReadArtifact(%s, %s): %v", id, want.ArtifactID, err)
		}
		return
	}
	sum := sha256.Sum256(data)
	if a != want || chain.ArtifactPrefix+hex.EncodeToString(sum[:]) != want.BlobKey || int64(len(data)) != want.Size {
		s.failf("ReadArtifact(%s, %s) = %+v with %d bytes, want %+v", id, want.ArtifactID, a, len(data), want)
	}
}

func (w *soakWorker) saveThread() {
	s := w.s
	th := w.anyThread()
	if th.noSave {
		return
	}
	msgs := []json.RawMessage{soakMsg(w.id("m"))}
	for range w.r.IntN(3) {
		msgs = append(msgs, soakMsg("more"))
	}
	th.mu.Lock()
	th.transcripts[soakDigest(msgs)] = true
	th.mu.Unlock()
	th.blockers.Add(1)
	err := s.db.SaveThread(s.ctx, th.name, msgs)
	s.count(soakOpSaveThread, err)
	if err != nil {
		s.failf("SaveThread(%s): %v", th.name, err)
		return
	}
	th.saved.Add(1)
}

func (w *soakWorker) loadThread() {
	s := w.s
	th := w.anyThread()
	saved := th.saved.Load()
	msgs, err := s.db.LoadThread(s.ctx, th.name)
	s.count(soakOpLoadThread, err)
	if err != nil {
		s.failf("LoadThread(%s): %v", th.name, err)
		return
	}
	if len(msgs) == 0 {
		if saved > 0 {
			s.failf("LoadThread(%s) = [], but %d transcripts were saved before", th.name, saved)
		}
		return
	}
	th.mu.Lock()
	known := th.transcripts[soakDigest(msgs)]
	th.mu.Unlock()
	if !known {
		s.failf("LoadThread(%s) returned a transcript nobody saved: %s", th.name, msgs)
	}
}

func (w *soakWorker) instance() {
	s := w.s
	st := s.db.Instances()
	if w.r.IntN(2) == 0 {
		// A key of this worker alone: reads see exactly its writes.
		key := fmt.Sprintf("own-%d", w.g)
		rec := sbxdb.InstanceRecord{Key: key, Provider: "fake", ProviderSandboxID: w.id("sb"), ThreadID: "t0", UpdatedAt: s.now()}
		if w.r.IntN(2) == 0 {
			rec.LatestSnapshotID, rec.LatestRunID = "snap", "run"
		}
		err := st.Upsert(s.ctx, rec)
		s.count(soakOpInstance, err)
		got, gerr := st.Get(s.ctx, key)
		s.count(soakOpInstance, gerr)
		if err != nil || gerr != nil || got == nil || *got != rec {
			s.failf("instance %s: Upsert %v, then Get = %+v, %v; want %+v", key, err, got, gerr, rec)
			return
		}
		if w.r.IntN(2) == 0 {
			err := st.Delete(s.ctx, key)
			got, gerr := st.Get(s.ctx, key)
			s.count(soakOpInstance, err)
			s.count(soakOpInstance, gerr)
			if err != nil || gerr != nil || got != nil {
				s.failf("instance %s: Delete %v, then Get = %+v, %v", key, err, got, gerr)
			}
		}
		return
	}
	key := fmt.Sprintf("shared-%d", w.r.IntN(4))
	switch w.r.IntN(3) {
	case 0:
		rec := sbxdb.InstanceRecord{Key: key, Provider: "fake", ProviderSandboxID: w.id("sb"), ThreadID: "t1", UpdatedAt: s.now()}
		s.mu.Lock()
		if s.instances[key] == nil {
			s.instances[key] = map[string]bool{}
		}
		s.instances[key][fmt.Sprintf("%+v", rec)] = true
		s.mu.Unlock()
		err := st.Upsert(s.ctx, rec)
		s.count(soakOpInstance, err)
		if err != nil {
			s.failf("instance Upsert(%s): %v", key, err)
		}
	case 1:
		got, err := st.Get(s.ctx, key)
		s.count(soakOpInstance, err)
		if err != nil {
			s.failf("instance Get(%s): %v", key, err)
			return
		}
		if got != nil {
			s.mu.Lock()
			ok := s.instances[key][fmt.Sprintf("%+v", *got)]
			s.mu.Unlock()
			if !ok {
				s.failf("instance Get(%s) = %+v, which nobody upserted", key, *got)
			}
		}
	default:
		err := st.Delete(s.ctx, key)
		s.count(soakOpInstance, err)
		if err != nil {
			s.failf("instance Delete(%s): %v", key, err)
		}
	}
}

// deadWriter writes with a lease known dead, a writer of another thread, or
// a made-up one: every write must fail with WRITER_LOST (fork may first
// find its source gone), and a release must change nothing.
func (w *soakWorker) deadWriter() {
	s := w.s
	s.mu.Lock()
	var d *soakDead
	if len(s.dead) > 0 {
		d = s.dead[w.r.IntN(len(s.dead))]
	}
	s.mu.Unlock()
	if d == nil {
		return
	}
	wr := d.l.Writer
	reallyDead := d.released || s.now() >= d.expires
	known := reallyDead // the write must fail
	th := s.thread(wr.ThreadID)
	switch k := w.r.IntN(10); {
	case k == 0: // another thread's writer
		other := s.main[w.r.IntN(len(s.main))]
		if other.name == wr.ThreadID {
			return
		}
		th, known = other, true
		if w.r.IntN(2) == 0 {
			wr.ThreadID = other.name // the right thread, another thread's token
		}
	case k == 1: // a made-up token with the thread's current fence
		wr = chain.Writer{ThreadID: th.name, OwnerToken: lease.NewToken(), Fence: th.fence.Load()}
		known = true
	case !known:
		return
	}
	head, err := s.db.Head(s.ctx, th.name)
	if err != nil {
		s.failf("Head(%s): %v", th.name, err)
		return
	}
	what := fmt.Sprintf("with dead/foreign writer {%s fence %d} on thread %s", wr.ThreadID, wr.Fence, th.name)
	var wantCodes = []string{chain.CodeWriterLost}
	switch w.r.IntN(7) {
	case 0, 1:
		id := w.id("dead")
		cp, _ := w.rawCheckpoint(id, th.name, head)
		s.register(id, th.name, cp.Clone(), nil)
		_, err = s.db.Append(s.ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: wr})
		s.settle(id, err == nil, nil, nil)
		what = "append " + what
	case 2:
		target := head
		if target == "" {
			target = w.id("ghost")
		}
		err = s.db.DeleteHead(s.ctx, th.name, target, wr)
		what = "delete head " + what
	case 3:
		_, err = s.db.DeleteCheckpoints(s.ctx, th.name, 0, wr)
		what = "delete checkpoints " + what
	case 4:
		if wr != d.l.Writer || !reallyDead {
			return
		}
		if w.r.IntN(2) == 0 {
			_, err = d.l.Renew(s.ctx)
			what = "renew " + what
		} else {
			// Must be harmless: the live holder, if any, would see
			// WRITER_LOST before its expiry and fail the test.
			err = d.l.Release(s.ctx)
			s.count(soakOpDeadWriter, err)
			if err != nil {
				s.failf("release %s: %v", what, err)
			}
			return
		}
	case 5:
		if wr.ThreadID != th.name {
			return // Capture writes to the writer's own thread, maybe live
		}
		_, err = s.db.Capture(s.ctx, sbxdb.CaptureInput{Writer: wr, Dir: w.ws, ID: w.id("dead")})
		what = "capture " + what
	default:
		src := s.ackedID(w.r)
		r, ok := s.rec(src)
		if !ok || r.thread == th.name {
			return
		}
		_, err = s.db.Fork(s.ctx, chain.ForkInput{SourceThreadID: r.thread, SourceCheckpointID: src,
			DestinationThreadID: th.name, DestinationCheckpointID: w.id("dead"), CreatedAt: s.now(), Writer: wr})
		what = "fork " + what
		wantCodes = append(wantCodes, chain.CodeForkSourceNotFound)
	}
	s.count(soakOpDeadWriter, err)
	th.note(s, "w%d %s: %v", w.g, what, err)
	if !known {
		return
	}
	s.deadProbes.Add(1)
	if err == nil {
		s.failf("fencing: %s succeeded", what)
	} else if !slices.Contains(wantCodes, chain.Code(err)) {
		s.failf("%s: %v, want WRITER_LOST", what, err)
	}
}

// badInput makes calls the contract rejects for their input alone.
func (w *soakWorker) badInput() {
	s := w.s
	lone := "\xed\xa0\x80"
	var err error
	var want string
	switch w.r.IntN(5) {
	case 0:
		_, err = s.db.AcquireWriter(s.ctx, "")
		want = chain.CodeInvalidID
	case 1:
		_, err = s.db.Get(s.ctx, lone)
		want = chain.CodeInvalidID
	case 2:
		_, err = s.db.DeleteCheckpoints(s.ctx, "t0", -1, chain.Writer{ThreadID: "t0", OwnerToken: "x", Fence: 1})
		want = chain.CodeInvalidEntry
	case 3:
		cp, _ := w.rawCheckpoint(w.id("inv"), "t0", "")
		cp.Files = []chain.Entry{{Path: "../escape", Kind: chain.KindDir}}
		_, err = s.db.Append(s.ctx, chain.AppendInput{Checkpoint: cp, Writer: chain.Writer{ThreadID: "t0"}})
		want = chain.CodeInvalidEntry
	default:
		_, err = s.db.Sweep(s.ctx, sbxdb.SweepOptions{OlderThan: -time.Second})
		s.count(soakOpBadInput, err)
		if !errors.Is(err, gc.ErrInvalidOptions) {
			s.failf("Sweep with a negative window: %v", err)
		}
		return
	}
	s.count(soakOpBadInput, err)
	if chain.Code(err) != want {
		s.failf("bad input: %v, want %s", err, want)
	}
}

func (w *soakWorker) sweep() {
	s := w.s
	res, err := s.db.Sweep(s.ctx, sbxdb.SweepOptions{Immediate: true, DryRun: w.r.IntN(5) == 0})
	s.count(soakOpSweep, err)
	if err != nil {
		s.failf("Sweep: %v", err)
		return
	}
	if !slices.IsSorted(res.Deleted) {
		s.failf("Sweep deleted keys out of order: %v", res.Deleted)
	}
}

func (w *soakWorker) gc() {
	s := w.s
	retain := w.r.IntN(2) == 0
	if retain {
		s.gcActive.Add(1)
		s.gcStarts.Add(1)
		defer s.gcActive.Add(-1)
	}
	res, err := s.db.GC(s.ctx, sbxdb.GCOptions{Retain: retain, Keep: soakGCKeep, Immediate: true, RepackThreshold: 0.05})
	s.count(soakOpGC, err)
	if res != nil {
		for th, ids := range res.Retention.Deleted {
			s.thread(th).note(s, "w%d GC deleted %v (err %v)", w.g, ids, err)
			s.endDelete(nil, ids)
		}
	}
	// Retention takes each lease, so a worker can take it back when the
	// clock passes it: WRITER_LOST is then the GC's result.
	if err != nil && chain.Code(err) != chain.CodeWriterLost {
		s.failf("GC: %v", err)
	}
}

func (w *soakWorker) repack() {
	s := w.s
	_, err := s.db.Repack(s.ctx, cas.RepackOptions{Threshold: []float64{0.01, 0.2, 0}[w.r.IntN(3)]})
	s.count(soakOpRepack, err)
	if err != nil {
		s.failf("Repack: %v", err)
	}
}
