package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/vfs/faultfs"
)

// Fault injection: every call that changes the store is run once to record
// the file operations it performs, then once per operation with that one
// operation failing (ENOSPC or EIO). A failure before the call's commit
// must return an error naming the fault and leave the store exactly as it
// was — threads, heads, checkpoints, reference counts, leases, the blob
// index and the pack files — and the same call must succeed once the fault
// is gone. A failed sync (of a file, of a directory, or the database
// commit, which stands for bbolt's write and fdatasync) poisons the open
// store: the same call then fails with ErrPoisoned without touching a
// file, reads still show the store as it was, and once the store is
// reopened it is exactly as it was (the packs of a failed commit removed
// by Open) and the call succeeds. A failure after the commit (removing a
// file the commit made garbage) cannot undo the commit: the store must
// then be consistent, the leftover file an orphan that check reports and
// gc or Open removes.
//
// Each operation fails with ENOSPC and with EIO under SBXDB_LONG=1; by
// default with one of them, alternating from one operation to the next.

type faultFixture struct {
	t       *testing.T
	dir     string
	ffs     *faultfs.FS
	db      *engine.DB
	ws      string
	version int
	writers map[string]*lease.Lease
	trees   map[string]map[string]fstree.Node // captured checkpoint → its tree
	head    string                            // the last capture on thread "t"
	// reopened counts the reopens after a poisoning fault.
	reopened int
}

func newFaultFixture(t *testing.T) *faultFixture {
	f := &faultFixture{t: t, dir: t.TempDir(), ffs: faultfs.New(vfs.OS),
		writers: map[string]*lease.Lease{}, trees: map[string]map[string]fstree.Node{}}
	// fsync on: with NoSync the store skips the syncs under test.
	db, err := engine.Open(filepath.Join(f.dir, "store"), &engine.Options{FS: f.ffs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.db.Close() })
	f.db = db
	f.ws = filepath.Join(f.dir, "ws")
	write(t, f.ws, "same.txt", []byte("never changes\n"), 0o644)
	write(t, f.ws, "bin/run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)
	if err := os.Symlink("same.txt", filepath.Join(f.ws, "link")); err != nil {
		t.Fatal(err)
	}
	return f
}

// reopen closes the store and opens it again, as its owner must after a
// failed sync.
func (f *faultFixture) reopen() {
	f.t.Helper()
	if err := f.db.Close(); err != nil {
		f.t.Fatal(err)
	}
	db, err := engine.Open(filepath.Join(f.dir, "store"), &engine.Options{FS: f.ffs})
	if err != nil {
		f.t.Fatal(err)
	}
	f.db = db
	f.reopened++
}

func (f *faultFixture) writer(thread string) lease.Writer {
	if l := f.writers[thread]; l != nil {
		return l.Writer
	}
	l, err := f.db.AcquireWriter(context.Background(), thread)
	if err != nil {
		f.t.Fatal(err)
	}
	f.writers[thread] = l
	return l.Writer
}

// edit changes the workspace: ten small files (one pack) and a large one (a
// file of its own) get new bytes; the rest stays and is deduplicated.
func (f *faultFixture) edit() {
	f.version++
	for i := range 10 {
		write(f.t, f.ws, fmt.Sprintf("src/f%d.txt", i), fmt.Appendf(nil, "version %d of file %d\n%s", f.version, i, strings.Repeat("text ", 100)), 0o644)
	}
	big := make([]byte, 1<<20+4096) // past the in-memory limit: streamed
	for i := range big {
		big[i] = byte(i*7 + f.version)
	}
	write(f.t, f.ws, "big.bin", big, 0o644)
	// Restored with a hole in the middle and one at the end (Seek,
	// Truncate).
	sparse := make([]byte, 256<<10)
	sparse[0], sparse[128<<10] = byte(f.version), 1
	write(f.t, f.ws, "sparse.bin", sparse, 0o644)
}

func (f *faultFixture) capture(thread string) (*chain.Checkpoint, error) {
	res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.writer(thread), Dir: f.ws})
	if err != nil {
		return nil, err
	}
	f.trees[res.Checkpoint.ID] = snapshot(f.t, f.ws)
	return res.Checkpoint, nil
}

