//go:build linux

package engine_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/fstree"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"golang.org/x/sys/unix"
)

// Tests of captures of a workspace that changes under them: files and
// directories renamed to symlinks that lead out of the tree, files
// rewritten while read, files and directories removed between the walk and
// the read, a FIFO swapped in, a cancellation in the middle of a large file.

// hostileTree is a workspace beside a directory outside it that holds a
// secret, and symlinks to that secret waiting (outside the workspace, on
// the same file system) to be exchanged with a workspace file and
// directory.
type hostileTree struct {
	ws, outside  string
	secret       []byte // the bytes of every file outside
	fileLink     string // a symlink to outside/f, to exchange with ws/file
	dirLink      string // a symlink to outside, to exchange with ws/dir
	insideFile   []byte
	insideDirOne []byte
}

func newHostileTree(t *testing.T, base string) *hostileTree {
	t.Helper()
	h := &hostileTree{
		ws:           filepath.Join(base, "ws"),
		outside:      filepath.Join(base, "outside"),
		secret:       []byte("OUTSIDE-SECRET-" + randomHex(t)),
		insideFile:   []byte("inside file\n"),
		insideDirOne: []byte("inside dir file\n"),
	}
	// outside/f and outside/one have the names of ws/dir's children, and
	// ws/file's target holds the secret too.
	write(t, h.outside, "f", h.secret, 0o644)
	write(t, h.outside, "one", h.secret, 0o644)
	write(t, h.outside, "big", bytes.Repeat(h.secret, (2<<20)/len(h.secret)+1), 0o644)
	write(t, h.ws, "file", h.insideFile, 0o644)
	write(t, h.ws, "dir/one", h.insideDirOne, 0o644)
	write(t, h.ws, "dir/big", bytes.Repeat([]byte("inside big\n"), 110_000), 0o644) // streamed
	for i := range 20 {
		write(t, h.ws, fmt.Sprintf("pad/p%02d", i), []byte(fmt.Sprint("padding ", i)), 0o644)
	}
	links := filepath.Join(base, "links")
	os.MkdirAll(links, 0o755)
	h.fileLink = filepath.Join(links, "file")
	h.dirLink = filepath.Join(links, "dir")
	if err := os.Symlink(filepath.Join(h.outside, "f"), h.fileLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(h.outside, h.dirLink); err != nil {
		t.Fatal(err)
	}
	return h
}

func randomHex(t *testing.T) string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// exchange swaps the names a and b atomically (renameat2 RENAME_EXCHANGE),
// whatever they are: a file or directory with a symlink, and back.
func exchange(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

// swapFile and swapDir put the symlinks in place of ws/file and ws/dir (or
// put the file and directory back, called again).
func (h *hostileTree) swapFile() error { return exchange(h.fileLink, filepath.Join(h.ws, "file")) }
func (h *hostileTree) swapDir() error  { return exchange(h.dirLink, filepath.Join(h.ws, "dir")) }

// assertNoSecret reads every blob of the store and fails if one holds the
// secret's bytes.
func assertNoSecret(t *testing.T, db *engine.DB, secret []byte) {
	t.Helper()
	ctx := context.Background()
	infos, err := db.Blobs().List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		b, err := db.Blobs().Get(ctx, info.Key)
		if err != nil {
			t.Fatalf("blob %s: %v", info.Key, err)
		}
		if bytes.Contains(b, secret) {
			t.Fatalf("blob %s holds the bytes of a file outside the workspace", info.Key)
		}
	}
}

// TestCaptureNeverReadsThroughSwappedSymlinks captures a workspace while
// another goroutine keeps exchanging a file and a directory of it with
// symlinks to a secret outside (rename(2), as an agent would), and checks
// that no blob of the store ever holds the secret: every file and
// directory is opened beneath the workspace without following a symlink.
func TestCaptureNeverReadsThroughSwappedSymlinks(t *testing.T) {
	captures := testkit.ScaleShort(t, 60, 200, 200)
	f := newCaptureFixture(t)
	h := newHostileTree(t, f.dir)
	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			swap := h.swapFile
			if i%2 == 1 {
				swap = h.swapDir
			}
			if err := swap(); err != nil {
				t.Errorf("swap: %v", err)
				return
			}
			swaps.Add(1)
			runtime.Gosched()
		}
	}()
	ctx := context.Background()
	var failed, warned int
	for range captures {
		// Escaping symlinks allowed: a capture that meets a swapped-in
		// symlink in the walk records it (its target is a path, not the
		// secret) instead of refusing, so every capture gets to read.
		res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: h.ws, AllowEscapingSymlinks: true})
		if err != nil {
			failed++
			t.Errorf("capture under the swaps: %v", err)
			continue
		}
		if len(res.Warnings) > 0 {
			warned++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d captures, %d swaps, %d with warnings, %d failed", captures, swaps.Load(), warned, failed)
	assertNoSecret(t, f.db, h.secret)
}

