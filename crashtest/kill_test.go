package crashtest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
)

// The child's environment.
const (
	envChild  = "SBXDB_CRASH_CHILD" // store directory; set only in the child
	envWS     = "SBXDB_CRASH_WS"    // workspaces' root
	envSeed   = "SBXDB_CRASH_CHILD_SEED"
	envOffset = "SBXDB_CRASH_CLOCK" // ms added to the child's clock
	envRole   = "SBXDB_CRASH_ROLE"  // "" (one process holding the store), roleOpener or roleMaint
)

// The roles of a shared cycle, whose two children take turns at the store:
// one opens it for each capture or append of its thread and closes it
// after; the other compacts it and collects garbage, each time in an open
// of its own. They wait for each other on the store lock.
const (
	roleOpener = "opener"
	roleMaint  = "maint"
	// openerThread is the opener's thread; the main child's are w0, w1, …
	openerThread = "p"
)

const (
	workers = 3
	// Each child runs on a clock cycleStep ahead of the last one, so the
	// leases a killed child held (leaseTTL) have expired for the next: a
	// lease must never outlive its expiry, and no child waits for one.
	leaseTTL  = 10 * time.Second
	cycleStep = 20 * time.Second
)

// How many kill cycles SBXDB_LONG=1 and SBXDB_LONG=2 run (defaultCycles
// without; SBXDB_CRASH_CYCLES overrides them all). A cycle's check grows
// with the threads the cycles before it forked (each is listed and
// leased again), so the total grows as the square of the count:
// exhaustiveCycles take about seven times as long as longCycles, past
// CI's budget.
const (
	longCycles       = 300
	exhaustiveCycles = 1000
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envChild); dir != "" {
		os.Exit(child(dir))
	}
	if dir := os.Getenv(envAppender); dir != "" {
		os.Exit(appender(dir))
	}
	if dir := os.Getenv(envCompactLimited); dir != "" {
		os.Exit(compactLimited(dir))
	}
	os.Exit(m.Run())
}

// report is one line the child sends: an operation begun, acknowledged or
// failed, or the child ready.
type report struct {
	Phase  string   `json:"phase"` // "ready", "begin", "ack", "fail"
	Worker int      `json:"w"`
	Seq    int      `json:"seq"`
	Op     string   `json:"op,omitempty"`
	Thread string   `json:"thread,omitempty"`
	Before []string `json:"before,omitempty"` // the thread's checkpoints before the op
	After  []string `json:"after,omitempty"`  // and after it
	Head   string   `json:"head,omitempty"`   // the thread's head after it ("": none)
	ID     string   `json:"id,omitempty"`     // a new checkpoint
	Tree   string   `json:"tree,omitempty"`   // digest of the new checkpoint's tree
	Src    string   `json:"src,omitempty"`    // a checkpoint whose tree the new one has
	Err    string   `json:"err,omitempty"`
}

// ---- the child ----

