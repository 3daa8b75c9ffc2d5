package engine_test

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/vfs"
)

// hookFS is the OS file system whose files report their writes and closes
// to the test: a way to act (cancel a restore) in the middle of writing one
// file.
type hookFS struct {
	vfs.FS
	mu      sync.Mutex
	written map[string]int64 // bytes written, by base name
	onWrite func(name string)
	onClose func(name string)
}

func newHookFS() *hookFS { return &hookFS{FS: vfs.OS, written: map[string]int64{}} }

func (h *hookFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &hookFile{File: f, h: h}, nil
}

func (h *hookFS) set(onWrite, onClose func(string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onWrite, h.onClose = onWrite, onClose
}

func (h *hookFS) bytes(base string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.written[base]
}

// hookFile hides the *os.File's ReadFrom: every byte passes through Write.
type hookFile struct {
	vfs.File
	h *hookFS
}

func (f *hookFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	base := filepath.Base(f.Name())
	f.h.mu.Lock()
	f.h.written[base] += int64(n)
	hook := f.h.onWrite
	f.h.mu.Unlock()
	if hook != nil {
		hook(base)
	}
	return n, err
}

func (f *hookFile) Close() error {
	err := f.File.Close()
	f.h.mu.Lock()
	hook := f.h.onClose
	f.h.mu.Unlock()
	if hook != nil {
		hook(filepath.Base(f.Name()))
	}
	return err
}

// capturedBig captures a workspace holding the given files, each the same
// 6 MiB of random bytes (a large blob, streamed on restore, stored raw),
// into a store written through h, and returns the store and the checkpoint.
func capturedBig(t *testing.T, h *hookFS, names ...string) (*engine.DB, string) {
	t.Helper()
	dir := t.TempDir()
	db, err := engine.Open(filepath.Join(dir, "store"), &engine.Options{NoSync: true, FS: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	big := make([]byte, 6<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	ws := filepath.Join(dir, "ws")
	for _, n := range names {
		write(t, ws, n, big, 0o644)
	}
	ctx := context.Background()
	w, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: w.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	return db, res.Checkpoint.ID
}

// requireNothingLeft fails unless parent holds neither the target nor any
// staging directory.
func requireNothingLeft(t *testing.T, parent, target string) {
	t.Helper()
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("an interrupted restore left its target %s (%v)", target, err)
	}
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".sbxdb-restore-") {
			t.Errorf("an interrupted restore left its staging directory %s", e.Name())
		}
	}
}

// A restore cancelled while it writes one large file stops within that
// file, returns context.Canceled and leaves nothing behind.
func TestRestoreCancelStopsWithinALargeFile(t *testing.T) {
	h := newHookFS()
	db, id := capturedBig(t, h, "big.bin")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.set(func(name string) {
		if name == "big.bin" {
			cancel()
		}
	}, nil)
	defer h.set(nil, nil)
	parent, target, err := restoreIntoNewParent(t, ctx, db, id)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Restore cancelled during a large file: %v; want context.Canceled", err)
	}
	if n := h.bytes("big.bin"); n >= 6<<20 {
		t.Errorf("the cancelled restore wrote all %d bytes of the large file", n)
	}
	requireNothingLeft(t, parent, target)
}

// A restore cancelled after writing a large file does not go on to copy it
// to the other paths that hold the same bytes.
func TestRestoreCancelStopsBeforeACopy(t *testing.T) {
	h := newHookFS()
	db, id := capturedBig(t, h, "a.bin", "b.bin")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.set(nil, func(name string) {
		if name == "a.bin" || name == "b.bin" {
			cancel() // the first is written; the second would be its copy
		}
	})
	defer h.set(nil, nil)
	parent, target, err := restoreIntoNewParent(t, ctx, db, id)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Restore cancelled after its first large file: %v; want context.Canceled", err)
	}
	if a, b := h.bytes("a.bin"), h.bytes("b.bin"); a+b > 6<<20 {
		t.Errorf("the cancelled restore wrote %d + %d bytes: it copied the file after the cancel", a, b)
	}
	requireNothingLeft(t, parent, target)
}

// restoreIntoNewParent restores checkpoint id into "tree" inside a new,
// empty directory, and returns both paths with Restore's error.
func restoreIntoNewParent(t *testing.T, ctx context.Context, db *engine.DB, id string) (parent, target string, err error) {
	t.Helper()
	parent = filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	target = filepath.Join(parent, "tree")
	_, err = db.Restore(ctx, id, target, nil)
	return parent, target, err
}
