package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// These tests run several `sbxdb serve` processes, each with its own store
// directory and socket, on one metadata database (--metadata): what one
// acknowledges, every other must see, and no interleaving of their writes
// may fork a thread, lose an append or miscount a blob reference. The
// checkpoints name blob keys whose bytes are never stored: an append does
// not need them, and each server's blob directory is its own.

// peerServer is one `sbxdb serve` sharing the metadata database.
type peerServer struct {
	name string
	dir  string // its store directory (blobs, lock)
	sock string
	args []string
	proc *serveProc
	c    *client.Client
}

// startPeer starts sbxdb serve on dir with metadata url, listening on
// sock, and returns it with a client of the socket.
func startPeer(t *testing.T, name, url, dir, sock string) *peerServer {
	t.Helper()
	shareBlobsID(t, url, dir)
	p := &peerServer{name: name, dir: dir, sock: sock,
		args: []string{"--db", dir, "--metadata", url, "--listen", "unix:" + sock}}
	p.start(t)
	return p
}

// start (re)starts the server process and connects a new client.
func (p *peerServer) start(t *testing.T) {
	t.Helper()
	p.proc = startServe(t, 1, p.args...)
	c, err := client.New("unix:"+p.sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p.c = c
}

// kill ends the server with SIGKILL and waits for it to exit.
func (p *peerServer) kill(t *testing.T) {
	t.Helper()
	if err := p.proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.proc.exited
}

// shareBlobsID gives the store directory dir the blob-store id of every
// server of metadata url: the servers stand for servers sharing one blob
// store (their appends name blob keys without storing bytes), which shared
// metadata requires of its servers (engine.ErrBlobsElsewhere).
func shareBlobsID(t *testing.T, url, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("peers-%x\n", sha256.Sum256([]byte(url)))
	if err := os.WriteFile(filepath.Join(dir, "blobs-id"), []byte(id), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startPeers starts n servers on one fresh metadata database. Sockets go
// in a short temporary directory (a socket path has at most 107 bytes).
func startPeers(t *testing.T, n int) (string, []*peerServer) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	url := pgtest.URL(t)
	sockDir, err := os.MkdirTemp("", "sbxpeers")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	root := t.TempDir()
	var peers []*peerServer
	for i := range n {
		name := string(rune('A' + i))
		peers = append(peers, startPeer(t, name, url, filepath.Join(root, name), filepath.Join(sockDir, name+".sock")))
	}
	return url, peers
}

// ledger records what a run's appends did: the ids acknowledged, and the
// ids of appends refused or whose outcome the client never learnt, with
// the blob key each named alone.
type ledger struct {
	mu      sync.Mutex
	acked   map[string]string // id -> its own blob key
	refused map[string]string
	unknown map[string]string // the request failed without an answer
}

func newLedger() *ledger {
	return &ledger{acked: map[string]string{}, refused: map[string]string{}, unknown: map[string]string{}}
}

func (l *ledger) record(m map[string]string, id, key string) {
	l.mu.Lock()
	m[id] = key
	l.mu.Unlock()
}

// sharedKey is named by every checkpoint of the tests, so its count is
// the number of checkpoints stored; each checkpoint also names a key of
// its own.
var sharedKey = testkit.FileKey(0)

// keySeq numbers the keys of their own and the createdAt of checkpoints.
var keySeq atomic.Int64

// peerCheckpoint returns a new checkpoint of thread on parent, naming
// sharedKey and a key of its own.
func peerCheckpoint(thread, id, parent string) (*chain.Checkpoint, string) {
	n := keySeq.Add(1)
	own := testkit.FileKey(1_000_000 + n)
	return &chain.Checkpoint{
		ID: id, ThreadID: thread, ParentID: parent,
		CreatedAt: 1_700_000_000_000 + n, Reason: chain.ReasonAutomatic,
		Files: []chain.Entry{
			{Path: "shared.txt", Kind: chain.KindFile, BlobKey: sharedKey, Size: 1},
			{Path: "own.txt", Kind: chain.KindFile, BlobKey: own, Size: 2},
		},
	}, own
}

// checkThread checks, through every server given, that thread is one
// chain holding exactly the acknowledged ids of l (plus, at most, ids
// whose outcome was unknown), that every server sees the same head and
// list, and returns the ids stored.
func checkThread(t *testing.T, thread string, l *ledger, peers ...*peerServer) map[string]bool {
	t.Helper()
	ctx := t.Context()
	var head0 string
	var ids0 []string
	stored := map[string]bool{}
	for i, p := range peers {
		head, err := p.c.Head(ctx, thread)
		if err != nil {
			t.Fatalf("server %s: Head: %v", p.name, err)
		}
		list, err := p.c.List(ctx, thread)
		if err != nil {
			t.Fatalf("server %s: List: %v", p.name, err)
		}
		byID := map[string]*chain.Checkpoint{}
		var ids []string
		for _, cp := range list {
			byID[cp.ID] = cp
			ids = append(ids, cp.ID)
		}
		if i == 0 {
			head0, ids0 = head, ids
			for _, id := range ids {
				stored[id] = true
			}
		} else if head != head0 || !slices.Equal(ids, ids0) {
			t.Errorf("server %s sees head %q and %d checkpoints; server %s sees head %q and %d", p.name, head, len(ids), peers[0].name, head0, len(ids0))
		}
		// One chain: walking the parents from the head visits every
		// checkpoint of the list once and ends at a root.
		seen := 0
		for id := head; id != ""; {
			cp := byID[id]
			if cp == nil {
				t.Fatalf("server %s: the chain from head %q reaches %q, which List does not return", p.name, head, id)
			}
			if seen++; seen > len(list) {
				t.Fatalf("server %s: the chain from head %q loops", p.name, head)
			}
			id = cp.ParentID
		}
		if seen != len(list) {
			parents := map[string][]string{}
			for _, cp := range list {
				parents[cp.ParentID] = append(parents[cp.ParentID], cp.ID)
			}
			for parent, children := range parents {
				if len(children) > 1 {
					t.Errorf("server %s: fork: %q is the parent of %v", p.name, parent, children)
				}
			}
			t.Fatalf("server %s: the chain from head %q holds %d of the thread's %d checkpoints", p.name, head, seen, len(list))
		}
	}
	for id := range l.acked {
		if !stored[id] {
			t.Errorf("acknowledged append %s is not stored", id)
		}
		for _, p := range peers {
			if cp, err := p.c.Get(ctx, id); err != nil || cp == nil || cp.ID != id {
				t.Errorf("server %s: Get(%s) of an acknowledged append: %v, %v", p.name, id, cp, err)
			}
		}
	}
	for id := range l.refused {
		if stored[id] {
			t.Errorf("refused append %s is stored", id)
		}
	}
	for id := range stored {
		if _, ok := l.acked[id]; !ok {
			if _, ok := l.unknown[id]; !ok {
				t.Errorf("stored checkpoint %s was never acknowledged nor lost in flight", id)
			}
		}
	}
	return stored
}

// checkReferences checks, through every server given, that the blob
// reference counts are exact for the checkpoints stored: sharedKey once
// per checkpoint, each checkpoint's own key once, nothing else. (Whether
// each should be stored is checkThread's question.)
func checkReferences(t *testing.T, l *ledger, stored map[string]bool, peers ...*peerServer) {
	t.Helper()
	want := map[string]int64{sharedKey: int64(len(stored))}
	for _, m := range []map[string]string{l.acked, l.unknown, l.refused} {
		for id, key := range m {
			if stored[id] {
				want[key] = 1
			}
		}
	}
	for _, p := range peers {
		refs, err := p.c.BlobReferences(t.Context())
		if err != nil {
			t.Fatalf("server %s: BlobReferences: %v", p.name, err)
		}
		got := map[string]int64{}
		for _, r := range refs {
			got[r.Key] = r.References
		}
		for k, n := range want {
			if got[k] != n {
				t.Errorf("server %s: %s has %d references, want %d", p.name, k, got[k], n)
			}
		}
		for k, n := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("server %s: %s has %d references, want none", p.name, k, n)
			}
		}
	}
}