func child(dir string) int {
	offset, _ := strconv.ParseInt(os.Getenv(envOffset), 10, 64)
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	now := func() time.Time { return time.Now().Add(time.Duration(offset) * time.Millisecond) }
	out := os.NewFile(3, "report")
	var mu sync.Mutex
	send := func(r report) {
		b, _ := json.Marshal(r)
		mu.Lock()
		out.Write(append(b, '\n')) // one write: a pipe keeps it whole
		mu.Unlock()
	}
	switch os.Getenv(envRole) {
	case roleOpener:
		return sharedChild(func() error { return opener(dir, rand.New(rand.NewPCG(seed, workers+1)), now, send) })
	case roleMaint:
		return sharedChild(func() error { return maintainer(dir, rand.New(rand.NewPCG(seed, workers+2)), now, send) })
	}
	db, err := engine.Open(dir, &engine.Options{Now: now, LeaseDuration: leaseTTL, RenewAfter: leaseTTL / 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		return 2
	}
	ctx := context.Background()
	fatal := make(chan string, workers+1)
	for w := range workers {
		go func() {
			if err := work(ctx, db, w, rand.New(rand.NewPCG(seed, uint64(w))), os.Getenv(envWS), now, send); err != nil {
				fatal <- fmt.Sprintf("worker %d: %v", w, err)
			}
		}()
	}
	go func() {
		r := rand.New(rand.NewPCG(seed, workers))
		for seq := 0; ; seq++ {
			time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
			op := []string{"sweep", "repack", "gc"}[r.IntN(3)]
			send(report{Phase: "begin", Worker: workers, Seq: seq, Op: op})
			var err error
			switch op {
			case "sweep":
				_, err = db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true})
			case "repack":
				_, err = db.Repack(ctx, cas.RepackOptions{Threshold: 0.01})
			case "gc":
				_, err = db.GC(ctx, sbxdb.GCOptions{Immediate: true, RepackThreshold: 0.2})
			}
			if err != nil {
				fatal <- fmt.Sprintf("%s: %v", op, err)
				return
			}
			send(report{Phase: "ack", Worker: workers, Seq: seq})
		}
	}()
	send(report{Phase: "ready"})
	select {
	case msg := <-fatal:
		fmt.Fprintln(os.Stderr, "child:", msg)
		return 3
	case <-time.After(leaseTTL / 2): // never killed: stop before the leases could lapse
		return 0
	}
}

// sharedChild runs a shared cycle's role until it fails or, if never
// killed, stops before the leases it took could lapse.
func sharedChild(loop func() error) int {
	done := make(chan error, 1)
	go func() { done <- loop() }()
	select {
	case err := <-done:
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	case <-time.After(leaseTTL / 2):
		return 0
	}
}

// sharedOpts are the options of a shared cycle's opens: each waits for the
// other process as long as it may hold the store.
func sharedOpts(now func() time.Time) *engine.Options {
	return &engine.Options{Now: now, LeaseDuration: leaseTTL, RenewAfter: leaseTTL / 2, LockTimeout: raceOpenTimeout}
}

// opener captures or appends to openerThread, opening the store for each
// operation and closing it after.
func opener(dir string, r *rand.Rand, now func() time.Time, send func(report)) error {
	ctx := context.Background()
	ws := filepath.Join(os.Getenv(envWS), openerThread)
	w := workers + 1
	for seq := 0; ; seq++ {
		err := func() error {
			db, err := engine.Open(dir, sharedOpts(now))
			if err != nil {
				return err
			}
			defer db.Close()
			if seq == 0 {
				send(report{Phase: "ready"})
			}
			l, err := db.AcquireWriter(ctx, openerThread)
			if err != nil {
				return fmt.Errorf("acquire (a dead child's lease must have expired): %w", err)
			}
			defer l.Release(ctx)
			list, err := db.List(ctx, openerThread)
			if err != nil {
				return err
			}
			ids := make([]string, len(list))
			for i, cp := range list {
				ids[i] = cp.ID
			}
			head, err := db.Head(ctx, openerThread)
			if err != nil {
				return err
			}
			rep := report{Phase: "begin", Worker: w, Seq: seq, Thread: openerThread, Before: ids}
			switch {
			case len(ids) > 8:
				return retainOp(ctx, db, l.Writer, head, rep, send)
			case head == "" || r.IntN(2) == 0:
				return captureOp(ctx, db, l.Writer, ws, r, rep, send)
			}
			return appendOp(ctx, db, l.Writer, head, now, rep, send)
		}()
		if err != nil {
			return err
		}
		time.Sleep(time.Duration(r.IntN(5)) * time.Millisecond)
	}
}

