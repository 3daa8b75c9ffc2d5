package engine_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/lease"
)

// Checkpoint statuses in the test's registry.
const (
	soakPending = iota // its write is in flight
	soakAcked          // written and acknowledged
	soakFailed         // its write failed: it must never be seen
	soakDeleted        // deleted, and the delete acknowledged
)

type soakCP struct {
	thread string
	cp     *chain.Checkpoint      // content; nil for a capture in flight
	tree   map[string]fstree.Node // what it restores to
	status int
	// deleting counts the deletes naming it in flight. It is a count:
	// a tenure whose lease died may be failing to delete it while the
	// next one deletes it.
	deleting int
}

// soakChain is a model of one thread: its checkpoints (id → parent) and head.
type soakChain struct {
	head    string
	parents map[string]string
}

func newSoakChain() soakChain { return soakChain{parents: map[string]string{}} }

func (c soakChain) clone() soakChain {
	return soakChain{head: c.head, parents: maps.Clone(c.parents)}
}

func (c soakChain) equal(o soakChain) bool {
	return c.head == o.head && maps.Equal(c.parents, o.parents)
}

func (c soakChain) empty() bool { return c.head == "" && len(c.parents) == 0 }

func (c soakChain) String() string {
	ids := slices.Sorted(maps.Keys(c.parents))
	var b strings.Builder
	fmt.Fprintf(&b, "head %q, %d checkpoints [", c.head, len(ids))
	for i, id := range ids {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s←%s", id, c.parents[id])
	}
	b.WriteString("]")
	return b.String()
}

func (c *soakChain) add(id, parent string) {
	c.parents[id] = parent
	c.head = id
}

// deleteHead is DB.DeleteHead: the head moves to its parent if that is
// still a checkpoint of the thread, else the thread has no head.
func (c *soakChain) deleteHead() string {
	id := c.head
	p := c.parents[id]
	delete(c.parents, id)
	c.head = ""
	if _, ok := c.parents[p]; ok && p != "" {
		c.head = p
	}
	return id
}

// retain is DB.DeleteCheckpoints: keep the first max(keep, 1) checkpoints of
// the head chain, delete every other one. It returns the new state and the
// deleted ids.
func (c soakChain) retain(keep int) (soakChain, []string) {
	kept := map[string]bool{}
	for id := c.head; id != "" && len(kept) < max(keep, 1) && !kept[id]; id = c.parents[id] {
		if _, ok := c.parents[id]; !ok {
			break
		}
		kept[id] = true
	}
	next := soakChain{head: c.head, parents: map[string]string{}}
	var deleted []string
	for id, p := range c.parents {
		if kept[id] {
			next.parents[id] = p
		} else {
			deleted = append(deleted, id)
		}
	}
	return next, deleted
}

func soakChainOf(list []*chain.Checkpoint, head string) soakChain {
	st := soakChain{head: head, parents: map[string]string{}}
	for _, cp := range list {
		st.parents[cp.ID] = cp.ParentID
	}
	return st
}

// soakTenure is one successful acquisition of a thread's lease and what it did.
type soakTenure struct {
	fence  uint64
	worker int
	valid  bool // its start state was read while it held the lease
	start  soakChain
	end    soakChain
	writes int // acknowledged writes
}

type soakThread struct {
	name string
	// fence is the highest fence our acquisitions have returned.
	fence atomic.Uint64
	// blockers counts transcript saves started and forks acknowledged: a
	// fork into the thread may then be refused. saved counts those done: a
	// fork must then be refused.
	blockers, saved atomic.Int64
	noSave          bool // never SaveThread here, so a fork may land once it is empty

	mu          sync.Mutex
	tenures     []*soakTenure
	ids         []string        // every checkpoint id registered for the thread
	journal     []string        // what happened to the thread, for failure reports
	transcripts map[string]bool // digests of every transcript saved or forked in
}

// note records an event in the thread's journal (the newest 300).
func (th *soakThread) note(s *soak, format string, args ...any) {
	e := fmt.Sprintf("%d ", s.now()%100_000) + fmt.Sprintf(format, args...)
	th.mu.Lock()
	defer th.mu.Unlock()
	if len(th.journal) >= 300 {
		th.journal = slices.Delete(th.journal, 0, 100)
	}
	th.journal = append(th.journal, e)
}

func (th *soakThread) journalText() string {
	th.mu.Lock()
	defer th.mu.Unlock()
	return "\t" + strings.Join(th.journal, "\n\t")
}

func (th *soakThread) bumpFence(f uint64) {
	for {
		old := th.fence.Load()
		if f <= old || th.fence.CompareAndSwap(old, f) {
			return
		}
	}
}

type soakDead struct {
	l        *lease.Lease
	released bool
	expires  int64 // ms, the last expiry its holder knew
}

// ---- bookkeeping ----