func (f *faultFixture) mustCapture(thread string) *chain.Checkpoint {
	f.t.Helper()
	cp, err := f.capture(thread)
	if err != nil {
		f.t.Fatal(err)
	}
	return cp
}

// appendCopy appends to thread a checkpoint naming the files of src that
// keep selects.
func (f *faultFixture) appendCopy(thread string, src *chain.Checkpoint, keep func(chain.Entry) bool) error {
	ctx := context.Background()
	head, err := f.db.Head(ctx, thread)
	if err != nil {
		return err
	}
	cp := &chain.Checkpoint{ID: lease.NewToken(), ThreadID: thread, ParentID: head, CreatedAt: 1, Reason: chain.ReasonAutomatic}
	for _, e := range src.Files {
		if keep == nil || keep(e) {
			cp.Files = append(cp.Files, e)
		}
	}
	_, err = f.db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: f.writer(thread)})
	return err
}

// storeState is everything a failed call must leave as it was.
type storeState struct {
	Threads map[string][]*chain.Checkpoint
	Heads   map[string]string
	Refs    []chain.BlobRef
	Blobs   []cas.Info
	Writers map[string]lease.State
	Packs   []string
	Objects []sbxdb.ObjectInfo
	Records []sbxdb.ArtifactRecord // of thread "art"
}

