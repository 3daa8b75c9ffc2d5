package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
	"github.com/sbxdb/sbxdb/internal/testkit/s3test"
	"github.com/sbxdb/sbxdb/lease"
)

// These tests run several `sbxdb serve` processes on one metadata database
// and one S3 bucket (--blobs, a versitygw started for the test): unlike
// servers_test.go's, the checkpoints name real files whose bytes are in
// the bucket, so what one server captures the other restores, byte for
// byte, whatever the other servers, the sweep or the S3 server do
// meanwhile.

// s3Peers is servers sharing one PostgreSQL database and one bucket.
type s3Peers struct {
	s3    *s3test.Server
	url   string // the metadata database
	blobs string // s3://BUCKET/PREFIX
	peers []*peerServer
}

// startS3Peers starts n servers on a fresh metadata database and a fresh
// bucket of a versitygw started for the test. The servers inherit the
// AWS_* variables s3test.Env sets.
func startS3Peers(t *testing.T, n int) *s3Peers {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := s3test.Start(t)
	s3test.Env(t, srv)
	sp := &s3Peers{s3: srv, url: pgtest.URL(t), blobs: "s3://" + s3test.Bucket() + "/blobs"}
	sockDir, err := os.MkdirTemp("", "sbxs3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	root := t.TempDir()
	for i := range n {
		name := string(rune('A' + i))
		dir, sock := filepath.Join(root, name), filepath.Join(sockDir, name+".sock")
		p := &peerServer{name: name, dir: dir, sock: sock,
			args: []string{"--db", dir, "--metadata", sp.url, "--blobs", sp.blobs, "--listen", "unix:" + sock}}
		p.start(t)
		sp.peers = append(sp.peers, p)
	}
	return sp
}

// bigFileSize is the size of the large files of the trees: past the
// 4 MiB under which a blob goes into a pack, so it is an object of its own.
const bigFileSize = 5<<20 + 12345

// writeS3Tree writes a tree under dir drawn from seed: small files in
// a few directories, some of them the same for every seed (so that
// captures share blobs), an executable, a symlink, an empty directory and,
// with big, a file larger than 4 MiB. It returns the tree's digest.
func writeS3Tree(t *testing.T, dir string, seed uint64, files int, big bool) map[string]string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	shared := rand.New(rand.NewPCG(1, 1))
	write := func(rel string, b []byte, mode fs.FileMode) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	fill := func(r *rand.Rand, n int) []byte {
		b := make([]byte, n)
		for i := 0; i < n; i += 8 {
			v := r.Uint64()
			for j := 0; j < 8 && i+j < n; j++ {
				b[i+j] = byte(v >> (8 * j))
			}
		}
		return b
	}
	for i := range files {
		r := rng
		if i%3 == 0 {
			r = shared // the same bytes in every tree
		}
		write(fmt.Sprintf("src/d%d/f%03d.txt", i%5, i), fill(r, 1+r.IntN(20_000)), 0o644)
	}
	write("bin/run.sh", append([]byte("#!/bin/sh\necho "), fill(rng, 64)...), 0o755)
	write("empty.txt", nil, 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "empty-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src/d0", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if big {
		write("data/big.bin", fill(rng, bigFileSize), 0o644)
	}
	return digestTree(t, dir)
}

// digestTree describes every entry under root: a directory "/", a
// symlink "-> TARGET", a file its mode and the sha256 of its bytes.
func digestTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			out[filepath.ToSlash(rel)] = "/"
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = "-> " + target
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = fmt.Sprintf("%v %d %x", mode, len(b), sha256.Sum256(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// diffDigests returns the differences between two digests, at most a few.
func diffDigests(got, want map[string]string) []string {
	var out []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			out = append(out, p+" missing")
		} else if g != w {
			out = append(out, fmt.Sprintf("%s is %s, want %s", p, g, w))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("%s is %s, want nothing", p, g))
		}
	}
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return out
}

// restoreCheck restores checkpoint id through p into a fresh directory
// under scratch and returns an error unless the tree is want.
func restoreCheck(ctx context.Context, t *testing.T, p *peerServer, id, scratch string, want map[string]string) error {
	t.Helper()
	dir, err := os.MkdirTemp(scratch, "restore")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "out")
	if _, err := p.c.Restore(ctx, client.RestoreRequest{CheckpointID: id, Dir: out}); err != nil {
		return fmt.Errorf("restore of %s through %s: %w", id, p.name, err)
	}
	if d := diffDigests(digestTree(t, out), want); len(d) > 0 {
		return fmt.Errorf("restore of %s through %s differs: %s", id, p.name, strings.Join(d, "; "))
	}
	return nil
}