func (s *soak) thread(name string) *soakThread {
	s.mu.Lock()
	defer s.mu.Unlock()
	th := s.threads[name]
	if th == nil {
		th = &soakThread{name: name, transcripts: map[string]bool{}}
		s.threads[name] = th
	}
	return th
}

func (s *soak) register(id, thread string, cp *chain.Checkpoint, tree map[string]fstree.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.cps[id]; dup {
		panic("soak: id registered twice: " + id)
	}
	s.cps[id] = &soakCP{thread: thread, cp: cp, tree: tree, status: soakPending}
	th := s.threads[thread]
	th.mu.Lock()
	th.ids = append(th.ids, id)
	th.mu.Unlock()
}

// settle records the outcome of a write that creates id. The next tenure
// may have found the checkpoint, even deleted it, before its writer
// returned: a deletion stays recorded.
func (s *soak) settle(id string, ok bool, cp *chain.Checkpoint, tree map[string]fstree.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.cps[id]
	if !ok {
		if r.status != soakPending || r.deleting > 0 {
			s.failf("the write of %s failed, but another writer found it stored", id)
		}
		r.status = soakFailed
		return
	}
	if r.status == soakPending {
		r.status = soakAcked
	}
	if cp != nil {
		r.cp = cp.Clone()
	}
	if tree != nil {
		r.tree = tree
	}
	s.acked = append(s.acked, id)
	if len(r.cp.Artifacts) > 0 {
		s.withArts = append(s.withArts, id)
	}
}

// markDeleting records deletes of ids beginning (of those written or
// being written) and returns the ids it marked, for endDelete.
func (s *soak) markDeleting(ids []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var marked []string
	for _, id := range ids {
		if r := s.cps[id]; r != nil && (r.status == soakPending || r.status == soakAcked) {
			r.deleting++
			marked = append(marked, id)
		}
	}
	return marked
}

// endDelete records deletes ending: marked as markDeleting returned it,
// deleted what was deleted.
func (s *soak) endDelete(marked, deleted []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range marked {
		s.cps[id].deleting--
	}
	for _, id := range deleted {
		if r := s.cps[id]; r != nil {
			r.status = soakDeleted
		}
	}
}

// quiet reports whether a checkpoint is written, not deleted, and no
// delete naming it is in flight: a read must find it.
func (r soakCP) quiet() bool { return r.status == soakAcked && r.deleting == 0 }

func (s *soak) rec(id string) (soakCP, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.cps[id]
	if r == nil {
		return soakCP{}, false
	}
	return *r, true
}

// pickAcked returns an acknowledged id, recent ones more often (they are
// likelier to exist), or "".
func (s *soak) pickAcked(r *rand.Rand, from []string) string {
	if len(from) == 0 {
		return ""
	}
	if r.IntN(3) > 0 && len(from) > 64 {
		return from[len(from)-1-r.IntN(64)]
	}
	return from[r.IntN(len(from))]
}

func (s *soak) ackedID(r *rand.Rand) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pickAcked(r, s.acked)
}

func (s *soak) addDead(d *soakDead) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dead) < 512 {
		s.dead = append(s.dead, d)
	} else {
		s.dead[rand.IntN(len(s.dead))] = d
	}
}

// gcMark returns a token that gcOverlap compares to tell whether a GC with
// retention ran during a read: its deletions are not announced in advance.
func (s *soak) gcMark() (int64, int64) { return s.gcActive.Load(), s.gcStarts.Load() }

func (s *soak) gcOverlap(active, starts int64) bool {
	return active > 0 || s.gcActive.Load() > 0 || s.gcStarts.Load() != starts
}

func soakDigest(msgs []json.RawMessage) string {
	h := sha256.New()
	for _, m := range msgs {
		fmt.Fprintf(h, "%d:", len(m))
		h.Write(m)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func soakMsg(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"role": "user", "content": text})
	return b
}

func soakSameCP(a, b *chain.Checkpoint) bool { return reflect.DeepEqual(a.Clone(), b.Clone()) }

// checkSeen checks a checkpoint a read returned: it was written (or is
// being written), was not deleted before the read began (statusBefore), and
// has the acknowledged content.
func (s *soak) checkSeen(where string, cp *chain.Checkpoint, statusBefore int) {
	r, ok := s.rec(cp.ID)
	switch {
	case !ok:
		s.failf("%s returned checkpoint %q that nobody wrote", where, cp.ID)
	case r.status == soakFailed:
		s.failf("%s returned checkpoint %q whose write failed (phantom write)", where, cp.ID)
	case statusBefore == soakDeleted:
		s.failf("%s returned checkpoint %q, deleted (acknowledged) before the read began", where, cp.ID)
	case r.thread != cp.ThreadID:
		s.failf("%s returned checkpoint %q of thread %q, written to %q", where, cp.ID, cp.ThreadID, r.thread)
	case r.cp != nil && !soakSameCP(r.cp, cp):
		s.failf("%s returned checkpoint %q unlike the one written:\n%s", where, cp.ID, gocmp.Diff(r.cp.Clone(), cp.Clone()))
	}
}