func (f *faultFixture) state() storeState {
	f.t.Helper()
	ctx := context.Background()
	st := storeState{Threads: map[string][]*chain.Checkpoint{}, Heads: map[string]string{}}
	threads, err := f.db.Threads(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, th := range threads {
		if st.Threads[th], err = f.db.List(ctx, th); err != nil {
			f.t.Fatal(err)
		}
		if st.Heads[th], err = f.db.Head(ctx, th); err != nil {
			f.t.Fatal(err)
		}
	}
	if st.Refs, err = f.db.BlobReferences(ctx); err != nil {
		f.t.Fatal(err)
	}
	if st.Blobs, err = f.db.Blobs().List(ctx, ""); err != nil {
		f.t.Fatal(err)
	}
	if st.Writers, err = f.db.Writers(ctx); err != nil {
		f.t.Fatal(err)
	}
	st.Objects = objectsOf(f.t, f.db)
	if st.Records, err = f.db.ArtifactRecords().ListForThread(ctx, "art"); err != nil {
		f.t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(f.dir, "store", engine.BlobDir, "packs"))
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range ents {
		st.Packs = append(st.Packs, e.Name())
	}
	return st
}

// checkConsistent fails on any error finding of a full check.
func (f *faultFixture) checkConsistent(when string) {
	f.t.Helper()
	checkNoErrors(f.t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, when)
}

func (f *faultFixture) restoreEqual(id, out string) {
	f.t.Helper()
	restoreEqual(f.t, f.db, id, out, f.trees[id])
}

// faultCase is one call under test.
type faultCase struct {
	name string
	// prepare sets up the next run of the call (not under test).
	prepare func(f *faultFixture)
	// run is the call; each run after a prepare does the same steps.
	run func(f *faultFixture) error
	// done checks the effect of a run that succeeded or committed.
	done func(f *faultFixture)
	// undone checks, beyond the store's state, what a failed run must not
	// leave behind.
	undone func(f *faultFixture)
	// long runs the case only under SBXDB_LONG: its steps are covered by
	// another case's at the default scale.
	long bool
}

func faultCases() []faultCase {
	ctx := context.Background()
	var target string          // restore
	var targetInfo os.FileInfo // restore-into-empty-dir: the target before
	var doomed []string        // sweep: keys the run must delete
	var dst string             // fork: the destination thread
	restores := 0
	return []faultCase{
		{
			name:    "capture",
			prepare: func(f *faultFixture) { f.edit() },
			run: func(f *faultFixture) error {
				cp, err := f.capture("t")
				if err == nil {
					f.head = cp.ID
				}
				return err
			},
			done: func(f *faultFixture) {
				f.restoreEqual(f.head, filepath.Join(f.dir, "check-"+f.head))
			},
		},
		{
			// Into a target that does not exist: staged beside it.
			name: "restore",
			prepare: func(f *faultFixture) {
				restores++
				target = filepath.Join(f.dir, "restores", fmt.Sprint(restores), "out")
			},
			run: func(f *faultFixture) error {
				_, err := f.db.Restore(ctx, f.head, target, nil)
				return err
			},
			done: func(f *faultFixture) {
				if diff := fstree.Diff(f.trees[f.head], snapshot(f.t, target)); diff != nil {
					f.t.Fatalf("restored wrong:\n%s", strings.Join(diff, "\n"))
				}
			},
			undone: func(f *faultFixture) {
				// Nothing of the failed restore is left: not the target,
				// not its staging directory, not the parents it made.
				parent := filepath.Join(f.dir, "restores", fmt.Sprint(restores))
				if _, err := os.Lstat(parent); !os.IsNotExist(err) {
					f.t.Errorf("a failed restore left %s behind (%v)", parent, err)
				}
			},
		},
		{
			// Into an empty directory the caller made: staged inside it,
			// the entries moved up at the end; a failure among the moves
			// moves back those already moved.
			name: "restore-into-empty-dir",
			prepare: func(f *faultFixture) {
				restores++
				target = filepath.Join(f.dir, "restores", fmt.Sprint(restores), "out")
				if err := os.MkdirAll(target, 0o750); err != nil {
					f.t.Fatal(err)
				}
				os.Chmod(target, 0o750)
				st, err := os.Lstat(target)
				if err != nil {
					f.t.Fatal(err)
				}
				targetInfo = st
			},
			run: func(f *faultFixture) error {
				_, err := f.db.Restore(ctx, f.head, target, nil)
				return err
			},
			done: func(f *faultFixture) {
				if diff := fstree.Diff(f.trees[f.head], snapshot(f.t, target)); diff != nil {
					f.t.Fatalf("restored wrong:\n%s", strings.Join(diff, "\n"))
				}
				if st, err := os.Lstat(target); err != nil || !os.SameFile(st, targetInfo) || st.Mode() != targetInfo.Mode() {
					f.t.Errorf("the restore replaced or changed its target: %v (%v), was %v", st, err, targetInfo.Mode())
				}
			},
			undone: func(f *faultFixture) {
				// The caller's empty target is there as it was: the same
				// directory, its mode, nothing in it (no staging directory).
				parent := filepath.Join(f.dir, "restores", fmt.Sprint(restores))
				names, err := os.ReadDir(parent)
				st, serr := os.Lstat(target)
				switch {
				case err != nil || len(names) != 1 || names[0].Name() != "out":
					f.t.Errorf("after a failed restore %s holds %v (%v), want only the target", parent, names, err)
				case serr != nil || !os.SameFile(st, targetInfo) || st.Mode() != targetInfo.Mode():
					f.t.Errorf("after a failed restore the caller's empty target is %v (%v), want the same 0750 directory", st.Mode(), serr)
				default:
					if inside, _ := os.ReadDir(target); len(inside) != 0 {
						f.t.Errorf("after a failed restore the target holds %v", inside)
					}
				}
			},
		},
		{
			// A blob stored alone: the index commit without a checkpoint.
			name:    "put-artifact",
			prepare: func(f *faultFixture) { f.version++ },
			run: func(f *faultFixture) error {
				_, err := f.db.PutArtifact(ctx, engine.ArtifactInput{ArtifactID: fmt.Sprint("a", f.version), Name: "report.txt",
					MimeType: "text/plain", Data: strings.NewReader(fmt.Sprint("report ", f.version))})
				return err
			},
		},
		{
			// A plain object streamed into a blob file of its own (raw:
			// it does not compress), its
			// record committed with the blob's index entry; the earlier
			// version's blob loses its hold.
			// put-artifact fails the same file steps at the default scale.
			name:    "put-object",
			long:    true,
			prepare: func(f *faultFixture) { f.version++ },
			run: func(f *faultFixture) error {
				_, err := f.db.PutObject(ctx, "objects/big", bytes.NewReader(noiseBody(f.version)),
					sbxdb.PutObjectOptions{ContentType: "application/octet-stream", Size: -1})
				return err
			},
			done: func(f *faultFixture) {
				if got, _ := readObject(f.t, f.db, "objects/big"); !bytes.Equal(got, noiseBody(f.version)) {
					f.t.Error("objects/big does not read back as put")
				}
			},
		},
		{
			name:    "put-object-packed",
			prepare: func(f *faultFixture) { f.version++ },
			run: func(f *faultFixture) error {
				_, err := f.db.PutObject(ctx, "objects/small", strings.NewReader(fmt.Sprint("small ", f.version)),
					sbxdb.PutObjectOptions{CustomMetadata: map[string]string{"v": fmt.Sprint(f.version)}, Size: -1})
				return err
			},
		},
		{
			// Refreshing a blob's upload time: one index commit.
			name: "stat-object",
			prepare: func(f *faultFixture) {
				putObject(f.t, f.db, testkit.FileKeyOf([]byte("headed")), []byte("headed"), sbxdb.PutObjectOptions{})
			},
			run: func(f *faultFixture) error {
				_, err := f.db.StatObject(ctx, testkit.FileKeyOf([]byte("headed")))
				return err
			},
		},
		{
			name: "delete-object",
			prepare: func(f *faultFixture) {
				putObject(f.t, f.db, "objects/doomed", []byte("doomed"), sbxdb.PutObjectOptions{})
			},
			run: func(f *faultFixture) error { return f.db.DeleteObject(ctx, "objects/doomed") },
		},
		{
			name: "delete-blob",
			prepare: func(f *faultFixture) {
				putObject(f.t, f.db, testkit.FileKeyOf([]byte("unused")), []byte("unused"), sbxdb.PutObjectOptions{})
			},
			run: func(f *faultFixture) error { return f.db.DeleteObject(ctx, testkit.FileKeyOf([]byte("unused"))) },
		},
		{
			name:    "save-artifact-record",
			prepare: func(f *faultFixture) { f.version++ },
			run: func(f *faultFixture) error {
				r := sbxdb.ArtifactRecord{ArtifactID: "rec", RunID: "run", ThreadID: "art", Name: "n", MimeType: "text/plain",
					BlobKey: testkit.FileKeyOf([]byte("headed")), Size: 6, CreatedAt: int64(f.version)}
				return f.db.ArtifactRecords().Save(ctx, r)
			},
		},
		{
			name:    "append",
			prepare: func(f *faultFixture) { f.writer("a") },
			run: func(f *faultFixture) error {
				cp, err := f.db.Get(ctx, f.head)
				if err != nil {
					return err
				}
				return f.appendCopy("a", cp, nil)
			},
		},
		{
			name: "delete-head",
			prepare: func(f *faultFixture) {
				cp, _ := f.db.Get(ctx, f.head)
				for range 2 {
					if err := f.appendCopy("d", cp, nil); err != nil {
						f.t.Fatal(err)
					}
				}
			},
			run: func(f *faultFixture) error {
				head, err := f.db.Head(ctx, "d")
				if err != nil {
					return err
				}
				return f.db.DeleteHead(ctx, "d", head, f.writer("d"))
			},
		},
		{
			name: "delete-checkpoints",
			prepare: func(f *faultFixture) {
				cp, _ := f.db.Get(ctx, f.head)
				for range 3 {
					if err := f.appendCopy("r", cp, nil); err != nil {
						f.t.Fatal(err)
					}
				}
			},
			run: func(f *faultFixture) error {
				_, err := f.db.DeleteCheckpoints(ctx, "r", 1, f.writer("r"))
				return err
			},
		},
		{
			name: "fork",
			prepare: func(f *faultFixture) {
				dst = "fork-" + lease.NewToken()
				f.writer(dst)
			},
			run: func(f *faultFixture) error {
				_, err := f.db.Fork(ctx, chain.ForkInput{SourceThreadID: "t", SourceCheckpointID: f.head,
					DestinationThreadID: dst, DestinationCheckpointID: "fk-" + dst, Writer: f.writer(dst)})
				return err
			},
		},
		{
			// The blobs of a capture whose checkpoint is deleted are
			// swept: packed ones become dead space, the large one's file
			// is removed after the commit.
			name: "sweep",
			prepare: func(f *faultFixture) {
				// Only the blobs made here are unreferenced.
				if _, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil {
					f.t.Fatal(err)
				}
				f.edit()
				cp := f.mustCapture("s")
				if err := f.db.DeleteHead(ctx, "s", cp.ID, f.writer("s")); err != nil {
					f.t.Fatal(err)
				}
				doomed = cp.BlobKeys()
			},
			run: func(f *faultFixture) error {
				_, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true})
				return err
			},
			done: func(f *faultFixture) {
				for _, k := range doomed {
					if refs(f, k) == 0 {
						if _, err := f.db.Blobs().Head(ctx, k); !errors.Is(err, sbxdb.ErrBlobNotFound) {
							f.t.Errorf("swept blob %s: Head = %v, want not found", k, err)
						}
					}
				}
			},
		},
		{
			// A pack with live and dead blobs is rewritten: new pack
			// written and synced, index moved in one commit, old pack
			// removed after it.
			name: "repack",
			prepare: func(f *faultFixture) {
				// Only the pack made here has dead bytes.
				if _, err := f.db.Repack(ctx, cas.RepackOptions{Threshold: 0.01}); err != nil {
					f.t.Fatal(err)
				}
				f.edit()
				cp := f.mustCapture("p1")
				// Half of the new small files stay referenced from p2.
				if err := f.appendCopy("p2", cp, func(e chain.Entry) bool {
					return e.Kind == chain.KindFile && e.Size < 4096 && e.Path < "src/f5"
				}); err != nil {
					f.t.Fatal(err)
				}
				if err := f.db.DeleteHead(ctx, "p1", cp.ID, f.writer("p1")); err != nil {
					f.t.Fatal(err)
				}
				if _, err := f.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil {
					f.t.Fatal(err)
				}
			},
			run: func(f *faultFixture) error {
				_, err := f.db.Repack(ctx, cas.RepackOptions{Threshold: 0.01})
				return err
			},
			done: func(f *faultFixture) {
				u, err := f.db.Blobs().Usage(ctx)
				if err != nil || u.DeadBytes != 0 {
					f.t.Errorf("after repack: %+v, %v; want no dead bytes", u, err)
				}
			},
		},
	}
}