// maintainer compacts the store or collects its garbage, in turn with the
// opener.
func maintainer(dir string, r *rand.Rand, now func() time.Time, send func(report)) error {
	ctx := context.Background()
	w := workers + 2
	for seq := 0; ; seq++ {
		if seq == 0 {
			send(report{Phase: "ready"})
		}
		rep := report{Phase: "begin", Worker: w, Seq: seq, Op: []string{"compact", "gc"}[r.IntN(2)]}
		send(rep)
		var err error
		if rep.Op == "compact" {
			_, _, err = engine.Compact(ctx, dir, sharedOpts(now))
		} else {
			var db *engine.DB
			if db, err = engine.Open(dir, sharedOpts(now)); err == nil {
				_, err = db.GC(ctx, sbxdb.GCOptions{Immediate: true, RepackThreshold: 0.2})
				if cerr := db.Close(); err == nil {
					err = cerr
				}
			}
		}
		if err := finish(send, rep, err); err != nil {
			return err
		}
		time.Sleep(time.Duration(r.IntN(10)) * time.Millisecond)
	}
}

// work loops over one worker's operations on its thread: captures of its
// changing workspace, appends, deletes, retention and forks.
func work(ctx context.Context, db *engine.DB, w int, r *rand.Rand, wsRoot string, now func() time.Time, send func(report)) error {
	thread := fmt.Sprintf("w%d", w)
	l, err := db.AcquireWriter(ctx, thread)
	if err != nil {
		return fmt.Errorf("acquire (a dead child's lease must have expired): %w", err)
	}
	ws := filepath.Join(wsRoot, thread)
	for seq := 0; ; seq++ {
		list, err := db.List(ctx, thread)
		if err != nil {
			return err
		}
		ids := make([]string, len(list))
		for i, cp := range list {
			ids[i] = cp.ID
		}
		head, err := db.Head(ctx, thread)
		if err != nil {
			return err
		}
		rep := report{Phase: "begin", Worker: w, Seq: seq, Thread: thread, Before: ids}
		n := r.IntN(10)
		switch {
		case head == "":
			n = 0 // only a capture starts a thread
		case len(ids) > 8:
			n = 7 // keep reports short: a pipe keeps writes whole up to 4 KiB
		}
		switch {
		case n < 4: // capture
			if err := captureOp(ctx, db, l.Writer, ws, r, rep, send); err != nil {
				return err
			}
		case n < 6: // append a checkpoint with the head's files
			if err := appendOp(ctx, db, l.Writer, head, now, rep, send); err != nil {
				return err
			}
		case n < 7: // delete the head; its parent, if still stored, becomes the head
			cp, err := db.Get(ctx, head)
			if err != nil {
				return err
			}
			rep.Op = "deleteHead"
			rep.After = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == head })
			if slices.Contains(rep.After, cp.ParentID) {
				rep.Head = cp.ParentID
			}
			send(rep)
			if err := finish(send, rep, db.DeleteHead(ctx, thread, head, l.Writer)); err != nil {
				return err
			}
		case n < 9: // keep the newest two
			if err := retainOp(ctx, db, l.Writer, head, rep, send); err != nil {
				return err
			}
		default: // fork the head to a new thread
			dst := fmt.Sprintf("w%d-fork-%s", w, lease.NewToken()[:8])
			dl, err := db.AcquireWriter(ctx, dst)
			if err != nil {
				return err
			}
			rep.Op, rep.Thread, rep.Before, rep.ID, rep.Src = "fork", dst, nil, lease.NewToken(), head
			rep.After, rep.Head = []string{rep.ID}, rep.ID
			send(rep)
			_, err = db.Fork(ctx, chain.ForkInput{SourceThreadID: thread, SourceCheckpointID: head,
				DestinationThreadID: dst, DestinationCheckpointID: rep.ID, Writer: dl.Writer})
			if err := finish(send, rep, err); err != nil {
				return err
			}
			if err := dl.Release(ctx); err != nil {
				return err
			}
		}
	}
}

