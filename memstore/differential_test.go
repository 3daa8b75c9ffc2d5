package memstore_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
	"github.com/sbxdb/sbxdb/internal/testkit/s3test"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/memstore"
)

// The differential test drives the in-memory reference store and the bbolt
// engine through the same seeded random operation sequences and fails on the
// first step where they disagree: a result, an error code, or any part of the
// observable state (every pool thread's head, list and transcript, every pool
// id's Get, the blob references, the pool instance records).
//
// TestDifferentialServed runs the same sequences with the engine behind
// sbxdb serve's handler, reached through the Go client over a unix socket:
// a served store must be indistinguishable from an embedded one.
// TestDifferentialShared runs them with the engine's metadata in
// PostgreSQL (a throw-away cluster, internal/testkit/pgtest).
//
// Sequence i uses seed i. Knobs (the environment variables also work under
// "go test ./...", where the flags would reach packages that lack them):
//
//	-diff.seqs N / SBXDB_DIFF_SEQS=N   number of sequences (default 600, 200 with -short, 2000 with SBXDB_LONG=1;
//	                                   served: 40, 10 with -short, 2000 with SBXDB_LONG=1;
//	                                   shared (PostgreSQL and S3): 20, 5 with -short, 30 with SBXDB_LONG=1)
//	-diff.seed S / SBXDB_DIFF_SEED=S   run only sequence S, e.g. to replay a failure
//	-diff.steps N / SBXDB_DIFF_STEPS=N steps per sequence (default 60)
//
// Run with -v to see how often each operation ended with each outcome.
var (
	diffSeqs  = flag.Int("diff.seqs", envInt("SBXDB_DIFF_SEQS", 0), "differential test: number of sequences (0: the test tier's, see internal/testkit)")
	diffSeed  = flag.Int64("diff.seed", int64(envInt("SBXDB_DIFF_SEED", -1)), "differential test: run only this sequence seed")
	diffSteps = flag.Int("diff.steps", envInt("SBXDB_DIFF_STEPS", 60), "differential test: steps per sequence")
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// Pools. They are small so that collisions happen often: a reused or
// duplicate checkpoint id, a blob key shared between checkpoints and threads,
// a fork destination that is already in use.
var (
	// poolThreads are the valid threads whose state is compared after every
	// step; badIDs are identifiers every method must reject.
	poolThreads = []string{"t1", "t2", "t3", "é", "f1", "f2"}
	badIDs      = []string{"", "nul\x00id", "\xed\xa0\x80", strings.Repeat("x", chain.MaxIDBytes+1)}
	poolIDs     = []string{"a", "b", "c", "d", "e", "B", "é"}
	poolPaths   = []string{"a.txt", "dir", "dir/x", "dir/y", "z"}
	poolFiles   = []string{testkit.FileKey(1), testkit.FileKey(2), testkit.FileKey(3)}
	poolArts    = []string{chain.ArtifactPrefix + strings.Repeat("1", 64), chain.ArtifactPrefix + strings.Repeat("2", 64)}
	poolInst    = []string{"", "k1", "k2"}
)

// Options of both stores: the conformance lease timing on a movable clock.
const (
	leaseMs = 100
	renewMs = 25
)

func TestDifferential(t *testing.T) { differential(t, false, testkit.ScaleShort(t, 200, 600, 2000)) }

func TestDifferentialServed(t *testing.T) { differential(t, true, testkit.ScaleShort(t, 10, 40, 2000)) }

// TestDifferentialShared runs the sequences with the engine's metadata in
// PostgreSQL (engine.Options.Metadata), a fresh database each, and its
// blobs in a fresh bucket of an S3 server (engine.Options.Blobs).
func TestDifferentialShared(t *testing.T) {
	differentialOn(t, false, true, testkit.ScaleShort(t, 5, 20, 30))
}

func TestMain(m *testing.M) { pgtest.Main(m) }

// differential runs seqs sequences (unless the knobs say otherwise), the
// engine served or not.
func differential(t *testing.T, served bool, seqs int) { differentialOn(t, served, false, seqs) }

// differentialOn is differential; shared puts the engine's metadata in a
// fresh PostgreSQL database per sequence.
func differentialOn(t *testing.T, served, shared bool, seqs int) {
	if *diffSeqs > 0 {
		seqs = *diffSeqs
	}
	seeds := make([]int64, 0, seqs)
	if *diffSeed >= 0 {
		seeds = append(seeds, *diffSeed)
	} else {
		for i := range seqs {
			seeds = append(seeds, int64(i))
		}
	}
	dir := t.TempDir()
	urls := map[int64]string{} // read-only once the workers start
	if shared {
		s3test.Env(t, s3test.Start(t))
		for _, seed := range seeds {
			urls[seed] = pgtest.URL(t)
		}
	}
	start := time.Now()

	var (
		next     atomic.Int64
		failed   atomic.Bool
		mu       sync.Mutex
		failures []string
		outcomes = map[string]int{}
		ran      atomic.Int64
		steps    atomic.Int64
		wg       sync.WaitGroup
	)
	for range max(2, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for !failed.Load() {
				i := next.Add(1) - 1
				if i >= int64(len(seeds)) {
					return
				}
				seed := seeds[i]
				r := &runner{seed: seed, dir: filepath.Join(dir, strconv.FormatInt(seed, 10)), served: served, metadata: urls[seed]}
				if shared {
					r.blobs = "s3://" + s3test.Bucket() + "/blobs"
				}
				msg := r.run(*diffSteps)
				ran.Add(1)
				steps.Add(int64(min(r.step, *diffSteps)))
				mu.Lock()
				for k, n := range r.outcomes {
					outcomes[k] += n
				}
				mu.Unlock()
				if msg != "" {
					failed.Store(true)
					mu.Lock()
					failures = append(failures, msg)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("%d of %d sequences, %d steps in %v", ran.Load(), len(seeds), steps.Load(), time.Since(start).Round(time.Millisecond))
	if testing.Verbose() {
		keys := slices.Sorted(maps.Keys(outcomes))
		for _, k := range keys {
			t.Logf("%8d %s", outcomes[k], k)
		}
	}
}

// clock is the movable clock both stores of one sequence share. A sequence
// runs on one goroutine, but the stores may read the clock from their own
// goroutines (the engine's group commit), so reads are atomic.
type clock struct{ ms int64 }

func (c *clock) Now() time.Time          { return time.UnixMilli(atomic.LoadInt64(&c.ms)) }
func (c *clock) Ms() int64               { return atomic.LoadInt64(&c.ms) }
func (c *clock) Advance(d time.Duration) { atomic.AddInt64(&c.ms, d.Milliseconds()) }

// leasePair is one acquisition made on both stores: each store issued its
// own owner token, so each store is given its own handle.
type leasePair struct {
	thread   string
	mem, db  *lease.Lease
	released bool // Release was called (it may have done nothing)
}

// runner runs one sequence.
type runner struct {
	seed int64
	dir  string
	// served puts the engine behind a server and reaches it through the
	// Go client (serveEngine).
	served bool
	// metadata, when set, is the PostgreSQL URL the engine keeps its
	// metadata at (engine.Options.Metadata).
	metadata string
	// blobs, with metadata, is the S3 URL of its blobs
	// (engine.Options.Blobs).
	blobs string
	// src, when set, replaces the PCG seeded with seed as the source of
	// every random choice (FuzzOperations drives it from fuzz bytes).
	src     rand.Source
	rnd     *rand.Rand
	clock   *clock
	mem     *memstore.Store
	db      sbxdb.Store // the engine, or the client of its server
	leases  []leasePair
	history []string
	step    int
	// outcomes counts operation results ("Append ok", "Append
	// SANDBOX_SNAPSHOT_STALE_HEAD", ...), to show what the sequences reach.
	outcomes map[string]int
}

// mismatch aborts the sequence with a message; run recovers it.
type mismatch string

func (r *runner) failf(format string, args ...any) {
	panic(mismatch(fmt.Sprintf(format, args...)))
}

// run executes n random steps and returns "" or a failure report naming the
// seed, the step and the whole operation history.
func (r *runner) run(n int) (report string) {
	src := r.src
	test := "TestDifferential"
	switch {
	case r.served:
		test = "TestDifferentialServed"
	case r.metadata != "":
		test = "TestDifferentialShared"
	}
	replay := fmt.Sprintf("go test ./memstore -run '%s$' -diff.seed %d", test, r.seed)
	if src == nil {
		src = rand.NewPCG(uint64(r.seed), 0x5eedbeef)
	} else {
		replay = "go test ./memstore -run FuzzOperations/<input>"
	}
	r.rnd = rand.New(src)
	r.outcomes = map[string]int{}
	r.clock = &clock{ms: 1000}
	opts := sbxdb.Options{Now: r.clock.Now, LeaseDuration: leaseMs * time.Millisecond, RenewAfter: renewMs * time.Millisecond}
	var err error
	if r.mem, err = memstore.New(opts); err != nil {
		return fmt.Sprintf("seed %d: memstore.New: %v", r.seed, err)
	}
	dbOpts := engine.Options{Now: opts.Now, LeaseDuration: opts.LeaseDuration, RenewAfter: opts.RenewAfter, NoSync: true}
	// Fold reference counts after 1 to 4 pending checkpoints, so that
	// sequences of a few dozen appends exercise folding (the default is 64).
	dbOpts.RefFoldAfter = 1 + int(uint64(r.seed)%4)
	dbOpts.Metadata, dbOpts.Blobs = r.metadata, r.blobs
	db, err := engine.Open(r.dir, &dbOpts)
	if err != nil {
		return fmt.Sprintf("seed %d: engine.Open: %v", r.seed, err)
	}
	r.db = db
	stop := func() {}
	if r.served {
		if r.db, stop, err = serveEngine(db); err != nil {
			db.Close()
			return fmt.Sprintf("seed %d: serving the engine: %v", r.seed, err)
		}
	}
	defer func() {
		stop()
		db.Close()
		os.RemoveAll(r.dir)
		if v := recover(); v != nil {
			m, ok := v.(mismatch)
			if !ok {
				m = mismatch(fmt.Sprintf("panic: %v\n%s", v, debug.Stack()))
			}
			report = fmt.Sprintf("differential mismatch, seed %d (replay: %s) at step %d: %s\nhistory:\n  %s",
				r.seed, replay, r.step, m, strings.Join(r.history, "\n  "))
		}
	}()
	for r.step = 1; r.step <= n; r.step++ {
		r.randomOp()
		r.compareState()
	}
	return ""
}

// logf records a step of the history. Very long string arguments (the
// over-long identifier) are abbreviated to keep the history readable.
func (r *runner) logf(format string, args ...any) {
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > 200 {
			args[i] = s[:24] + fmt.Sprintf("…(%d bytes)", len(s))
		}
	}
	r.history = append(r.history, fmt.Sprintf("%3d ", r.step)+fmt.Sprintf(format, args...))
}

// pick returns a random element of xs.
func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// chance is true with probability p percent.
func (r *runner) chance(p int) bool { return r.rnd.IntN(100) < p }

// thread returns a pool thread, or rarely an invalid id.
func (r *runner) thread() string {
	if r.chance(5) {
		return pick(r.rnd, badIDs)
	}
	return pick(r.rnd, poolThreads)
}

// hotThread returns "t1" half the time, else thread(): appends concentrate
// on one thread so that its chain grows long enough for retention to bite.
func (r *runner) hotThread() string {
	if r.chance(50) {
		return poolThreads[0]
	}
	return r.thread()
}

// cpID returns a pool checkpoint id, or rarely an invalid one.
func (r *runner) cpID() string {
	if r.chance(4) {
		return pick(r.rnd, badIDs)
	}
	return pick(r.rnd, poolIDs)
}

// prepareWriter usually makes sure the thread has a lease that the runner
// believes live (newest on the thread, not released, unexpired), acquiring
// one (a compared step of its own) when it has not; otherwise writes would
// mostly fail with WRITER_LOST.
func (r *runner) prepareWriter(ctx context.Context, thread string) {
	if !r.chance(60) {
		return
	}
	for i := len(r.leases) - 1; i >= 0; i-- {
		if p := r.leases[i]; p.thread == thread {
			if !p.released && p.mem.ExpiresAt().UnixMilli() > r.clock.Ms() {
				return
			}
			break
		}
	}
	r.acquireOn(ctx, thread)
}

// writerFor picks the writer of a write on thread. It returns the writer
// each store is given and a description for the history. Mostly it is the
// newest lease taken on the thread (which may have expired or been
// released); sometimes any lease, a lease retargeted at another thread, or a
// fabricated writer.
func (r *runner) writerFor(thread string) (mw, dw lease.Writer, desc string) {
	newest := -1
	for i, p := range r.leases {
		if p.thread == thread {
			newest = i
		}
	}
	switch x := r.rnd.IntN(100); {
	case x < 80 && newest >= 0:
		p := r.leases[newest]
		return p.mem.Writer, p.db.Writer, fmt.Sprintf("lease#%d(%s,fence %d)", newest, p.thread, p.mem.Fence)
	case x < 90 && len(r.leases) > 0:
		i := r.rnd.IntN(len(r.leases))
		p := r.leases[i]
		mw, dw = p.mem.Writer, p.db.Writer
		desc = fmt.Sprintf("lease#%d(%s,fence %d)", i, p.thread, p.mem.Fence)
		if r.chance(30) {
			other := r.thread()
			mw.ThreadID, dw.ThreadID = other, other
			desc += fmt.Sprintf(" retargeted to %q", other)
		}
		return mw, dw, desc
	default:
		w := lease.Writer{ThreadID: thread, OwnerToken: "fabricated", Fence: uint64(r.rnd.IntN(3))}
		if r.chance(20) {
			w.ThreadID = r.thread()
		}
		return w, w, fmt.Sprintf("fabricated%+v", w)
	}
}

// randomOp performs one random operation on both stores and compares the
// results.
func (r *runner) randomOp() {
	ctx := context.Background()
	switch x := r.rnd.IntN(100); {
	case x < 12:
		r.acquire(ctx)
	case x < 17:
		r.renew(ctx)
	case x < 21:
		r.release(ctx)
	case x < 45:
		r.appendOp(ctx)
	case x < 53:
		r.deleteHead(ctx)
	case x < 60:
		r.deleteCheckpoints(ctx)
	case x < 68:
		r.fork(ctx)
	case x < 73:
		r.saveThread(ctx)
	case x < 80:
		r.reads(ctx)
	case x < 88:
		r.instances(ctx)
	default:
		r.clockJump()
	}
}

func (r *runner) acquire(ctx context.Context) { r.acquireOn(ctx, r.thread()) }

func (r *runner) acquireOn(ctx context.Context, thread string) {
	r.logf("acquire %q", thread)
	ml, merr := r.mem.AcquireWriter(ctx, thread)
	dl, derr := r.db.AcquireWriter(ctx, thread)
	r.sameErr("AcquireWriter", merr, derr)
	if merr != nil {
		return
	}
	if ml.ThreadID != dl.ThreadID || ml.Fence != dl.Fence || !ml.ExpiresAt().Equal(dl.ExpiresAt()) || ml.RenewAfter != dl.RenewAfter {
		r.failf("AcquireWriter: memstore lease {%q fence %d expires %d renewAfter %v}, engine {%q fence %d expires %d renewAfter %v}",
			ml.ThreadID, ml.Fence, ml.ExpiresAt().UnixMilli(), ml.RenewAfter, dl.ThreadID, dl.Fence, dl.ExpiresAt().UnixMilli(), dl.RenewAfter)
	}
	if ml.OwnerToken == "" || dl.OwnerToken == "" {
		r.failf("AcquireWriter: empty owner token (memstore %q, engine %q)", ml.OwnerToken, dl.OwnerToken)
	}
	r.leases = append(r.leases, leasePair{thread: thread, mem: ml, db: dl})
	r.logf("  -> lease#%d fence %d expires %d", len(r.leases)-1, ml.Fence, ml.ExpiresAt().UnixMilli())
}

func (r *runner) renew(ctx context.Context) {
	if len(r.leases) == 0 {
		return
	}
	i := r.rnd.IntN(len(r.leases))
	p := r.leases[i]
	r.logf("renew lease#%d", i)
	mt, merr := p.mem.Renew(ctx)
	dt, derr := p.db.Renew(ctx)
	r.sameErr("Renew", merr, derr)
	if !mt.Equal(dt) || !p.mem.ExpiresAt().Equal(p.db.ExpiresAt()) {
		r.failf("Renew: memstore %d (lease %d), engine %d (lease %d)", mt.UnixMilli(), p.mem.ExpiresAt().UnixMilli(),
			dt.UnixMilli(), p.db.ExpiresAt().UnixMilli())
	}
}

func (r *runner) release(ctx context.Context) {
	if len(r.leases) == 0 {
		return
	}
	i := r.rnd.IntN(len(r.leases))
	p := r.leases[i]
	r.logf("release lease#%d", i)
	r.leases[i].released = true
	r.sameErr("Release", p.mem.Release(ctx), p.db.Release(ctx))
}

func (r *runner) clockJump() {
	var d int64
	switch x := r.rnd.IntN(100); {
	case x < 60:
		d = 1 + r.rnd.Int64N(30)
	case x < 75:
		d = leaseMs // exactly to an expiry boundary of a lease taken now
	default:
		d = leaseMs + 1 + r.rnd.Int64N(50)
	}
	r.clock.Advance(time.Duration(d) * time.Millisecond)
	r.logf("clock +%dms -> %d", d, r.clock.Ms())
}

// randomCheckpoint builds an append candidate for thread: mostly valid,
// sometimes with one defect of each kind the contract checks.
func (r *runner) randomCheckpoint(thread, id, parent string) (*chain.Checkpoint, string) {
	cp := &chain.Checkpoint{
		ID: id, ThreadID: thread, ParentID: parent,
		CreatedAt: r.rnd.Int64N(4),
		Reason:    pick(r.rnd, []chain.Reason{chain.ReasonAutomatic, chain.ReasonNamed, chain.ReasonForkRoot}),
	}
	if r.chance(30) {
		cp.Label = "label-" + id
	}
	if r.chance(30) {
		cp.SourceRunID = "run-" + strconv.Itoa(r.rnd.IntN(3))
	}
	// Files: distinct paths, nothing beneath a file or symlink (a directory
	// may have entries beneath it).
	used := map[string]chain.Kind{}
	for range r.rnd.IntN(4) {
		p := pick(r.rnd, poolPaths)
		kind := chain.KindFile
		switch x := r.rnd.IntN(100); {
		case x < 20:
			kind = chain.KindDir
		case x < 30:
			kind = chain.KindSymlink
		}
		_, dup := used[p]
		parentKind, hasParent := used["dir"]
		_, hasX := used["dir/x"]
		_, hasY := used["dir/y"]
		if dup || (p == "dir" && kind != chain.KindDir && (hasX || hasY)) ||
			(strings.HasPrefix(p, "dir/") && hasParent && parentKind != chain.KindDir) {
			continue
		}
		used[p] = kind
		switch kind {
		case chain.KindDir:
			cp.Files = append(cp.Files, chain.Entry{Path: p, Kind: kind})
		case chain.KindSymlink:
			cp.Files = append(cp.Files, chain.Entry{Path: p, Kind: kind, Target: "../" + p})
		default:
			cp.Files = append(cp.Files, chain.Entry{Path: p, Kind: kind, BlobKey: pick(r.rnd, poolFiles), Size: r.rnd.Int64N(100), Executable: r.chance(10)})
		}
	}
	for i := range r.rnd.IntN(3) {
		cp.Artifacts = append(cp.Artifacts, chain.Artifact{
			ArtifactID: "art" + strconv.Itoa(i), Name: "out.bin", MimeType: "application/octet-stream",
			BlobKey: pick(r.rnd, poolArts), Size: r.rnd.Int64N(10), CreatedAt: r.rnd.Int64N(5),
		})
	}
	for range r.rnd.IntN(3) {
		cp.Conversation = append(cp.Conversation, json.RawMessage(fmt.Sprintf(`{"role":"user","content":"m%d"}`, r.rnd.IntN(9))))
	}
	if !r.chance(15) {
		return cp, "valid"
	}
	switch r.rnd.IntN(10) {
	case 0:
		cp.CreatedAt = chain.MaxSafeInteger + 1
		return cp, "createdAt out of range"
	case 1:
		cp.Reason = "manual"
		return cp, "bad reason"
	case 2:
		cp.Files = append(cp.Files, chain.Entry{Path: "../up", Kind: chain.KindFile, BlobKey: poolFiles[0]})
		return cp, "bad path"
	case 3:
		cp.Files = append(cp.Files, chain.Entry{Path: "k", Kind: chain.KindFile, BlobKey: chain.FilePrefix + "not-hex"})
		return cp, "bad blob key"
	case 4:
		cp.Files = append(cp.Files, chain.Entry{Path: "q", Kind: chain.KindFile, BlobKey: poolFiles[0]},
			chain.Entry{Path: "q", Kind: chain.KindDir})
		return cp, "duplicate path"
	case 5:
		cp.Files = append(cp.Files, chain.Entry{Path: "f", Kind: chain.KindFile, BlobKey: poolFiles[1]},
			chain.Entry{Path: "f/under", Kind: chain.KindDir})
		return cp, "entry beneath a file"
	case 6:
		cp.Artifacts = append(cp.Artifacts, chain.Artifact{ArtifactID: "", Name: "n", MimeType: "m", BlobKey: poolArts[0]})
		return cp, "bad artifact"
	case 7:
		cp.Conversation = append(cp.Conversation, json.RawMessage(`{"role":`))
		return cp, "bad message"
	case 8:
		cp.Files = append(cp.Files, chain.Entry{Path: "link", Kind: chain.KindSymlink})
		return cp, "symlink without target"
	default:
		cp.Files = append(cp.Files, chain.Entry{Path: "neg", Kind: chain.KindFile, BlobKey: poolFiles[2], Size: -1})
		return cp, "negative size"
	}
}

func (r *runner) appendOp(ctx context.Context) {
	thread := r.hotThread()
	head := r.memHead(thread)
	expected := head
	switch x := r.rnd.IntN(100); {
	case x < 10:
		expected = pick(r.rnd, poolIDs) // usually stale
	case x < 14:
		expected = ""
	case x < 16:
		expected = pick(r.rnd, badIDs[1:]) // "" is null, not invalid
	}
	parent := expected
	switch x := r.rnd.IntN(100); {
	case x < 8:
		parent = pick(r.rnd, poolIDs)
	case x < 11:
		parent = ""
	case x < 13:
		parent = pick(r.rnd, badIDs[1:])
	}
	id := r.cpID()
	cpThread := thread
	if r.chance(3) {
		cpThread = r.thread()
	}
	cp, kind := r.randomCheckpoint(cpThread, id, parent)
	r.prepareWriter(ctx, thread)
	mw, dw, wdesc := r.writerFor(thread)
	r.logf("append id=%q thread=%q parent=%q expected=%q writer=%s createdAt=%d files=%d artifacts=%d (%s)",
		id, cpThread, parent, expected, wdesc, cp.CreatedAt, len(cp.Files), len(cp.Artifacts), kind)
	// Each store gets its own copy: neither may see the other's input.
	mh, merr := r.mem.Append(ctx, chain.AppendInput{Checkpoint: cp.Clone(), ExpectedHeadID: expected, Writer: mw})
	dh, derr := r.db.Append(ctx, chain.AppendInput{Checkpoint: cp.Clone(), ExpectedHeadID: expected, Writer: dw})
	r.sameErr("Append", merr, derr)
	if mh != dh {
		r.failf("Append: memstore head %q, engine %q", mh, dh)
	}
	r.logf("  -> %s", outcome(merr))
}

func (r *runner) deleteHead(ctx context.Context) {
	thread := r.thread()
	id := r.memHead(thread)
	if id == "" || r.chance(25) {
		id = r.cpID()
	}
	r.prepareWriter(ctx, thread)
	mw, dw, wdesc := r.writerFor(thread)
	r.logf("deleteHead thread=%q id=%q writer=%s", thread, id, wdesc)
	merr := r.mem.DeleteHead(ctx, thread, id, mw)
	derr := r.db.DeleteHead(ctx, thread, id, dw)
	r.sameErr("DeleteHead", merr, derr)
	r.logf("  -> %s", outcome(merr))
}

func (r *runner) deleteCheckpoints(ctx context.Context) {
	thread := r.hotThread()
	keep := r.rnd.IntN(6) - 1 // -1..4
	if r.chance(2) {
		keep = chain.MaxSafeInteger + 1
	}
	r.prepareWriter(ctx, thread)
	mw, dw, wdesc := r.writerFor(thread)
	r.logf("deleteCheckpoints thread=%q keep=%d writer=%s", thread, keep, wdesc)
	md, merr := r.mem.DeleteCheckpoints(ctx, thread, keep, mw)
	dd, derr := r.db.DeleteCheckpoints(ctx, thread, keep, dw)
	r.sameErr("DeleteCheckpoints", merr, derr)
	if !reflect.DeepEqual(emptyIfNil(md), emptyIfNil(dd)) {
		r.failf("DeleteCheckpoints: memstore deleted %q, engine %q", md, dd)
	}
	r.logf("  -> %s deleted %q", outcome(merr), md)
	if len(md) > 0 {
		r.outcomes["DeleteCheckpoints deleted some"]++
	}
}

func (r *runner) fork(ctx context.Context) {
	// Usually fork a real checkpoint into a thread that looks empty.
	var sources, empty []string
	for _, th := range poolThreads {
		cps, _ := r.mem.List(ctx, th)
		if len(cps) > 0 {
			sources = append(sources, th)
		} else if h := r.memHead(th); h == "" {
			empty = append(empty, th)
		}
	}
	in := chain.ForkInput{
		SourceThreadID:          r.thread(),
		SourceCheckpointID:      r.cpID(),
		DestinationThreadID:     r.thread(),
		DestinationCheckpointID: r.cpID(),
		CreatedAt:               r.rnd.Int64N(4),
	}
	if len(sources) > 0 && r.chance(80) {
		in.SourceThreadID = pick(r.rnd, sources)
		if cps, _ := r.mem.List(ctx, in.SourceThreadID); r.chance(90) {
			in.SourceCheckpointID = pick(r.rnd, cps).ID
		}
	}
	if len(empty) > 0 && r.chance(80) {
		in.DestinationThreadID = pick(r.rnd, empty)
	}
	if r.chance(5) {
		in.CreatedAt = -chain.MaxSafeInteger - 1
	}
	r.prepareWriter(ctx, in.DestinationThreadID)
	mIn, dIn := in, in
	var wdesc string
	mIn.Writer, dIn.Writer, wdesc = r.writerFor(in.DestinationThreadID)
	r.logf("fork %q/%q -> %q/%q createdAt=%d writer=%s", in.SourceThreadID, in.SourceCheckpointID,
		in.DestinationThreadID, in.DestinationCheckpointID, in.CreatedAt, wdesc)
	mc, merr := r.mem.Fork(ctx, mIn)
	dc, derr := r.db.Fork(ctx, dIn)
	r.sameErr("Fork", merr, derr)
	if !reflect.DeepEqual(normCP(mc), normCP(dc)) {
		r.failf("Fork: memstore returned %s, engine %s", show(mc), show(dc))
	}
	r.logf("  -> %s", outcome(merr))
}

func (r *runner) saveThread(ctx context.Context) {
	thread := r.thread()
	var msgs []json.RawMessage
	for range r.rnd.IntN(3) {
		msgs = append(msgs, json.RawMessage(fmt.Sprintf(` {"n": %d} `, r.rnd.IntN(9))))
	}
	if r.chance(10) {
		msgs = append(msgs, json.RawMessage(`nope`))
	}
	r.logf("saveThread %q %d messages", thread, len(msgs))
	merr := r.mem.SaveThread(ctx, thread, chain.CloneMessages(msgs))
	derr := r.db.SaveThread(ctx, thread, chain.CloneMessages(msgs))
	r.sameErr("SaveThread", merr, derr)
	r.logf("  -> %s", outcome(merr))
}

// reads exercises the read methods with arguments the state comparison does
// not use: invalid identifiers and unknown ids.
func (r *runner) reads(ctx context.Context) {
	id, thread := r.cpID(), pick(r.rnd, badIDs)
	if r.chance(50) {
		thread = "unknown-thread"
	}
	r.logf("reads id=%q thread=%q", id, thread)
	r.compareGet(ctx, "", id)
	r.compareThread(ctx, "", thread)
	_, merr := r.mem.AcquireWriter(ctx, pick(r.rnd, badIDs))
	_, derr := r.db.AcquireWriter(ctx, pick(r.rnd, badIDs))
	if chain.Code(merr) != chain.CodeInvalidID || chain.Code(derr) != chain.CodeInvalidID {
		r.failf("AcquireWriter(invalid id): memstore %v, engine %v", merr, derr)
	}
}

func (r *runner) instances(ctx context.Context) {
	key := pick(r.rnd, poolInst)
	switch r.rnd.IntN(3) {
	case 0, 1:
		rec := sbxdb.InstanceRecord{
			Key: key, Provider: "fake", ProviderSandboxID: "sb-" + strconv.Itoa(r.rnd.IntN(3)),
			ThreadID: pick(r.rnd, poolThreads), UpdatedAt: r.clock.Ms(),
		}
		if r.chance(50) {
			rec.LatestSnapshotID = "snap-" + strconv.Itoa(r.rnd.IntN(3))
		}
		if r.chance(50) {
			rec.LatestRunID = "run-" + strconv.Itoa(r.rnd.IntN(3))
		}
		r.logf("instances.Upsert %+v", rec)
		r.sameErr("Instances.Upsert", r.mem.Instances().Upsert(ctx, rec), r.db.Instances().Upsert(ctx, rec))
	default:
		r.logf("instances.Delete %q", key)
		r.sameErr("Instances.Delete", r.mem.Instances().Delete(ctx, key), r.db.Instances().Delete(ctx, key))
	}
}

// memHead reads a head from the memstore (the stores agree on it, or the
// previous step would have failed).
func (r *runner) memHead(thread string) string {
	h, _ := r.mem.Head(context.Background(), thread)
	return h
}

// sameErr fails unless both errors are nil or both carry the same contract
// code. An error without a contract code fails too: no operation here should
// produce one.
func (r *runner) sameErr(op string, merr, derr error) {
	if (merr == nil) != (derr == nil) || chain.Code(merr) != chain.Code(derr) ||
		(merr != nil && chain.Code(merr) == "") {
		r.failf("%s: memstore error %v, engine error %v", op, orNil(merr), orNil(derr))
	}
	if !strings.HasPrefix(op, "state ") {
		r.outcomes[op+" "+outcome(merr)]++
	}
}

// compareState compares everything observable through the public API.
func (r *runner) compareState() {
	ctx := context.Background()
	for _, th := range poolThreads {
		r.compareThread(ctx, "state ", th)
	}
	for _, id := range poolIDs {
		r.compareGet(ctx, "state ", id)
	}
	mr, merr := r.mem.BlobReferences(ctx)
	dr, derr := r.db.BlobReferences(ctx)
	r.sameErr("state BlobReferences", merr, derr)
	if !reflect.DeepEqual(emptyIfNil(mr), emptyIfNil(dr)) {
		r.failf("state: BlobReferences memstore %v, engine %v", mr, dr)
	}
	for _, k := range poolInst {
		mi, merr := r.mem.Instances().Get(ctx, k)
		di, derr := r.db.Instances().Get(ctx, k)
		r.sameErr("state Instances.Get", merr, derr)
		if !reflect.DeepEqual(mi, di) {
			r.failf("state: Instances.Get(%q) memstore %+v, engine %+v", k, mi, di)
		}
	}
}

// compareThread compares a thread's head, list and transcript in both
// stores; prefix names the caller in failure messages and outcome counts.
func (r *runner) compareThread(ctx context.Context, prefix, th string) {
	mh, merr := r.mem.Head(ctx, th)
	dh, derr := r.db.Head(ctx, th)
	r.sameErr(prefix+"Head", merr, derr)
	if mh != dh {
		r.failf("%sHead(%q): memstore %q, engine %q", prefix, th, mh, dh)
	}
	ml, merr := r.mem.List(ctx, th)
	dl, derr := r.db.List(ctx, th)
	r.sameErr(prefix+"List", merr, derr)
	if !reflect.DeepEqual(normCPs(ml), normCPs(dl)) {
		r.failf("%sList(%q)\n memstore %s\n engine   %s", prefix, th, showAll(ml), showAll(dl))
	}
	mm, merr := r.mem.LoadThread(ctx, th)
	dm, derr := r.db.LoadThread(ctx, th)
	r.sameErr(prefix+"LoadThread", merr, derr)
	if !reflect.DeepEqual(emptyIfNil(mm), emptyIfNil(dm)) {
		r.failf("%sLoadThread(%q): memstore %q, engine %q", prefix, th, mm, dm)
	}
}

// compareGet compares Get(id) in both stores.
func (r *runner) compareGet(ctx context.Context, prefix, id string) {
	mc, merr := r.mem.Get(ctx, id)
	dc, derr := r.db.Get(ctx, id)
	r.sameErr(prefix+"Get", merr, derr)
	if !reflect.DeepEqual(normCP(mc), normCP(dc)) {
		r.failf("%sGet(%q): memstore %s, engine %s", prefix, id, show(mc), show(dc))
	}
}

// normCP makes nil and empty lists compare equal; the contract does not
// distinguish them.
func normCP(cp *chain.Checkpoint) *chain.Checkpoint {
	if cp == nil {
		return nil
	}
	c := *cp
	c.Files, c.Artifacts, c.Conversation = emptyIfNil(c.Files), emptyIfNil(c.Artifacts), emptyIfNil(c.Conversation)
	return &c
}

func normCPs(cps []*chain.Checkpoint) []*chain.Checkpoint {
	out := make([]*chain.Checkpoint, len(cps))
	for i, cp := range cps {
		out[i] = normCP(cp)
	}
	return out
}

func emptyIfNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

func show(cp *chain.Checkpoint) string {
	if cp == nil {
		return "nil"
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return fmt.Sprintf("%+v", *cp)
	}
	return string(b)
}

func showAll(cps []*chain.Checkpoint) string {
	parts := make([]string, len(cps))
	for i, cp := range cps {
		parts[i] = show(cp)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return chain.Code(err)
}

func orNil(err error) any {
	if err == nil {
		return "<nil>"
	}
	return err
}