// noiseBody is a body past cas.MaxPacked that does not compress, so that
// it is written in few, large writes.
func noiseBody(seed int) []byte {
	b := make([]byte, cas.MaxPacked+4096)
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// refs returns key's reference count.
func refs(f *faultFixture, key string) int64 {
	all, err := f.db.BlobReferences(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range all {
		if r.Key == key {
			return r.References
		}
	}
	return 0
}

func TestFaultInjection(t *testing.T) {
	f := newFaultFixture(t)
	f.edit()
	f.head = f.mustCapture("t").ID
	errnos := []syscall.Errno{syscall.ENOSPC, syscall.EIO}
	bothErrnos := testkit.Long(t)
	failed := 0 // steps failed: picks the errno when only one runs
	covered := map[string][]string{}
	for _, c := range faultCases() {
		t.Run(c.name, func(t *testing.T) {
			if c.long && !testkit.Long(t) {
				t.Skip("runs under SBXDB_LONG=1")
			}
			f.t = t
			defer func() { f.t = nil }()
			// Record the steps of one run.
			c.prepare(f)
			f.ffs.Reset()
			if err := c.run(f); err != nil {
				t.Fatalf("run without faults: %v", err)
			}
			steps := f.ffs.Events()
			if c.done != nil {
				c.done(f)
			}
			if len(steps) == 0 {
				t.Fatal("the call performed no file operation")
			}
			for _, step := range steps {
				for i, errno := range errnos {
					if bothErrnos || i == failed%len(errnos) {
						f.failStep(c, step, errno, len(steps))
					}
				}
				failed++
				covered[c.name] = append(covered[c.name], fmt.Sprintf("%s#%d", step.Op, step.N))
			}
			f.checkConsistent("after every fault")
		})
	}
	// Reopened, the store is consistent and the last capture restores.
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open(filepath.Join(f.dir, "store"), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.db, f.t = db, t
	f.checkConsistent("reopened")
	if f.reopened == 0 {
		t.Error("no fault poisoned the store: the syncs and commits were not failed")
	}
	t.Logf("%d faults poisoned the store; each time, reopened, it was as before", f.reopened)
	f.restoreEqual(f.head, filepath.Join(f.dir, "final"))
	for _, c := range faultCases() {
		t.Logf("%s: %d steps failed in turn: %s", c.name, len(covered[c.name]), strings.Join(covered[c.name], " "))
	}
}

// failStep runs c once with step failing with errno and checks the outcome.
func (f *faultFixture) failStep(c faultCase, step faultfs.Event, errno syscall.Errno, recorded int) {
	t := f.t
	c.prepare(f)
	before := f.state()
	f.ffs.Reset()
	f.ffs.FailNth(step.Op, step.N, errno)
	err := c.run(f)
	events := f.ffs.Events()
	fired := f.ffs.Fired()
	f.ffs.Reset()
	if len(fired) == 0 {
		t.Errorf("%v: this run did not perform the step (it did %d operations, the recorded run %d)", step, len(events), recorded)
		return
	}
	poisons := step.Op == faultfs.Sync || step.Op == faultfs.SyncDir || step.Op == faultfs.Commit
	if committed(events, fired[0]) {
		// The commit stands; the failed cleanup leaves garbage.
		if err != nil && !errors.Is(err, errno) {
			t.Errorf("%v after the commit: error %v does not match %v", step, err, errno)
		}
		if poisons {
			f.requirePoisoned(c, step)
			f.reopen()
		}
		f.checkConsistent(fmt.Sprintf("%v after the commit", step))
		if c.done != nil {
			c.done(f)
		}
		return
	}
	if err == nil {
		t.Errorf("%v failed with %v, and the call succeeded", step, errno)
		return
	}
	if !errors.Is(err, errno) {
		t.Errorf("%v: the call's error %q does not match the fault %v", step, err, errno)
	}
	after := f.state()
	if step.Op == faultfs.Commit {
		// A failed commit may still reach the file (a failed fsync), so
		// the batch keeps its packs; nothing names them, and Open removes
		// them (checked once reopened, below).
		for _, p := range before.Packs {
			if !slices.Contains(after.Packs, p) {
				t.Errorf("%v (%v) removed pack %s", step, errno, p)
			}
		}
		after.Packs = before.Packs
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("%v (%v) changed the store (-before +after):\n%s", step, errno, diff)
	}
	if c.undone != nil {
		c.undone(f)
	}
	if poisons {
		f.requirePoisoned(c, step)
		f.reopen()
		// Open removed what the failed call left (a failed commit's
		// packs): the store is exactly as before.
		if diff := cmp.Diff(before, f.state()); diff != "" {
			t.Errorf("%v (%v), reopened: the store changed (-before +after):\n%s", step, errno, diff)
		}
	}
	// Once the fault is gone the same call succeeds.
	if err := c.run(f); err != nil {
		t.Fatalf("after %v: the retry failed: %v", step, err)
	}
	if c.done != nil {
		c.done(f)
	}
}

// requirePoisoned runs c on a store that a failed sync poisoned: it must
// fail with ErrPoisoned before any file operation.
func (f *faultFixture) requirePoisoned(c faultCase, step faultfs.Event) {
	f.t.Helper()
	f.ffs.Reset()
	err := c.run(f)
	if !errors.Is(err, sbxdb.ErrPoisoned) {
		f.t.Errorf("after %v failed, %s on the same handle: %v; want ErrPoisoned", step, c.name, err)
	}
	if ev := f.ffs.Events(); len(ev) != 0 {
		f.t.Errorf("after %v failed, the refused %s still did %v", step, c.name, ev)
	}
	f.ffs.Reset()
}

// committed reports whether a commit ran before the failed step.
func committed(events []faultfs.Event, failed faultfs.Event) bool {
	for _, e := range events {
		if e == failed {
			return false
		}
		if e.Op == faultfs.Commit {
			return true
		}
	}
	return false
}