// captureOp edits the workspace ws and captures it as the thread's new
// head, reporting the operation rep began.
func captureOp(ctx context.Context, db *engine.DB, w lease.Writer, ws string, r *rand.Rand, rep report, send func(report)) error {
	if err := editTree(ws, r); err != nil {
		return err
	}
	tree, err := fstree.Read(ws)
	if err != nil {
		return err
	}
	rep.Op, rep.ID, rep.Tree = "capture", lease.NewToken(), digest(tree)
	rep.After, rep.Head = append(slices.Clone(rep.Before), rep.ID), rep.ID
	send(rep)
	_, err = db.Capture(ctx, sbxdb.CaptureInput{Writer: w, Dir: ws, ID: rep.ID})
	return finish(send, rep, err)
}

// appendOp appends a checkpoint with the head's files on top of it.
func appendOp(ctx context.Context, db *engine.DB, w lease.Writer, head string, now func() time.Time, rep report, send func(report)) error {
	src, err := db.Get(ctx, head)
	if err != nil {
		return err
	}
	cp := &chain.Checkpoint{ID: lease.NewToken(), ThreadID: rep.Thread, ParentID: head,
		CreatedAt: now().UnixMilli(), Reason: chain.ReasonAutomatic, Files: src.Files}
	rep.Op, rep.ID, rep.Src = "append", cp.ID, head
	rep.After, rep.Head = append(slices.Clone(rep.Before), cp.ID), cp.ID
	send(rep)
	_, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: w})
	return finish(send, rep, err)
}

// retainOp keeps the head and its parent, deleting the thread's others.
func retainOp(ctx context.Context, db *engine.DB, w lease.Writer, head string, rep report, send func(report)) error {
	cp, err := db.Get(ctx, head)
	if err != nil {
		return err
	}
	rep.Op, rep.After, rep.Head = "retain", []string{head}, head
	if slices.Contains(rep.Before, cp.ParentID) { // retention may have taken it already
		rep.After = append(rep.After, cp.ParentID)
	}
	send(rep)
	_, err = db.DeleteCheckpoints(ctx, rep.Thread, 2, w)
	return finish(send, rep, err)
}

// finish reports the outcome of the operation rep began.
func finish(send func(report), rep report, err error) error {
	if err != nil {
		send(report{Phase: "fail", Worker: rep.Worker, Seq: rep.Seq, Err: err.Error()})
		return fmt.Errorf("%s on %s: %w", rep.Op, rep.Thread, err)
	}
	send(report{Phase: "ack", Worker: rep.Worker, Seq: rep.Seq})
	return nil
}