// TestCaptureFileAndDirSwappedAfterWalk swaps ws/file and ws/dir for
// symlinks to the secret after the walk listed them and before any file
// is read: the three files are reported vanished and left out, and
// nothing outside is read.
func TestCaptureFileAndDirSwappedAfterWalk(t *testing.T) {
	f := newCaptureFixture(t)
	h := newHostileTree(t, f.dir)
	defer f.db.OnPoint("capture.walked", func() error {
		if err := h.swapFile(); err != nil {
			return err
		}
		return h.swapDir()
	})()
	res := f.capture(t, h.ws)
	assertNoSecret(t, f.db, h.secret)
	want := map[string]sbxdb.EntryChange{"dir/big": sbxdb.EntryVanished, "dir/one": sbxdb.EntryVanished, "file": sbxdb.EntryVanished}
	if got := warningsByPath(res.Warnings); !maps.Equal(got, want) {
		t.Fatalf("warnings %v, want %v", res.Warnings, want)
	}
	if res.Stats.Vanished != 3 || res.Stats.Changed != 0 || res.Stats.Files != 20 {
		t.Fatalf("stats %+v", res.Stats)
	}
	// dir had nothing else beneath it: it is recorded as an empty
	// directory, as the walk would have.
	for _, e := range res.Checkpoint.Files {
		if e.Path == "file" || strings.HasPrefix(e.Path, "dir/") || (e.Path == "dir" && e.Kind != chain.KindDir) {
			t.Fatalf("manifest holds %+v", e)
		}
	}
	if !hasEntry(res.Checkpoint, "dir", chain.KindDir) {
		t.Fatal("the emptied directory is not recorded")
	}
}

// TestCaptureDirSwappedBeforeItIsRead swaps ws/dir for a symlink to the
// directory outside after the root was listed and before the walk opens
// ws/dir: it is reported vanished, and none of the outside names or bytes
// are recorded.
func TestCaptureDirSwappedBeforeItIsRead(t *testing.T) {
	f := newCaptureFixture(t)
	h := newHostileTree(t, f.dir)
	var calls atomic.Int32
	defer f.db.OnPoint("capture.walkDir", func() error {
		if calls.Add(1) == 2 { // the root first, then its subdirectories
			return h.swapDir()
		}
		return nil
	})()
	// Only dir beneath the root, so the second directory opened is dir.
	os.RemoveAll(filepath.Join(h.ws, "pad"))
	res := f.capture(t, h.ws)
	assertNoSecret(t, f.db, h.secret)
	if got := warningsByPath(res.Warnings); !maps.Equal(got, map[string]sbxdb.EntryChange{"dir": sbxdb.EntryVanished}) {
		t.Fatalf("warnings %v", res.Warnings)
	}
	for _, e := range res.Checkpoint.Files {
		if e.Path != "file" {
			t.Fatalf("manifest holds %+v", e)
		}
	}
}