// checkClean runs check --verify-blobs through every server given: every
// blob a checkpoint names is in the bucket, intact.
func checkClean(t *testing.T, peers ...*peerServer) {
	t.Helper()
	for _, p := range peers {
		rep, err := p.c.Check(t.Context(), sbxdb.CheckStoreOptions{VerifyBlobs: true})
		if err != nil {
			t.Errorf("server %s: check --verify-blobs: %v", p.name, err)
		} else if !rep.Clean() {
			t.Errorf("server %s: check --verify-blobs: %+v", p.name, rep)
		}
	}
}

// capture captures dir through p onto the writer's thread as checkpoint id.
func capture(ctx context.Context, p *peerServer, w lease.Writer, dir, id string) (*chain.Checkpoint, error) {
	res, err := p.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir, ID: id})
	if err != nil {
		return nil, err
	}
	if res.Checkpoint == nil || res.Checkpoint.ID != id {
		return nil, fmt.Errorf("capture %s through %s returned checkpoint %v", id, p.name, res.Checkpoint)
	}
	return res.Checkpoint, nil
}

// TestServersS3CaptureRestore: two servers on one PostgreSQL database and
// one bucket capture trees (small files, shared ones, a file past 4 MiB),
// each onto threads through the Go client and the CLI, and every capture
// restores through the other server byte for byte; check --verify-blobs
// is clean on both.
func TestServersS3CaptureRestore(t *testing.T) {
	sp := startS3Peers(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root := t.TempDir()
	rounds := testkit.Scale(t, 2, 4)
	type captured struct {
		id   string
		by   int
		want map[string]string
	}
	var all []captured
	for i, p := range sp.peers {
		thread := "t" + p.name
		l, err := p.c.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		for r := range rounds {
			ws := filepath.Join(root, fmt.Sprintf("ws-%s-%d", p.name, r))
			want := writeS3Tree(t, ws, uint64(100*i+r), 150, r%2 == 0)
			id := fmt.Sprintf("%s-%d", thread, r)
			if _, err := capture(ctx, p, l.Writer, ws, id); err != nil {
				t.Fatal(err)
			}
			all = append(all, captured{id, i, want})
		}
		if err := p.c.ReleaseWriter(ctx, l.Writer); err != nil {
			t.Fatal(err)
		}
	}
	// The CLI, through --server, onto a thread of its own.
	for i, p := range sp.peers {
		ws := filepath.Join(root, "ws-cli-"+p.name)
		want := writeS3Tree(t, ws, uint64(1000+i), 40, true)
		id := "cli-" + p.name
		ok(t, "capture", "--server", "unix:"+p.sock, "--thread", "cli"+p.name, "--id", id, ws)
		all = append(all, captured{id, i, want})
	}
	for _, c := range all {
		other := sp.peers[1-c.by]
		if err := restoreCheck(ctx, t, other, c.id, root, c.want); err != nil {
			t.Error(err)
		}
		// And through the CLI of the other server.
		out := filepath.Join(root, "cli-restore-"+c.id)
		ok(t, "restore", "--server", "unix:"+other.sock, c.id, out)
		if d := diffDigests(digestTree(t, out), c.want); len(d) > 0 {
			t.Errorf("sbxdb restore of %s through %s differs: %s", c.id, other.name, strings.Join(d, "; "))
		}
		os.RemoveAll(out)
	}
	checkClean(t, sp.peers...)
}

// TestServersS3GCWhileCapturing: server B captures two trees in turn onto
// one thread, taking its lease for each capture (each round's blobs
// unreferenced once retention deletes the checkpoint before, the large
// file included), restoring the new head through both servers after each
// capture, while server A runs gc (retention keeping the head, then
// an immediate sweep) in a loop: a blob B's capture found in the index
// may be swept before B commits. Nothing a checkpoint names is ever
// missing, and every sweep and capture succeeds.
func TestServersS3GCWhileCapturing(t *testing.T) {
	sp := startS3Peers(t, 2)
	a, b := sp.peers[0], sp.peers[1]
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root := t.TempDir()
	run := testkit.Scale(t, 10*time.Second, 25*time.Second)
	var trees [2]string
	var wants [2]map[string]string
	for i := range trees {
		trees[i] = filepath.Join(root, fmt.Sprintf("ws%d", i))
		wants[i] = writeS3Tree(t, trees[i], uint64(10+i), 60, true)
	}
	const thread = "loop"

	var stop atomic.Bool
	var gcs, swept atomic.Int64
	var wg sync.WaitGroup
	var gcErr error
	wg.Go(func() {
		for !stop.Load() && ctx.Err() == nil {
			res, err := a.c.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true})
			if err != nil {
				gcErr = fmt.Errorf("gc through A after %d runs: %w", gcs.Load(), err)
				return
			}
			gcs.Add(1)
			swept.Add(int64(len(res.Sweep.Deleted)))
		}
	})
	start := time.Now()
	rounds, conflicts := 0, 0
	var failures []error
	for time.Since(start) < run && len(failures) == 0 && ctx.Err() == nil {
		i := rounds % 2
		id := fmt.Sprintf("loop-%04d", rounds)
		rounds++
		// The lease is held for the capture alone: retention skips a
		// thread whose lease is held, and holds it while it deletes.
		l, err := b.c.AcquireWriter(ctx, thread)
		for errors.Is(err, chain.ErrWriterConflict) && ctx.Err() == nil {
			conflicts++
			time.Sleep(time.Millisecond) // back off, as a host would
			l, err = b.c.AcquireWriter(ctx, thread)
		}
		if err == nil {
			_, err = capture(ctx, b, l.Writer, trees[i], id)
			if rerr := b.c.ReleaseWriter(ctx, l.Writer); err == nil {
				err = rerr
			}
		}
		if err != nil {
			failures = append(failures, fmt.Errorf("round %d: %w", rounds, err))
			break
		}
		for _, p := range sp.peers {
			if err := restoreCheck(ctx, t, p, id, root, wants[i]); err != nil {
				failures = append(failures, fmt.Errorf("round %d: %w", rounds, err))
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d captures through B (%d WRITER_CONFLICT with retention), %d gc runs through A sweeping %d blobs, in %v",
		rounds, conflicts, gcs.Load(), swept.Load(), time.Since(start).Round(time.Millisecond))
	for _, err := range failures {
		t.Error(err)
	}
	if gcErr != nil {
		t.Error(gcErr)
	}
	if gcs.Load() == 0 || swept.Load() == 0 {
		t.Errorf("%d gc runs swept %d blobs: the sweep never met the captures", gcs.Load(), swept.Load())
	}
	if t.Failed() {
		return
	}
	checkClean(t, sp.peers...)
}

// s3Writer captures a tree of its own, one new file per step, onto a
// thread of its own, keeping what each acknowledged checkpoint holds.
type s3Writer struct {
	thread string
	w      lease.Writer
	ws     string
	n      int
	mu     sync.Mutex
	acked  map[string]map[string]string // checkpoint id -> its tree's digest
	failed map[string]error             // checkpoint id -> the capture's error
}

// step writes the next file and captures the tree through p as the
// checkpoint thread-n.
func (sw *s3Writer) step(ctx context.Context, t *testing.T, p *peerServer) (string, error) {
	sw.n++
	id := fmt.Sprintf("%s-%04d", sw.thread, sw.n)
	// Bytes of this writer's own: a capture of another writer never
	// stores them first.
	h := sha256.Sum256([]byte(sw.thread))
	rng := rand.New(rand.NewPCG(uint64(sw.n), binary.LittleEndian.Uint64(h[:])))
	b := make([]byte, 1000+rng.IntN(30_000))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	p0 := filepath.Join(sw.ws, "steps", fmt.Sprintf("s%04d.bin", sw.n))
	if err := os.WriteFile(p0, b, 0o644); err != nil {
		return id, err
	}
	want := digestTree(t, sw.ws)
	_, err := capture(ctx, p, sw.w, sw.ws, id)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if err != nil {
		sw.failed[id] = err
		return id, err
	}
	sw.acked[id] = want
	return id, nil
}

// newS3Writers makes n writers, each with its workspace (the shared big
// file included) under root and the lease of its thread taken through p.
func newS3Writers(ctx context.Context, t *testing.T, n int, root, prefix string, p *peerServer) []*s3Writer {
	t.Helper()
	ws := make([]*s3Writer, n)
	for i := range ws {
		thread := fmt.Sprintf("%s%02d", prefix, i)
		l, err := p.c.AcquireWriter(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, thread)
		writeS3Tree(t, dir, 77, 20, i == 0)
		if err := os.MkdirAll(filepath.Join(dir, "steps"), 0o755); err != nil {
			t.Fatal(err)
		}
		ws[i] = &s3Writer{thread: thread, w: l.Writer, ws: dir, acked: map[string]map[string]string{}, failed: map[string]error{}}
	}
	return ws
}

// checkS3Writers checks, through every server given, that every
// acknowledged capture restores as captured, that nothing refused is
// stored, and that each thread's head restores.
func checkS3Writers(ctx context.Context, t *testing.T, ws []*s3Writer, root string, peers ...*peerServer) {
	t.Helper()
	for _, sw := range ws {
		for _, p := range peers {
			list, err := p.c.List(ctx, sw.thread)
			if err != nil {
				t.Fatalf("server %s: List(%s): %v", p.name, sw.thread, err)
			}
			stored := map[string]bool{}
			for _, cp := range list {
				stored[cp.ID] = true
			}
			for id, want := range sw.acked {
				if !stored[id] {
					t.Errorf("server %s: acknowledged capture %s is not stored", p.name, id)
					continue
				}
				if err := restoreCheck(ctx, t, p, id, root, want); err != nil {
					t.Error(err)
				}
			}
			for id, ferr := range sw.failed {
				var ce *client.Error
				if stored[id] && errors.As(ferr, &ce) && !strings.Contains(ce.Message, "may have been committed") {
					t.Errorf("server %s: capture %s, refused with %v, is stored", p.name, id, ferr)
				}
			}
		}
	}
}

// TestServersS3Kill: writers capture through servers A and B in turn; A is
// killed with SIGKILL in full flight. Every capture either acknowledged
// restores through B as it was captured, B goes on capturing, and A,
// restarted on its directory, restores everything too; check
// --verify-blobs is clean.
func TestServersS3Kill(t *testing.T) {
	sp := startS3Peers(t, 2)
	a, b := sp.peers[0], sp.peers[1]
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root := t.TempDir()
	writers := testkit.Scale(t, 4, 8)
	after := testkit.Scale(t, 5, 15) // captures per writer through B after the kill
	ws := newS3Writers(ctx, t, writers, root, "k", a)

	var killed atomic.Bool
	var ready, wg sync.WaitGroup
	ready.Add(writers)
	var errs sync.Map
	var lost atomic.Int64
	for i, sw := range ws {
		wg.Go(func() {
			isReady := false
			defer func() {
				if !isReady {
					ready.Done()
				}
			}()
			for step, n := 0, 0; n < after; step++ {
				p := a
				if step%2 == 1 || killed.Load() {
					p = b
				}
				wasKilled := killed.Load()
				id, err := sw.step(ctx, t, p)
				switch {
				case err == nil:
					if wasKilled {
						n++
					}
				case p == a && (errors.Is(err, client.ErrUnreachable) || errors.Is(err, client.ErrUnavailable)):
					lost.Add(1) // A went away under it
				default:
					errs.Store(fmt.Sprintf("writer %d: capture %s through %s", i, id, p.name), err)
					return
				}
				if step == 3 && !isReady {
					isReady = true
					ready.Done()
				}
			}
		})
	}
	ready.Wait()
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
	acked := 0
	for _, sw := range ws {
		acked += len(sw.acked)
	}
	t.Logf("%d captures acknowledged, %d without an answer when A was killed", acked, lost.Load())
	checkS3Writers(ctx, t, ws, root, b)
	a.start(t)
	checkS3Writers(ctx, t, ws, root, a)
	// A captures again, B restoring it.
	id, err := ws[0].step(ctx, t, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := restoreCheck(ctx, t, b, id, root, ws[0].acked[id]); err != nil {
		t.Error(err)
	}
	checkClean(t, a, b)
}

// TestServersS3Outage: the S3 server is stopped while writers capture
// through two servers, then started again. A capture that fails meanwhile
// fails with 503 SBXDB_UNAVAILABLE saying object storage is unavailable;
// no checkpoint is committed that names a blob not in the bucket (every
// head restores, check --verify-blobs is clean); once S3 is back,
// captures succeed without restarting sbxdb.
func TestServersS3Outage(t *testing.T) {
	sp := startS3Peers(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root := t.TempDir()
	writers := 4
	after := testkit.Scale(t, 5, 8) // captures per writer once S3 is back
	outages := testkit.Scale(t, 1, 2)
	ws := newS3Writers(ctx, t, writers, root, "o", sp.peers[0])

	const (
		running = iota
		stopped
		restarted
	)
	var phase atomic.Int32
	var outagesBegun atomic.Int32 // a step that saw it change overlapped an outage
	var mu sync.Mutex
	seen := map[string]int{} // "status code" of the failures during the outage
	var examples []string
	nBad := 0
	bad := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if nBad++; nBad <= 5 {
			t.Errorf(format, args...)
		}
	}
	var okDuring atomic.Int64
	var progress atomic.Int64
	var wg sync.WaitGroup
	var stop atomic.Bool
	for i, sw := range ws {
		wg.Go(func() {
			for step := 0; !stop.Load() && ctx.Err() == nil; step++ {
				p := sp.peers[step%2]
				began, outage := phase.Load(), outagesBegun.Load()
				id, err := sw.step(ctx, t, p)
				overlapped := outagesBegun.Load() != outage
				if err == nil {
					if began == stopped {
						okDuring.Add(1)
					}
					progress.Add(1)
					continue
				}
				var ce *client.Error
				switch {
				case !errors.As(err, &ce):
					bad("writer %d: capture %s through %s: no answer: %v", i, id, p.name, err)
				case began == restarted && !overlapped:
					bad("writer %d: capture %s through %s after S3 came back: %v", i, id, p.name, err)
				case began == running && phase.Load() == running && !overlapped:
					bad("writer %d: capture %s through %s before the outage: %v", i, id, p.name, err)
				default:
					if ce.Status != 503 || ce.Code != "SBXDB_UNAVAILABLE" || !strings.Contains(ce.Message, "object storage unavailable") {
						bad("writer %d: capture %s through %s during the outage: status %d, code %s: %v", i, id, p.name, ce.Status, ce.Code, err)
					}
					mu.Lock()
					seen[fmt.Sprintf("%d %s", ce.Status, ce.Code)]++
					if len(examples) < 2 {
						examples = append(examples, ce.Message)
					}
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond) // back off, as a host would
			}
		})
	}
	waitProgress := func(n int64) {
		for target := progress.Load() + n; progress.Load() < target && ctx.Err() == nil; {
			time.Sleep(5 * time.Millisecond)
		}
	}
	var outageFailures int
	for range outages {
		waitProgress(int64(writers))
		phase.Store(stopped)
		outagesBegun.Add(1)
		sp.s3.Stop()
		// Long enough for every writer to try through both servers.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			mu.Lock()
			n := 0
			for _, c := range seen {
				n += c
			}
			mu.Unlock()
			if n >= outageFailures+2*writers {
				outageFailures = n
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		sp.s3.Start()
		phase.Store(restarted)
		waitProgress(int64(writers * after))
		phase.Store(running)
	}
	stop.Store(true)
	wg.Wait()
	// A capture begun while S3 was stopped may succeed: its requests are
	// retried, and S3 may be back by then.
	t.Logf("failures while S3 was stopped: %v, for example %q; %d captures begun while it was stopped succeeded", seen, examples, okDuring.Load())
	if nBad > 5 {
		t.Errorf("and %d more failures like those", nBad-5)
	}
	if len(seen) == 0 {
		t.Errorf("no capture failed while S3 was stopped")
	}
	checkS3Writers(ctx, t, ws, root, sp.peers...)
	checkClean(t, sp.peers...)
}

// TestServersS3OutageMaintenance: with the S3 server stopped, what reads
// or maintains the bucket through a server fails with 503
// SBXDB_UNAVAILABLE, or succeeds, and never takes the outage for damage: a
// restore through a server that has cached nothing does not call a blob
// missing, check --verify-blobs does not report blobs missing, check
// --repair drops nothing from the index, gc deletes nothing it should
// keep (its retention, which needs no bucket, may run before its sweep
// fails). Once S3 is back every checkpoint restores through every server and
// check --verify-blobs is clean.
func TestServersS3OutageMaintenance(t *testing.T) {
	sp := startS3Peers(t, 3)
	a, b, c := sp.peers[0], sp.peers[1], sp.peers[2]
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root := t.TempDir()
	// Captures through A; nothing is read through C before the outage:
	// it has nothing cached. (A server does not start while its bucket
	// cannot be reached.)
	l, err := a.c.AcquireWriter(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	wants := map[string]map[string]string{}
	for r := range 3 {
		ws := filepath.Join(root, fmt.Sprintf("ws%d", r))
		wants[fmt.Sprintf("m-%d", r)] = writeS3Tree(t, ws, uint64(300+r), 80, true)
		if _, err := capture(ctx, a, l.Writer, ws, fmt.Sprintf("m-%d", r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.c.ReleaseWriter(ctx, l.Writer); err != nil {
		t.Fatal(err)
	}

	sp.s3.Stop()
	// answer judges a request's failure during the outage: a 503
	// SBXDB_UNAVAILABLE saying object storage is unavailable, nothing
	// else.
	answer := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Logf("%s during the outage: succeeded", what)
			return
		}
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 503 || ce.Code != "SBXDB_UNAVAILABLE" || !strings.Contains(ce.Message, "object storage unavailable") {
			t.Errorf("%s during the outage: %v, want 503 SBXDB_UNAVAILABLE, object storage unavailable", what, err)
			return
		}
		t.Logf("%s during the outage: %d %s: %.200s", what, ce.Status, ce.Code, ce.Message)
	}
	for id, want := range wants {
		for _, p := range []*peerServer{c, b} {
			err := restoreCheck(ctx, t, p, id, root, want)
			var ce *client.Error
			if err != nil && !errors.As(err, &ce) {
				t.Errorf("restore of %s through %s during the outage: %v", id, p.name, err) // a differing tree
				continue
			}
			answer(fmt.Sprintf("restore of %s through %s", id, p.name), err)
		}
	}
	rep, err := c.c.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true})
	if err == nil && !rep.Clean() {
		t.Errorf("check --verify-blobs during the outage reports damage: %+v", rep)
	} else {
		answer("check --verify-blobs", err)
	}
	rep, err = c.c.Check(ctx, sbxdb.CheckStoreOptions{VerifyBlobs: true, Repair: true})
	if err == nil && (len(rep.Dropped) > 0 || !rep.Clean()) {
		t.Errorf("check --verify-blobs --repair during the outage: dropped %d blobs: %+v", len(rep.Dropped), rep)
	} else {
		answer("check --verify-blobs --repair", err)
	}
	res, err := b.c.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true})
	if err == nil {
		t.Logf("gc during the outage: retention %v, swept %d", res.Retention.Deleted, len(res.Sweep.Deleted))
	} else {
		answer("gc", err)
	}
	// Retention needs no bucket: it may have run before the sweep
	// failed, the error answer saying nothing of it.
	list, err := b.c.List(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, cp := range list {
		kept[cp.ID] = true
	}
	for id := range wants {
		if !kept[id] {
			t.Logf("gc during the outage deleted checkpoint %s", id)
			delete(wants, id)
		}
	}
	if len(wants) == 0 {
		t.Fatal("gc during the outage deleted the head")
	}

	sp.s3.Start()
	for id, want := range wants {
		for _, p := range sp.peers {
			if err := restoreCheck(ctx, t, p, id, root, want); err != nil {
				t.Errorf("once S3 is back: %v", err)
			}
		}
	}
	checkClean(t, sp.peers...)
}

// TestServersS3KillDuringGC: server A runs gc (retention, an immediate
// sweep) in a loop while B captures two trees in turn; A is killed with
// SIGKILL in the middle of it. The sweep lock A held in the database goes
// with it: gc through B runs, B goes on capturing, every head restores
// through B and, once A is restarted, through A; check --verify-blobs is
// clean (what A's sweep left in the bucket is an orphan, not damage). The
// thread's lease, which A's retention may have held when it was killed,
// is free again within seconds.
func TestServersS3KillDuringGC(t *testing.T) {
	sp := startS3Peers(t, 2)
	a, b := sp.peers[0], sp.peers[1]
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root := t.TempDir()
	kills := testkit.Scale(t, 2, 4)
	var trees [2]string
	var wants [2]map[string]string
	for i := range trees {
		trees[i] = filepath.Join(root, fmt.Sprintf("ws%d", i))
		wants[i] = writeS3Tree(t, trees[i], uint64(20+i), 60, true)
	}
	const thread = "kgc"
	// leaseWait bounds the wait for the thread's lease: the lease gc's
	// retention takes lives 10 s (engine's retentionLease), its work
	// milliseconds.
	const leaseWait = 20 * time.Second
	rounds := 0
	// round captures the next tree through B, taking the lease for the
	// capture alone, and restores it through every server given.
	round := func(peers ...*peerServer) error {
		i := rounds % 2
		id := fmt.Sprintf("kgc-%04d", rounds)
		rounds++
		l, err := b.c.AcquireWriter(ctx, thread)
		for start := time.Now(); errors.Is(err, chain.ErrWriterConflict) && ctx.Err() == nil; {
			if time.Since(start) > leaseWait {
				// The lease a gc of A took for its retention outlived A by
				// more than its duration: the thread took no capture
				// meanwhile. TakeOverDead would take it here, A's process
				// being on this host, but not from a server on another
				// machine, which the plain AcquireWriter stands for. Free
				// it as an operator would.
				t.Errorf("capture %s: thread %s still held %v after A was killed: %v", id, thread, leaseWait, err)
				if _, err := b.c.Unlock(ctx, thread); err != nil {
					return err
				}
			}
			time.Sleep(time.Millisecond) // back off, as a host would
			l, err = b.c.AcquireWriter(ctx, thread)
		}
		if err != nil {
			return err
		}
		_, err = capture(ctx, b, l.Writer, trees[i], id)
		if rerr := b.c.ReleaseWriter(ctx, l.Writer); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
		for _, p := range peers {
			if err := restoreCheck(ctx, t, p, id, root, wants[i]); err != nil {
				return err
			}
		}
		return nil
	}
	for k := range kills {
		var gcs atomic.Int64
		var stop atomic.Bool
		done := make(chan error, 1)
		go func() {
			for !stop.Load() {
				if _, err := a.c.GC(ctx, sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true}); err != nil {
					done <- err // killed under it, or a failure
					return
				}
				gcs.Add(1)
			}
			done <- nil
		}()
		// Kill A once it has swept a few times, its sweeps interleaved
		// with captures, somewhere in a gc.
		for n := 0; gcs.Load() < 3 || n < 2; n++ {
			if err := round(b); err != nil {
				t.Fatalf("kill %d: %v", k, err)
			}
		}
		// Every other kill lands while A's retention holds the thread's
		// lease, if it can be seen held within 2 s: B captures no more
		// meanwhile, so only A's gc takes it.
		held := false
		if k%2 == 1 {
			// A new head: A's next retention deletes the one before.
			if err := round(); err != nil {
				t.Fatalf("kill %d: %v", k, err)
			}
			for start := time.Now(); !held && time.Since(start) < 2*time.Second; {
				st, err := b.c.Writers(ctx)
				if err != nil {
					t.Fatal(err)
				}
				held = st[thread].Live(time.Now().UnixMilli())
			}
		}
		t.Logf("kill %d: %d gc runs, %d captures; the lease held by A's retention: %v", k, gcs.Load(), rounds, held)
		a.kill(t)
		stop.Store(true)
		if err := <-done; err != nil && !errors.Is(err, client.ErrUnreachable) && !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("kill %d: gc through A: %v", k, err)
		}
		// B sweeps (A's sweep lock is gone with A) and captures on.
		killedAt := time.Now()
		gctx, gcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := b.c.GC(gctx, sbxdb.GCOptions{Retain: true, Keep: 1, Immediate: true})
		gcancel()
		if err != nil {
			t.Fatalf("kill %d: gc through B after A was killed: %v", k, err)
		}
		t.Logf("kill %d: gc through B %v after A was killed", k, time.Since(killedAt).Round(time.Millisecond))
		if err := round(b); err != nil {
			t.Fatalf("kill %d: after A was killed: %v", k, err)
		}
		t.Logf("kill %d: capture through B %v after", k, time.Since(killedAt).Round(time.Millisecond))
		a.start(t)
		t.Logf("kill %d: A restarted %v after", k, time.Since(killedAt).Round(time.Millisecond))
		if err := round(b, a); err != nil {
			t.Fatalf("kill %d: after A restarted: %v", k, err)
		}
	}
	t.Logf("%d captures through B, A killed %d times while gc ran", rounds, kills)
	checkClean(t, a, b)
}