// editTree changes a workspace as an agent would: a few files rewritten,
// one added or removed now and then, a large file sometimes, an executable
// and a symlink.
func editTree(ws string, r *rand.Rand) error {
	if _, err := os.Stat(ws); os.IsNotExist(err) {
		for i := range 12 {
			if err := writeFile(ws, fmt.Sprintf("src/m%d/file%d.go", i%3, i), text(r, 200+r.IntN(8000)), 0o644); err != nil {
				return err
			}
		}
		if err := writeFile(ws, "run.sh", []byte("#!/bin/sh\nexec go test ./...\n"), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("run.sh", filepath.Join(ws, "test.sh")); err != nil {
			return err
		}
	}
	for range 1 + r.IntN(4) {
		i := r.IntN(16)
		p := fmt.Sprintf("src/m%d/file%d.go", i%3, i)
		if r.IntN(6) == 0 {
			os.Remove(filepath.Join(ws, p))
			continue
		}
		if err := writeFile(ws, p, text(r, 200+r.IntN(8000)), 0o644); err != nil {
			return err
		}
	}
	if r.IntN(8) == 0 {
		big := text(r, 1<<20+r.IntN(1<<18)) // past the in-memory limit: a file of its own
		if err := writeFile(ws, "data/model.bin", big, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(root, rel string, data []byte, mode os.FileMode) error {
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, mode)
}

func text(r *rand.Rand, n int) []byte {
	words := []string{"func", "return", "err", "nil", "if", "for", "range", "ctx", "the", "store", "{", "}", "\n"}
	b := make([]byte, 0, n+8)
	for len(b) < n {
		b = append(b, words[r.IntN(len(words))]...)
		b = append(b, ' ')
	}
	return b[:n]
}

// digest names a tree's content.
func digest(tree map[string]fstree.Node) string {
	paths := make([]string, 0, len(tree))
	for p := range tree {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	h := sha256.New()
	for _, p := range paths {
		fmt.Fprintf(h, "%s\x00%s\x00", p, tree[p])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ---- the driver ----

func TestKillRecovery(t *testing.T) {
	if testing.Short() && !testkit.Long(t) {
		t.Skipf("kill cycles take half a minute; -short skips them (SBXDB_LONG=1 runs %d)", longCycles)
	}
	cycles := testkit.Scale(t, defaultCycles, longCycles)
	if testkit.Exhaustive(t) {
		cycles = exhaustiveCycles
	}
	if s := os.Getenv("SBXDB_CRASH_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SBXDB_CRASH_CYCLES=%q: want a positive count", s)
		}
		cycles = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SBXDB_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (SBXDB_CRASH_SEED=%d replays the kill times)", seed, seed)
	d := &driver{t: t, root: t.TempDir(), rng: rand.New(rand.NewPCG(seed, 0)), seed: seed,
		model: map[string][]string{}, heads: map[string]string{}, trees: map[string]string{}}
	d.store = filepath.Join(d.root, "store")
	d.ws = filepath.Join(d.root, "ws")
	for cycle := range cycles {
		d.cycle(cycle)
		if t.Failed() {
			t.Fatalf("cycle %d failed (seed %d)", cycle, seed)
		}
	}
	// sbxdb check itself, on the store every kill went through.
	bin := filepath.Join(d.root, "sbxdb")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sbxdb/sbxdb/cmd/sbxdb").CombinedOutput(); err != nil {
		t.Fatalf("building sbxdb: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "check", "--verify-blobs", "--db", d.store).CombinedOutput(); err != nil {
		t.Fatalf("sbxdb check after %d kills: %v\n%s", cycles, err, out)
	} else {
		t.Logf("sbxdb check: %s", strings.TrimSpace(string(out)))
	}
	t.Logf("%d kill cycles (%d of them shared by two processes opening the store in turn, compacting and collecting garbage): %d operations acknowledged, %d in flight at a kill (%d of them had happened), %d checkpoints restored and compared; %d kills before a child was ready (starting, opening the store, taking leases)",
		cycles, d.shared, d.acked, d.inFlight, d.happened, d.restored, d.early)
}

type driver struct {
	t           *testing.T
	root, store string
	ws          string
	seed        uint64
	rng         *rand.Rand
	model       map[string][]string // thread → its acknowledged checkpoints, sorted
	heads       map[string]string   // thread → its acknowledged head
	trees       map[string]string   // checkpoint → digest of its tree
	verified    map[string]bool

	readyAfter time.Duration // how long the last child took to get ready

	acked, inFlight, happened, restored, early, shared int
}

func (d *driver) cycle(cycle int) {
	t := d.t
	offset := time.Duration(cycle) * cycleStep
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// One cycle in four is shared: two processes taking turns at the
	// store (captures and appends in opens of their own; compactions and
	// garbage collection), not one holding it.
	roles := []string{""}
	if d.rng.IntN(4) == 0 {
		roles = []string{roleOpener, roleMaint}
		d.shared++
	}
	var cmds []*exec.Cmd
	var stderr lockedBuilder // the children write to it at once
	for _, role := range roles {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"="+d.store, envWS+"="+d.ws, envRole+"="+role,
			envSeed+"="+strconv.FormatUint(d.seed+uint64(cycle), 10), envOffset+"="+strconv.FormatInt(offset.Milliseconds(), 10))
		cmd.ExtraFiles = []*os.File{pw}
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	started := time.Now()
	pw.Close()
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var reports []report
	take := func(line string) {
		var r report
		if err := json.Unmarshal([]byte(line), &r); err == nil {
			reports = append(reports, r)
		} // a line cut by the kill is no report
	}
	// One kill in ten comes early: at a random moment before the child
	// got ready last time (starting, opening the store, taking leases);
	// the rest at a random moment of its work.
	if d.rng.IntN(10) == 0 && d.readyAfter > 0 {
		time.Sleep(time.Duration(d.rng.Int64N(int64(d.readyAfter))))
	} else {
		deadline := time.After(30 * time.Second)
	wait:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break wait
				}
				take(line)
				if strings.Contains(line, `"ready"`) {
					d.readyAfter = time.Since(started)
					break wait
				}
			case <-deadline:
				t.Fatalf("cycle %d: the child did not get ready", cycle)
			}
		}
		time.Sleep(time.Duration(20+d.rng.IntN(300)) * time.Millisecond)
	}
	for _, cmd := range cmds {
		cmd.Process.Signal(syscall.SIGKILL)
	}
	var waitErrs []error
	for _, cmd := range cmds {
		waitErrs = append(waitErrs, cmd.Wait())
	}
	for line := range lines {
		take(line)
	}
	pr.Close()
	for i, cmd := range cmds {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("cycle %d: the child %q ended before the kill (%v): %s", cycle, roles[i], waitErrs[i], stderr.String())
		}
	}
	if !slices.ContainsFunc(reports, func(r report) bool { return r.Phase == "ready" }) {
		d.early++
	}
	d.verify(cycle, offset, reports)
}

// verify reopens the store after a kill and checks it against the reports.
func (d *driver) verify(cycle int, offset time.Duration, reports []report) {
	t := d.t
	ctx := context.Background()
	// The verifier's clock is past every lease the child took.
	now := func() time.Time { return time.Now().Add(offset + leaseTTL + time.Second) }
	db, err := engine.Open(d.store, &engine.Options{Now: now, LeaseDuration: leaseTTL, RenewAfter: leaseTTL / 2})
	if err != nil {
		t.Fatalf("cycle %d: reopening after the kill: %v", cycle, err)
	}
	defer db.Close()

	// Replay the reports: acknowledged operations move the model; the one
	// operation per worker still in flight may have happened or not.
	type key struct{ w, seq int }
	begun := map[key]report{}
	var order []key
	for _, r := range reports {
		k := key{r.Worker, r.Seq}
		switch r.Phase {
		case "begin":
			begun[k] = r
			order = append(order, k)
		case "ack":
			b := begun[k]
			delete(begun, k)
			d.acked++
			if b.Thread == "" {
				continue // a sweep, repack or gc: no thread changes
			}
			if got := d.model[b.Thread]; !sameSet(got, b.Before) {
				t.Fatalf("cycle %d: %s on %s began from %v, the model has %v", cycle, b.Op, b.Thread, b.Before, got)
			}
			d.model[b.Thread], d.heads[b.Thread] = sorted(b.After), b.Head
			d.learn(b)
		case "fail":
			t.Fatalf("cycle %d: the child's %s failed: %s", cycle, begun[k].Op, r.Err)
		}
	}
	pending := map[string]report{} // thread → the op in flight on it
	for _, k := range order {
		if b, ok := begun[k]; ok {
			d.inFlight++
			if b.Thread != "" {
				pending[b.Thread] = b
			}
		}
	}

	threads, err := db.Threads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]bool{}
	for _, th := range threads {
		all[th] = true
	}
	for th := range d.model {
		all[th] = true
	}
	for th := range pending {
		all[th] = true
	}
	for th := range all {
		list, err := db.List(ctx, th)
		if err != nil {
			t.Fatalf("cycle %d: List(%s): %v", cycle, th, err)
		}
		got := make([]string, len(list))
		for i, cp := range list {
			got[i] = cp.ID
		}
		got = sorted(got)
		gotHead, err := db.Head(ctx, th)
		if err != nil {
			t.Fatalf("cycle %d: Head(%s): %v", cycle, th, err)
		}
		want, wantHead := d.model[th], d.heads[th]
		p, inFlight := pending[th]
		if inFlight && sameSet(got, p.After) && gotHead == p.Head && !(sameSet(got, want) && gotHead == wantHead) {
			d.happened++ // the operation in flight committed before the kill
			d.learn(p)
			want, wantHead = sorted(p.After), p.Head
		}
		if !sameSet(got, want) || gotHead != wantHead {
			desc := "none"
			if inFlight {
				desc = fmt.Sprintf("%s, which would make %v with head %q", p.Op, p.After, p.Head)
			}
			t.Fatalf("cycle %d: thread %s holds %v with head %q; acknowledged %v with head %q; in flight: %s",
				cycle, th, got, gotHead, d.model[th], d.heads[th], desc)
		}
		if len(want) == 0 {
			delete(d.model, th)
			delete(d.heads, th)
		} else {
			d.model[th], d.heads[th] = want, wantHead
		}
		// Every checkpoint present restores to the tree it was taken of
		// (checked once each: a checkpoint never changes).
		for _, id := range got {
			if d.verified[id] {
				continue
			}
			d.restoreEqual(db, cycle, id)
		}
	}

	// The check sbxdb check runs: counts recomputed, every referenced
	// blob present and read back.
	rep, err := db.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
	if err != nil {
		t.Fatalf("cycle %d: check: %v", cycle, err)
	}
	if !rep.Clean() {
		t.Fatalf("cycle %d: check found problems: %v", cycle, rep.Findings)
	}
	// No lease outlives its expiry: on a clock past the child's leases,
	// every thread can be leased again, with a newer fence.
	writers, err := db.Writers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for th, st := range writers {
		l, err := db.AcquireWriter(ctx, th)
		if err != nil {
			t.Fatalf("cycle %d: thread %s: a dead child's lease (expiring %d) still holds: %v", cycle, th, st.ExpiresAt, err)
		}
		if l.Writer.Fence <= st.LastFence {
			t.Fatalf("cycle %d: thread %s: new fence %d is not above %d", cycle, th, l.Writer.Fence, st.LastFence)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// learn records the tree a new checkpoint of rep must restore to.
func (d *driver) learn(rep report) {
	switch {
	case rep.Tree != "":
		d.trees[rep.ID] = rep.Tree
	case rep.Src != "" && rep.ID != "":
		d.trees[rep.ID] = d.trees[rep.Src]
	}
}

func (d *driver) restoreEqual(db *engine.DB, cycle int, id string) {
	t := d.t
	want, ok := d.trees[id]
	if !ok {
		t.Fatalf("cycle %d: checkpoint %s is present but no report names its tree", cycle, id)
	}
	out := filepath.Join(d.root, "restore", id)
	if _, err := db.Restore(context.Background(), id, out, nil); err != nil {
		t.Fatalf("cycle %d: restore %s: %v", cycle, id, err)
	}
	tree, err := fstree.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := digest(tree); got != want {
		t.Fatalf("cycle %d: checkpoint %s restores to tree %s, captured %s", cycle, id, got[:12], want[:12])
	}
	if d.verified == nil {
		d.verified = map[string]bool{}
	}
	d.verified[id] = true
	d.restored++
	os.RemoveAll(out)
}

// lockedBuilder is a strings.Builder several writers may share.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func sorted(ids []string) []string { return slices.Sorted(slices.Values(ids)) }

func sameSet(a, b []string) bool { return slices.Equal(sorted(a), sorted(b)) }