// sub returns the part of l about thread, whose ids are "thread-N".
func (l *ledger) sub(thread string) *ledger {
	out := newLedger()
	for _, m := range [][2]map[string]string{{l.acked, out.acked}, {l.refused, out.refused}, {l.unknown, out.unknown}} {
		for id, key := range m[0] {
			if strings.HasPrefix(id, thread+"-") {
				m[1][id] = key
			}
		}
	}
	return out
}

// checkWriters checks every writer's thread (checkThread) and the
// reference counts of them all.
func checkWriters(t *testing.T, l *ledger, ws []*peerWriter, peers ...*peerServer) {
	t.Helper()
	all := map[string]bool{}
	for _, pw := range ws {
		for id := range checkThread(t, pw.thread, l.sub(pw.thread), peers...) {
			all[id] = true
		}
	}
	checkReferences(t, l, all, peers...)
}

// pick returns one of the servers at random.
func pick(peers []*peerServer) *peerServer { return peers[rand.IntN(len(peers))] }

// TestServersOneThread: 64 goroutines append to one thread through two
// servers sharing the metadata database. First they share one lease and
// race on the head (each reads the head through one server, appends on it
// through either, and on STALE_HEAD reads the head again), then each in
// turn takes the lease through one server, appends through either and
// releases it through either. The thread stays one chain holding exactly
// the acknowledged appends, both servers see the same head, and the
// reference counts are exact.
func TestServersOneThread(t *testing.T) {
	_, peers := startPeers(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const thread, workers = "one", 64
	racing := testkit.Scale(t, 128, 400) // appends won while racing
	turns := testkit.Scale(t, 1, 4)      // lease turns per goroutine
	l := newLedger()
	var errs sync.Map

	// Racing on the head with one shared lease.
	lease, err := pick(peers).c.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var won, lost atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for attempt := 0; won.Load() < int64(racing); attempt++ {
				head, err := pick(peers).c.Head(ctx, thread)
				if err != nil {
					errs.Store(fmt.Sprintf("race g%d head", g), err)
					return
				}
				id := fmt.Sprintf("r%02d-%05d", g, attempt)
				cp, own := peerCheckpoint(thread, id, head)
				got, err := pick(peers).c.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: lease.Writer})
				switch {
				case err == nil && got == id:
					l.record(l.acked, id, own)
					won.Add(1)
				case err == nil:
					errs.Store("race "+id, fmt.Errorf("Append returned head %q", got))
					return
				case errors.Is(err, chain.ErrStaleHead):
					l.record(l.refused, id, own)
					lost.Add(1)
				default:
					l.record(l.unknown, id, own)
					errs.Store("race "+id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("racing: %d appends won, %d lost to STALE_HEAD, in %v", won.Load(), lost.Load(), time.Since(start).Round(time.Millisecond))
	if err := pick(peers).c.ReleaseWriter(ctx, lease.Writer); err != nil {
		t.Fatal(err)
	}

	// Taking turns: acquire through one server, append and release
	// through either.
	start = time.Now()
	var conflicts atomic.Int64
	for g := range workers {
		wg.Go(func() {
			for turn := range turns {
				var w chain.Writer
				for {
					l, err := pick(peers).c.AcquireWriter(ctx, thread)
					if err == nil {
						w = l.Writer
						break
					}
					if !errors.Is(err, chain.ErrWriterConflict) {
						errs.Store(fmt.Sprintf("turn g%d acquire", g), err)
						return
					}
					conflicts.Add(1)
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // back off, as a host would
				}
				head, err := pick(peers).c.Head(ctx, thread)
				if err != nil {
					errs.Store(fmt.Sprintf("turn g%d head", g), err)
					return
				}
				id := fmt.Sprintf("t%02d-%02d", g, turn)
				cp, own := peerCheckpoint(thread, id, head)
				got, err := pick(peers).c.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: w})
				if err != nil || got != id {
					// Holding the lease, the head cannot have moved.
					l.record(l.unknown, id, own)
					errs.Store("turn "+id, fmt.Errorf("append holding the lease: head %q, %w", got, err))
					return
				}
				l.record(l.acked, id, own)
				if err := pick(peers).c.ReleaseWriter(ctx, w); err != nil {
					errs.Store("turn "+id+" release", err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("taking turns: %d appends, %d WRITER_CONFLICT retries, in %v", workers*turns, conflicts.Load(), time.Since(start).Round(time.Millisecond))
	errs.Range(func(k, v any) bool {
		t.Errorf("%s: %v", k, v)
		return true
	})

	stored := checkThread(t, thread, l, peers...)
	if len(stored) != len(l.acked) {
		t.Errorf("%d checkpoints stored, %d appends acknowledged", len(stored), len(l.acked))
	}
	checkReferences(t, l, stored, peers...)
}

// peerWriter appends to a thread of its own through the servers in turn,
// keeping what it learnt in a ledger.
type peerWriter struct {
	thread string
	w      chain.Writer
	head   string
	n      int
	// unsure is set while the last append's outcome is unknown: a killed
	// server's COMMIT may still complete in the database after the head
	// was read back, so the head may move once more.
	unsure bool
}

// step makes one append through p. When p does not answer (it is gone)
// or cannot reach the database, the outcome is unknown: it asks another
// server for the head, on which the next append goes, whichever it is. It
// returns any other failure.
func (pw *peerWriter) step(ctx context.Context, l *ledger, p *peerServer, others []*peerServer) error {
	pw.n++
	id := fmt.Sprintf("%s-%04d", pw.thread, pw.n)
	cp, own := peerCheckpoint(pw.thread, id, pw.head)
	got, err := p.c.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: pw.head, Writer: pw.w})
	if errors.Is(err, chain.ErrStaleHead) && pw.unsure {
		// The unknown append committed after its head was read back: read
		// the head again (the dead server's transaction has ended, or this
		// append would have waited for it) and append on it.
		head, herr := p.c.Head(ctx, pw.thread)
		if herr != nil {
			return fmt.Errorf("append %s through %s: %w; reading the head again: %w", id, p.name, err, herr)
		}
		pw.head, pw.unsure = head, false
		cp, own = peerCheckpoint(pw.thread, id, pw.head)
		got, err = p.c.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: pw.head, Writer: pw.w})
	}
	switch {
	case err == nil && got == id:
		l.record(l.acked, id, own)
		pw.head, pw.unsure = id, false
		return nil
	case err == nil:
		return fmt.Errorf("append %s through %s returned head %q", id, p.name, got)
	case errors.Is(err, client.ErrUnreachable), errors.Is(err, client.ErrUnavailable):
		l.record(l.unknown, id, own)
		for _, o := range others {
			if head, herr := o.c.Head(ctx, pw.thread); herr == nil {
				pw.head, pw.unsure = head, true
				return nil
			}
		}
		return fmt.Errorf("append %s through %s: %w, and no other server answers", id, p.name, err)
	}
	return fmt.Errorf("append %s through %s: %w", id, p.name, err)
}

// TestServersKill: while writers append through two servers in turn, one
// server is killed with SIGKILL. Every append either server acknowledged
// is stored, the other server goes on appending, and the killed one,
// restarted on its directory, reads everything.
func TestServersKill(t *testing.T) {
	_, peers := startPeers(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	a, b := peers[0], peers[1]
	writers := testkit.Scale(t, 8, 32)
	rounds := testkit.Scale(t, 40, 150) // appends per writer after the kill
	l := newLedger()
	ws := make([]*peerWriter, writers)
	for i := range ws {
		thread := fmt.Sprintf("k%02d", i)
		lease, err := pick(peers).c.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = &peerWriter{thread: thread, w: lease.Writer}
	}

	// Every writer appends through A and B in turn. Once each has made
	// some appends A is killed; from then on every append goes through B
	// (a host would drop a server that does not answer) until the writer
	// has made rounds of them.
	var killed atomic.Bool
	var before sync.WaitGroup
	before.Add(writers)
	var errs sync.Map
	var wg sync.WaitGroup
	for i, pw := range ws {
		wg.Go(func() {
			ready := false
			markReady := func() {
				if !ready {
					ready = true
					before.Done()
				}
			}
			defer markReady()
			afterKill := 0
			for step := 0; afterKill < rounds; step++ {
				p, others := a, []*peerServer{b}
				if step%2 == 1 || killed.Load() {
					p, others = b, []*peerServer{a}
				}
				if killed.Load() {
					afterKill++
				}
				if err := pw.step(ctx, l, p, others); err != nil {
					errs.Store(fmt.Sprintf("writer %d step %d", i, step), err)
					return
				}
				if step == 3 {
					markReady()
				}
			}
		})
	}
	// Kill A while the writers are in full flight: once each has made a
	// few appends through both servers.
	before.Wait()
	a.kill(t)
	killed.Store(true)
	wg.Wait()
	errs.Range(func(k, v any) bool {
		t.Errorf("%s: %v", k, v)
		return true
	})
	if t.Failed() {
		return
	}
	lostInFlight := 0
	for id := range l.unknown {
		if _, ok := l.acked[id]; !ok {
			lostInFlight++
		}
	}
	t.Logf("%d appends acknowledged, %d without an answer when A was killed", len(l.acked), lostInFlight)

	// B has everything acknowledged; A restarted reads it all too.
	a.start(t)
	checkWriters(t, l, ws, b, a)

	// And A appends again, B seeing it.
	pw := ws[0]
	if err := pw.step(ctx, l, a, []*peerServer{b}); err != nil {
		t.Fatal(err)
	}
	if head, err := b.c.Head(ctx, pw.thread); err != nil || head != pw.head {
		t.Errorf("B sees head %q (%v) after the restarted A appended %s", head, err, pw.head)
	}
}

// TestServersMetadataRestart: PostgreSQL is restarted (a fast shutdown,
// or a crash: immediate shutdown and recovery) while writers append
// through two servers. A request that fails meanwhile fails with 503
// SBXDB_UNAVAILABLE, saying the metadata database is unavailable; once
// PostgreSQL is back, every request succeeds without restarting sbxdb,
// every acknowledged append is stored, and no append refused (a contract
// error, or unavailable without "may have been committed") is.
func TestServersMetadataRestart(t *testing.T) {
	t.Run("fast", func(t *testing.T) { testMetadataRestart(t, pgtest.Stop) })
	t.Run("crash", func(t *testing.T) { testMetadataRestart(t, pgtest.Kill) })
}

func testMetadataRestart(t *testing.T, stop func(testing.TB)) {
	_, peers := startPeers(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	writers := 8
	after := testkit.Scale(t, 10, 40) // appends per writer once PostgreSQL is back
	l := newLedger()
	ws := make([]*peerWriter, writers)
	for i := range ws {
		thread := fmt.Sprintf("m%02d", i)
		lease, err := pick(peers).c.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = &peerWriter{thread: thread, w: lease.Writer}
	}

	const (
		running = iota
		restarting
		restarted
	)
	var phase atomic.Int32
	var mu sync.Mutex
	outage := map[string]int{} // "status code" of the failures while restarting
	var examples []string
	nBad := 0
	bad := func(what string, err error) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if nBad++; nBad <= 5 { // the rest are counted: one cause fails every request alike
			t.Errorf("%s: %v", what, err)
		}
	}
	// failed sorts a request's failure: one that began after the restart,
	// or is not the clear unavailable error, fails the test.
	failed := func(began int32, what string, err error) {
		var ce *client.Error
		if !errors.As(err, &ce) {
			bad(what+" (no answer from the server)", err)
			return
		}
		if began == restarted {
			bad(what+" after PostgreSQL came back", err)
			return
		}
		if !errors.Is(err, client.ErrUnavailable) || ce.Status != 503 || !strings.Contains(ce.Message, "metadata database unavailable") {
			bad(fmt.Sprintf("%s while PostgreSQL restarted: status %d, code %s", what, ce.Status, ce.Code), err)
		}
		mu.Lock()
		outage[fmt.Sprintf("%d %s", ce.Status, ce.Code)]++
		if len(examples) < 3 {
			examples = append(examples, ce.Message)
		}
		mu.Unlock()
	}

	var ready, wg sync.WaitGroup
	ready.Add(writers)
	for i, pw := range ws {
		wg.Go(func() {
			isReady := false
			defer func() {
				if !isReady {
					ready.Done()
				}
			}()
			needHead := false
			for step, ok := 0, 0; ok < after; step++ {
				if ctx.Err() != nil {
					bad(fmt.Sprintf("writer %d", i), ctx.Err())
					return
				}
				p := peers[step%2]
				began := phase.Load()
				if needHead {
					head, err := p.c.Head(ctx, pw.thread)
					if err != nil {
						failed(began, fmt.Sprintf("writer %d: Head through %s", i, p.name), err)
						time.Sleep(10 * time.Millisecond) // back off, as a host would
						continue
					}
					pw.head, needHead = head, false
				}
				pw.n++
				id := fmt.Sprintf("%s-%04d", pw.thread, pw.n)
				cp, own := peerCheckpoint(pw.thread, id, pw.head)
				got, err := p.c.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: pw.head, Writer: pw.w})
				if err != nil || got != id {
					l.record(outcome(l, err), id, own)
					failed(began, fmt.Sprintf("writer %d: Append %s through %s", i, id, p.name), fmt.Errorf("head %q: %w", got, err))
					needHead = true
					time.Sleep(10 * time.Millisecond)
					continue
				}
				l.record(l.acked, id, own)
				pw.head = id
				if began == restarted {
					ok++
				}
				if step == 3 && !isReady {
					isReady = true
					ready.Done()
				}
			}
		})
	}
	ready.Wait()
	phase.Store(restarting)
	start := time.Now()
	stop(t)
	pgtest.Start(t)
	t.Logf("PostgreSQL restarted in %v", time.Since(start).Round(time.Millisecond))
	phase.Store(restarted)
	wg.Wait()
	t.Logf("failures while PostgreSQL restarted: %v; for example %q", outage, examples)
	if nBad > 5 {
		t.Errorf("and %d more failures like those", nBad-5)
	}
	if t.Failed() {
		return
	}
	checkWriters(t, l, ws, peers...)
}

// pgProxy forwards TCP connections to a PostgreSQL server and loses
// COMMITs the way a network can: when armed, the next COMMIT a client
// sends reaches the server and is carried out, but the server's answer is
// dropped and both connections are closed, so the client cannot know
// whether its transaction committed. It reads the protocol's messages
// (startup, then type, length, body) from client to server, to find the
// COMMIT: a simple query, or a prepared statement whose text is COMMIT.
type pgProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Int64 // COMMITs still to lose
	lost   atomic.Int64 // COMMITs lost
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// startProxy listens on a free local port and forwards to target
// (host:port) until the test ends.
func startProxy(t *testing.T, target string) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *pgProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = true
	}
}