// TestCaptureVanishedEntriesAreLeftOut removes files between the walk and
// the read, one the only file of its directory, one streamed: the capture
// records the rest, names what vanished, and the checkpoint restores to
// the tree as it is afterwards. With FailOnChange the same is a typed
// error that appends nothing.
func TestCaptureVanishedEntriesAreLeftOut(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*captureFixture, string) {
		f := newCaptureFixture(t)
		ws := filepath.Join(f.dir, "ws")
		write(t, ws, "keep", []byte("keep"), 0o644)
		write(t, ws, "gone", []byte("gone"), 0o644)
		write(t, ws, "only/gone", []byte("the only file of its directory"), 0o644)
		write(t, ws, "big/gone", bytes.Repeat([]byte("large and gone\n"), 100_000), 0o644)
		write(t, ws, "big/keep", []byte("keep"), 0o644)
		f.db.OnPoint("capture.walked", func() error {
			for _, p := range []string{"gone", "only/gone", "big/gone"} {
				if err := os.Remove(filepath.Join(ws, p)); err != nil {
					return err
				}
			}
			return nil
		})
		return f, ws
	}

	t.Run("warned", func(t *testing.T) {
		f, ws := setup(t)
		res := f.capture(t, ws)
		want := map[string]sbxdb.EntryChange{
			"gone": sbxdb.EntryVanished, "only/gone": sbxdb.EntryVanished, "big/gone": sbxdb.EntryVanished,
		}
		if got := warningsByPath(res.Warnings); !maps.Equal(got, want) {
			t.Fatalf("warnings %v, want %v", res.Warnings, want)
		}
		if res.Stats.Vanished != 3 || res.Stats.Files != 2 || res.Stats.Dirs != 1 || res.Stats.Bytes != 8 {
			t.Fatalf("stats %+v", res.Stats)
		}
		out := f.restore(t, res.Checkpoint.ID)
		if diff := fstree.Diff(snapshot(t, ws), snapshot(t, out)); diff != nil {
			t.Fatalf("restored tree differs from the workspace:\n%s", strings.Join(diff, "\n"))
		}
	})

	t.Run("FailOnChange", func(t *testing.T) {
		f, ws := setup(t)
		before, err := f.db.Blobs().List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, FailOnChange: true})
		if !errors.Is(err, sbxdb.ErrWorkspaceChanged) || !errors.Is(err, chain.ErrInvalidWorkspace) || chain.Code(err) != chain.CodeInvalidWorkspace {
			t.Fatalf("Capture = %v, %v; want ErrWorkspaceChanged and INVALID_WORKSPACE", res, err)
		}
		var wce *sbxdb.WorkspaceChangedError
		if !errors.As(err, &wce) || wce.Warning.What != sbxdb.EntryVanished {
			t.Fatalf("error %v is not a *WorkspaceChangedError naming a vanished entry", err)
		}
		if head, _ := f.db.Head(ctx, "t1"); head != "" {
			t.Fatalf("a refused capture appended %q", head)
		}
		after, err := f.db.Blobs().List(ctx, "")
		if err != nil || len(after) != len(before) {
			t.Fatalf("a refused capture stored blobs: %d, then %d (%v)", len(before), len(after), err)
		}
	})
}

// TestCaptureDirVanishedDuringWalk removes a directory after its parent
// was listed and before the walk reads it: it is left out with a warning,
// and its parent, with nothing else beneath it, is recorded as empty.
func TestCaptureDirVanishedDuringWalk(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "keep", []byte("keep"), 0o644)
	write(t, ws, "walk/vanishing/x", []byte("x"), 0o644)
	var calls atomic.Int32
	defer f.db.OnPoint("capture.walkDir", func() error {
		if calls.Add(1) == 3 { // the root, walk, then walk/vanishing: one directory each
			return os.RemoveAll(filepath.Join(ws, "walk/vanishing"))
		}
		return nil
	})()
	res := f.capture(t, ws)
	if got := warningsByPath(res.Warnings); !maps.Equal(got, map[string]sbxdb.EntryChange{"walk/vanishing": sbxdb.EntryVanished}) {
		t.Fatalf("warnings %v", res.Warnings)
	}
	if !hasEntry(res.Checkpoint, "walk", chain.KindDir) || len(res.Checkpoint.Files) != 2 || res.Stats.Vanished != 1 {
		t.Fatalf("manifest %+v, stats %+v", res.Checkpoint.Files, res.Stats)
	}
}