func (p *pgProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, s)
		var frozen atomic.Bool // the server's answers are dropped
		p.wg.Go(func() {
			p.forward(c, s, &frozen)
			c.Close()
			s.Close()
		})
		p.wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !frozen.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					c.Close()
					return
				}
			}
		})
	}
}

// forward copies the client's messages to the server, losing a COMMIT
// when armed.
func (p *pgProxy) forward(c, s net.Conn, frozen *atomic.Bool) {
	r := bufio.NewReader(c)
	var hdr [5]byte
	// The startup message has no type byte.
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		return
	}
	body := make([]byte, int(binary.BigEndian.Uint32(hdr[1:]))-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return
	}
	if _, err := s.Write(append(hdr[1:5:5], body...)); err != nil {
		return
	}
	commits := map[string]bool{} // prepared statements whose text is COMMIT
	isCommit := func(q []byte) bool {
		return strings.EqualFold(strings.TrimRight(strings.TrimSpace(string(q)), ";\x00"), "COMMIT")
	}
	losing := false
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		body := make([]byte, int(binary.BigEndian.Uint32(hdr[1:]))-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		fields := bytes.Split(body, []byte{0})
		commit := false
		switch hdr[0] {
		case 'Q': // simple query
			commit = isCommit(fields[0])
		case 'P': // Parse: name, query
			if len(fields) > 1 && isCommit(fields[1]) {
				commits[string(fields[0])] = true
			}
		case 'B': // Bind: portal, statement
			commit = len(fields) > 1 && commits[string(fields[1])]
		}
		if commit && !losing && p.armed.Add(-1) >= 0 {
			// From here on the client hears nothing: the COMMIT and what
			// follows it reach the server, which carries them out.
			losing = true
			frozen.Store(true)
		}
		if _, err := s.Write(append(hdr[:], body...)); err != nil {
			return
		}
		if losing && (hdr[0] == 'S' || hdr[0] == 'Q') { // Sync ends the batch
			time.Sleep(50 * time.Millisecond) // let the server run it
			p.lost.Add(1)
			return
		}
	}
}

// TestServersCommitLost: the connections of two servers to the metadata
// database are lost, again and again, while many writers append through
// both, so that COMMITs are carried out without the servers learning it.
// An append answered with success is stored; one answered with a
// contract error (DUPLICATE_ID, STALE_HEAD…) is not: the contract's "a
// throwing write leaves everything as before" holds even when the
// database connection, not the write, failed. The answer to an append
// whose commit was lost is the unavailable error that says it may have
// been committed.
func TestServersCommitLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	url := pgtest.URL(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	sockDir, err := os.MkdirTemp("", "sbxpeers")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	root := t.TempDir()
	peers := []*peerServer{
		startPeer(t, "A", u.String(), filepath.Join(root, "A"), filepath.Join(sockDir, "A.sock")),
		startPeer(t, "B", u.String(), filepath.Join(root, "B"), filepath.Join(sockDir, "B.sock")),
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	writers := 32
	cuts := testkit.Scale(t, 6, 15)
	l := newLedger()
	ws := make([]*peerWriter, writers)
	for i := range ws {
		thread := fmt.Sprintf("c%02d", i)
		lease, err := pick(peers).c.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = &peerWriter{thread: thread, w: lease.Writer}
	}

	var mu sync.Mutex
	answers := map[string]int{}
	count := func(what string) { mu.Lock(); answers[what]++; mu.Unlock() }
	var progress atomic.Int64 // appends acknowledged
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i, pw := range ws {
		wg.Go(func() {
			needHead := false
			for step := 0; !stop.Load() && ctx.Err() == nil; step++ {
				p := peers[(step+i)%2]
				if needHead {
					head, err := p.c.Head(ctx, pw.thread)
					if err != nil {
						count("Head: " + errCode(err))
						time.Sleep(5 * time.Millisecond) // back off, as a host would
						continue
					}
					pw.head, needHead = head, false
				}
				pw.n++
				id := fmt.Sprintf("%s-%04d", pw.thread, pw.n)
				cp, own := peerCheckpoint(pw.thread, id, pw.head)
				got, err := p.c.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: pw.head, Writer: pw.w})
				switch {
				case err == nil && got == id:
					l.record(l.acked, id, own)
					pw.head = id
					progress.Add(1)
					count("Append: ok")
					continue
				case err == nil:
					t.Errorf("Append %s returned head %q", id, got)
					return
				default:
					l.record(outcome(l, err), id, own)
				}
				count("Append: " + errCode(err))
				needHead = true
			}
		})
	}
	for range cuts {
		// Let the writers get going again after the last loss.
		for target := progress.Load() + int64(writers); progress.Load() < target && ctx.Err() == nil; {
			time.Sleep(time.Millisecond)
		}
		proxy.armed.Store(1)
		for proxy.lost.Load() < int64(cuts) && proxy.armed.Load() > 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}
	for target := progress.Load() + int64(writers); progress.Load() < target && ctx.Err() == nil; {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d COMMITs lost; answers: %v", proxy.lost.Load(), answers)
	checkWriters(t, l, ws, peers...)
}