// TestCaptureFileChangedWhileRead rewrites a file while it is read, once
// and then at every read, small and streamed.
func TestCaptureFileChangedWhileRead(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{100, 3 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			version := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, size) }
			f := newCaptureFixture(t)
			ws := filepath.Join(f.dir, "ws")
			p := filepath.Join(ws, "f")
			write(t, ws, "f", version(0), 0o644) // alone: the hooks below see only its reads
			old := time.Now().Add(-time.Hour)

			// Rewritten once, during its first read: read again, and the
			// version found then is recorded, with a warning.
			var reads atomic.Int32
			remove := f.db.OnPoint("capture.fileRead", func() error {
				if reads.Add(1) == 1 {
					return os.WriteFile(p, version(1), 0o644)
				}
				return nil
			})
			res := f.capture(t, ws)
			remove()
			if got := blobOf(t, res.Checkpoint, "f"); got != cas.Files.Key(sha(version(1))) {
				t.Fatalf("recorded %s, want the version written during the read", got)
			}
			if res.Stats.Changed != 1 || len(res.Warnings) != 1 || res.Warnings[0].Path != "f" || res.Warnings[0].What != sbxdb.EntryChanged {
				t.Fatalf("stats %+v, warnings %v", res.Stats, res.Warnings)
			}

			// Rewritten at every read, each time with its mtime set back
			// and its size kept (only ctime moves): recorded as the last
			// read found it, with a warning, and not cached. Without the
			// last rule the next capture would take the cached digest of
			// a version the file no longer holds.
			reads.Store(0)
			remove = f.db.OnPoint("capture.fileRead", func() error {
				n := int(reads.Add(1))
				if err := os.WriteFile(p, version(1+n), 0o644); err != nil {
					return err
				}
				return os.Chtimes(p, old, old)
			})
			res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws})
			remove()
			if err != nil {
				t.Fatal(err)
			}
			if n := int(reads.Load()); n != 3 {
				t.Fatalf("read %d times, want 3", n)
			}
			if got := blobOf(t, res.Checkpoint, "f"); got != cas.Files.Key(sha(version(3))) {
				t.Fatalf("recorded %s, want the third read's version", got)
			}
			if res.Stats.Changed != 1 || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0].Detail, "mix") {
				t.Fatalf("stats %+v, warnings %v", res.Stats, res.Warnings)
			}
			// The file now holds version 4 under the stat of the third
			// read's end.
			next := f.capture(t, ws)
			if got := blobOf(t, next.Checkpoint, "f"); got != cas.Files.Key(sha(version(4))) {
				t.Fatalf("the next capture recorded %s, want what the file holds", got)
			}
			if len(next.Warnings) != 0 {
				t.Fatalf("warnings %v", next.Warnings)
			}
		})
	}
}

// TestCaptureCancelledInALargeFile cancels a capture while it reads a
// large file: it returns context.Canceled, appends nothing and stores no
// blob.
func TestCaptureCancelledInALargeFile(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "small", []byte("small"), 0o644)
	big, err := os.Create(filepath.Join(ws, "big"))
	if err != nil {
		t.Fatal(err)
	}
	big.Truncate(256 << 20) // sparse: read at memory speed, stored as one small frame
	big.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var chunks atomic.Int32
	defer f.db.OnPoint("capture.streamed", func() error {
		if chunks.Add(1) == 1 {
			cancel()
		}
		return nil
	})()
	_, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Capture = %v, want context.Canceled", err)
	}
	if n := chunks.Load(); n != 1 {
		t.Errorf("%d chunks read after the cancellation", n-1)
	}
	if head, _ := f.db.Head(context.Background(), "t1"); head != "" {
		t.Fatalf("a cancelled capture appended %q", head)
	}
	if infos, _ := f.db.Blobs().List(context.Background(), ""); len(infos) != 0 {
		t.Fatalf("a cancelled capture stored %d blobs", len(infos))
	}
	if tmp, _ := os.ReadDir(filepath.Join(f.db.Blobs().Dir(), "tmp")); len(tmp) != 0 {
		t.Fatalf("a cancelled capture left %d temporary files", len(tmp))
	}
}

// TestCaptureFIFOSwappedIn replaces a file by a FIFO after the walk: the
// capture must not block opening it (nobody will ever write to it) and
// reports the file vanished.
func TestCaptureFIFOSwappedIn(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	write(t, ws, "f", []byte("a file"), 0o644)
	write(t, ws, "keep", []byte("keep"), 0o644)
	p := filepath.Join(ws, "f")
	defer f.db.OnPoint("capture.walked", func() error {
		os.Remove(p)
		return unix.Mkfifo(p, 0o644)
	})()
	type result struct {
		res *sbxdb.CaptureResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws})
		done <- result{res, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		// Not a measure of speed: a capture blocked in open(2) would
		// never return, so unblock it to end the test.
		if w, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatal("the capture blocked opening a FIFO swapped in for a file")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := warningsByPath(r.res.Warnings); !maps.Equal(got, map[string]sbxdb.EntryChange{"f": sbxdb.EntryVanished}) {
		t.Fatalf("warnings %v", r.res.Warnings)
	}
	if hasEntry(r.res.Checkpoint, "f", chain.KindFile) {
		t.Fatal("the FIFO was recorded as a file")
	}
}

func warningsByPath(ws []sbxdb.CaptureWarning) map[string]sbxdb.EntryChange {
	m := map[string]sbxdb.EntryChange{}
	for _, w := range ws {
		m[w.Path] = w.What
	}
	return m
}

func hasEntry(cp *chain.Checkpoint, path string, kind chain.Kind) bool {
	for _, e := range cp.Files {
		if e.Path == path && e.Kind == kind {
			return true
		}
	}
	return false
}

func blobOf(t *testing.T, cp *chain.Checkpoint, path string) string {
	t.Helper()
	for _, e := range cp.Files {
		if e.Path == path {
			return e.BlobKey
		}
	}
	t.Fatalf("%q not in the manifest", path)
	return ""
}

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