// outcome returns the map of l where an append that failed with err
// belongs: refused when the server answered that it was not stored (a
// contract error; the metadata database unavailable, the write not
// committed), unknown when it may have been (no answer; the database lost
// while the write committed).
func outcome(l *ledger, err error) map[string]string {
	var ce *client.Error
	switch {
	case chain.Code(err) != "":
		return l.refused
	case errors.As(err, &ce) && ce.Code == "SBXDB_UNAVAILABLE" && !strings.Contains(ce.Message, "may have been committed"):
		return l.refused
	}
	return l.unknown
}

// errCode names err for counting: its wire status and code, or that the
// server did not answer.
func errCode(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		msg := ""
		if strings.Contains(ce.Message, "may have been committed") {
			msg = " (may have been committed)"
		}
		return fmt.Sprintf("%d %s%s", ce.Status, ce.Code, msg)
	}
	return err.Error()
}

// checkRefsFromStore checks, through every server given, that the blob
// reference counts are those of the checkpoints stored: each key once per
// checkpoint naming it, whatever wrote, forked or deleted them.
func checkRefsFromStore(t *testing.T, peers ...*peerServer) {
	t.Helper()
	ctx := t.Context()
	want := map[string]int64{}
	threads, err := peers[0].c.Threads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range threads {
		list, err := peers[0].c.List(ctx, th)
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range list {
			seen := map[string]bool{}
			for _, f := range cp.Files {
				if f.BlobKey != "" && !seen[f.BlobKey] {
					seen[f.BlobKey] = true
					want[f.BlobKey]++
				}
			}
		}
	}
	for _, p := range peers {
		refs, err := p.c.BlobReferences(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, r := range refs {
			got[r.Key] = r.References
		}
		for k, n := range want {
			if got[k] != n {
				t.Errorf("server %s: %s has %d references; the stored checkpoints name it %d times", p.name, k, got[k], n)
			}
		}
		for k, n := range got {
			if want[k] == 0 {
				t.Errorf("server %s: %s has %d references; no stored checkpoint names it", p.name, k, n)
			}
		}
	}
}

// TestServersMixedWrites: one writer appends to a thread through two
// servers in turn, deleting its head and pruning it (DeleteHead,
// DeleteCheckpoints) through the other, while forkers fork its head into
// threads of their own through either. The thread stays one chain that
// both servers see alike, a fork either made its thread or left it empty,
// and the reference counts are those of what is stored.
func TestServersMixedWrites(t *testing.T) {
	_, peers := startPeers(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const thread = "main"
	steps := testkit.Scale(t, 120, 500)
	forkers, forks := 8, testkit.Scale(t, 8, 25)
	lease, err := peers[0].c.AcquireWriter(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	w := lease.Writer
	var wg sync.WaitGroup
	wg.Go(func() {
		head := ""
		for step := range steps {
			p, other := peers[step%2], peers[1-step%2]
			switch {
			case step%7 == 5 && head != "":
				if err := other.c.DeleteHead(ctx, thread, head, w); err != nil {
					t.Errorf("step %d: DeleteHead(%s) through %s: %v", step, head, other.name, err)
					return
				}
				h, err := p.c.Head(ctx, thread)
				if err != nil {
					t.Errorf("step %d: Head through %s: %v", step, p.name, err)
					return
				}
				head = h
			case step%7 == 6:
				if _, err := other.c.DeleteCheckpoints(ctx, thread, 3, w); err != nil {
					t.Errorf("step %d: DeleteCheckpoints through %s: %v", step, other.name, err)
					return
				}
			default:
				id := fmt.Sprintf("main-%04d", step)
				cp, _ := peerCheckpoint(thread, id, head)
				got, err := p.c.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: w})
				if err != nil || got != id {
					t.Errorf("step %d: Append %s on %q through %s: head %q, %v", step, id, head, p.name, got, err)
					return
				}
				head = id
			}
		}
	})
	var mu sync.Mutex
	made := map[string]string{} // fork thread -> source checkpoint
	var refused []string
	for g := range forkers {
		wg.Go(func() {
			for k := range forks {
				src, err := pick(peers).c.Head(ctx, thread)
				if err != nil {
					t.Errorf("forker %d: Head: %v", g, err)
					return
				}
				if src == "" {
					continue
				}
				dest := fmt.Sprintf("f%d-%d", g, k)
				dl, err := pick(peers).c.AcquireWriter(ctx, dest)
				if err != nil {
					t.Errorf("forker %d: AcquireWriter(%s): %v", g, dest, err)
					return
				}
				_, err = pick(peers).c.Fork(ctx, chain.ForkInput{SourceThreadID: thread, SourceCheckpointID: src,
					DestinationThreadID: dest, DestinationCheckpointID: dest + "-root", CreatedAt: 1_800_000_000_000, Writer: dl.Writer})
				mu.Lock()
				switch {
				case err == nil:
					made[dest] = src
				case errors.Is(err, chain.ErrForkSourceNotFound): // deleted since read
					refused = append(refused, dest)
				default:
					t.Errorf("forker %d: Fork %s into %s: %v", g, src, dest, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d forks made, %d refused as their source was deleted meanwhile", len(made), len(refused))
	if t.Failed() {
		return
	}

	// The thread: the same head and list on both servers, one chain from
	// the head back to the oldest kept checkpoint.
	var list0 []string
	for i, p := range peers {
		head, err := p.c.Head(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		list, err := p.c.List(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]*chain.Checkpoint{}
		var ids []string
		for _, cp := range list {
			byID[cp.ID] = cp
			ids = append(ids, cp.ID)
		}
		if i == 0 {
			list0 = ids
		} else if !slices.Equal(ids, list0) {
			t.Errorf("server %s lists %v, server %s %v", p.name, ids, peers[0].name, list0)
		}
		n := 0
		for id := head; byID[id] != nil && n <= len(list); id = byID[id].ParentID {
			n++
		}
		if n != len(list) {
			t.Errorf("server %s: the chain from head %q holds %d of the thread's %d checkpoints %v", p.name, head, n, len(list), ids)
		}
	}
	// Every fork made its thread, with a root holding its source's files;
	// every refused fork left its thread empty.
	for dest, src := range made {
		for _, p := range peers {
			list, err := p.c.List(ctx, dest)
			if err != nil || len(list) != 1 || list[0].ID != dest+"-root" || len(list[0].Files) != 2 {
				t.Errorf("server %s: fork of %s into %s: %d checkpoints, %v", p.name, src, dest, len(list), err)
			}
		}
	}
	for _, dest := range refused {
		for _, p := range peers {
			if list, err := p.c.List(ctx, dest); err != nil || len(list) != 0 {
				t.Errorf("server %s: refused fork into %s left %d checkpoints, %v", p.name, dest, len(list), err)
			}
		}
	}
	checkRefsFromStore(t, peers...)
}

// TestServersStartTogether: servers opening an empty metadata database at
// the same moment all open it (one creates the tables and the layout, the
// others find them), and each sees what every other writes.
func TestServersStartTogether(t *testing.T) {
	const n = 8
	for round := range testkit.Scale(t, 3, 8) {
		url := pgtest.URL(t)
		root := t.TempDir()
		dbs := make([]*engine.DB, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range dbs {
			dir := filepath.Join(root, fmt.Sprint(i))
			shareBlobsID(t, url, dir)
			wg.Go(func() {
				dbs[i], errs[i] = engine.Open(dir, &engine.Options{Metadata: url, NoSync: true})
			})
		}
		wg.Wait()
		closeAll := func() {
			for _, db := range dbs {
				if db != nil {
					db.Close()
				}
			}
		}
		for i, err := range errs {
			if err != nil {
				closeAll()
				t.Fatalf("round %d: server %d: Open: %v", round, i, err)
			}
		}
		ctx := t.Context()
		for i, db := range dbs {
			wg.Go(func() {
				th := fmt.Sprintf("s%d", i)
				l, err := db.AcquireWriter(ctx, th)
				if err == nil {
					cp, _ := peerCheckpoint(th, th+"-1", "")
					_, err = db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer})
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, db := range dbs {
			if errs[i] != nil {
				closeAll()
				t.Fatalf("round %d: server %d: %v", round, i, errs[i])
			}
			if th, err := db.Threads(ctx); err != nil || len(th) != n {
				t.Errorf("round %d: server %d sees threads %v, %v", round, i, th, err)
			}
		}
		closeAll()
	}
}