// TestCaptureUnderChurn captures a workspace while another goroutine keeps
// rewriting its files (truncate and write, each version one repeated byte,
// of a new size), removing and recreating files and a directory. Every
// capture must succeed, and every file it records must hold one version
// whole unless a warning says the bytes may mix versions.
func TestCaptureUnderChurn(t *testing.T) {
	captures := testkit.ScaleShort(t, 40, 100, 500)
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := filepath.Join(f.dir, "ws")
	names := make([]string, 0, 34)
	for i := range 32 {
		names = append(names, fmt.Sprintf("d%d/f%02d", i%4, i))
	}
	names = append(names, "big/a", "big/b") // streamed
	size := func(name string, r int) int {
		if strings.HasPrefix(name, "big/") {
			return 1<<20 + 1 + r%(1<<20)
		}
		return 1 + r%(48<<10)
	}
	for i, n := range names {
		write(t, ws, n, bytes.Repeat([]byte{'a'}, size(n, i*7919)), 0o644)
	}
	write(t, ws, "flaky/x", []byte("x"), 0o644)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			n := names[(i*13)%len(names)]
			p := filepath.Join(ws, filepath.FromSlash(n))
			switch i % 7 {
			case 3:
				os.Remove(p)
			case 5:
				os.RemoveAll(filepath.Join(ws, "flaky"))
				os.MkdirAll(filepath.Join(ws, "flaky"), 0o755)
				os.WriteFile(filepath.Join(ws, "flaky/x"), []byte("x"), 0o644)
			default:
				os.WriteFile(p, bytes.Repeat([]byte{byte('a' + i%26)}, size(n, i)), 0o644)
			}
		}
	}()
	var changed, vanished, mixed int
	for range captures {
		res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws})
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("capture under churn: %v", err)
		}
		changed += res.Stats.Changed
		vanished += res.Stats.Vanished
		warned := map[string]string{}
		for _, w := range res.Warnings {
			warned[w.Path] = w.Detail
		}
		for _, e := range res.Checkpoint.Files {
			if e.Kind != chain.KindFile {
				continue
			}
			b, err := f.db.Blobs().Get(ctx, e.BlobKey)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > 0 && bytes.Count(b, b[:1]) != len(b) {
				mixed++
				if !strings.Contains(warned[e.Path], "mix") {
					close(stop)
					wg.Wait()
					t.Fatalf("%s was recorded as a mix of versions without a warning (warnings %v)", e.Path, res.Warnings)
				}
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d captures: %d changed, %d vanished, %d recorded mixed with a warning", captures, changed, vanished, mixed)
}

// TestCaptureFailOnChangeRefusesAChangedFile: with FailOnChange a file
// rewritten while read, small or streamed, is a typed error, and the
// capture appends and stores nothing.
func TestCaptureFailOnChangeRefusesAChangedFile(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{100, 3 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			f := newCaptureFixture(t)
			ws := filepath.Join(f.dir, "ws")
			p := filepath.Join(ws, "f")
			write(t, ws, "f", bytes.Repeat([]byte("a"), size), 0o644)
			defer f.db.OnPoint("capture.fileRead", func() error {
				return os.WriteFile(p, bytes.Repeat([]byte("b"), size+1), 0o644)
			})()
			_, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, FailOnChange: true})
			var wce *sbxdb.WorkspaceChangedError
			if !errors.As(err, &wce) || wce.Warning.What != sbxdb.EntryChanged || wce.Warning.Path != "f" ||
				!errors.Is(err, sbxdb.ErrWorkspaceChanged) || !errors.Is(err, chain.ErrInvalidWorkspace) {
				t.Fatalf("Capture = %v, want a *WorkspaceChangedError naming f changed", err)
			}
			if head, _ := f.db.Head(ctx, "t1"); head != "" {
				t.Fatalf("a refused capture appended %q", head)
			}
			if infos, _ := f.db.Blobs().List(ctx, ""); len(infos) != 0 {
				t.Fatalf("a refused capture stored %d blobs", len(infos))
			}
		})
	}
}

// A file whose stat says 0 bytes but which holds some (procfs, sysfs, some
// FUSE file systems) is read to its end: its bytes do not match its stat,
// so a capture that must not record a changing file refuses it, rather
// than record it empty.
func TestCaptureFileThatStatsAsEmpty(t *testing.T) {
	const dir = "/proc/sys/kernel/random" // boot_id, uuid: size 0, 37 bytes each
	if b, err := os.ReadFile(filepath.Join(dir, "boot_id")); err != nil || len(b) == 0 {
		t.Skipf("needs Linux procfs: %s/boot_id: %v", dir, err)
	}
	db, err := engine.Open(filepath.Join(t.TempDir(), "store"), &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Capture(t.Context(), sbxdb.CaptureInput{Writer: l.Writer, Dir: dir, FailOnChange: true})
	if !errors.Is(err, sbxdb.ErrWorkspaceChanged) {
		t.Fatalf("capture of %s with FailOnChange: %v, want ErrWorkspaceChanged", dir, err)
	}
}
