package engine_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/vfs"
	"github.com/sbxdb/sbxdb/vfs/faultfs"
)

// swapFS is the OS file system that calls its hooks, once each, around the
// restore's steps: a way to rename things under a restore as another user
// with write access to the directories could.
type swapFS struct {
	vfs.FS
	mu          sync.Mutex
	staging     string // the last directory MkdirTemp made
	beforeStage func(dir string)
	afterStage  func(made string)
	firstMkdir  func(staging string)
	created     func() // after each file is created
}

func (s *swapFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	s.mu.Lock()
	hook := s.created
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return f, err
}

func (s *swapFS) MkdirTemp(dir, pattern string) (string, error) {
	s.mu.Lock()
	before := s.beforeStage
	s.beforeStage = nil
	s.mu.Unlock()
	if before != nil {
		before(dir)
	}
	made, err := s.FS.MkdirTemp(dir, pattern)
	s.mu.Lock()
	s.staging = made
	after := s.afterStage
	s.afterStage = nil
	s.mu.Unlock()
	if err == nil && after != nil {
		after(made)
	}
	return made, err
}

func (s *swapFS) Mkdir(name string, perm fs.FileMode) error {
	s.mu.Lock()
	hook, staging := s.firstMkdir, s.staging
	s.firstMkdir = nil
	s.mu.Unlock()
	if hook != nil {
		hook(staging)
	}
	return s.FS.Mkdir(name, perm)
}

// names returns the names in dir, nil if none.
func names(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// A restore into an existing directory that another user owns stages
// inside it, where that user can rename the staging directory or put a
// symlink in its place, and the directory's parent's owner can do as much
// to the target. Whatever is swapped, and whenever, nothing is written
// outside the target: the restore writes through the descriptors of the
// directories it checked and made, and refuses a staging directory that is
// not the one it made.
func TestRestoreWritesNothingOutsideWhenItsDirectoriesAreSwapped(t *testing.T) {
	ctx := context.Background()
	sfs := &swapFS{FS: vfs.OS}
	dir := t.TempDir()
	db, err := engine.Open(filepath.Join(dir, "store"), &engine.Options{NoSync: true, FS: sfs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	write(t, ws, "src/a.txt", []byte("a"), 0o644)
	write(t, ws, "b.txt", []byte("b"), 0o644)
	res, err := db.Capture(ctx, sbxdb.CaptureInput{Writer: l.Writer, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Checkpoint.ID
	move := func(p string) {
		if err := os.Rename(p, p+".moved"); err != nil {
			t.Error(err)
		}
	}
	root := os.Geteuid() == 0
	for _, tc := range []struct {
		name string
		arm  func(outside string)
		want error // nil: the restore succeeds, into the target
		root bool  // needs root (chown)
	}{
		{"staging replaced by a symlink as it is made", func(outside string) {
			sfs.afterStage = func(made string) { move(made); os.Symlink(outside, made) }
		}, chain.ErrInvalidWorkspace, false},
		{"staging replaced by another user's directory as it is made", func(outside string) {
			sfs.afterStage = func(made string) {
				move(made)
				os.Mkdir(made, 0o755)
				os.Chown(made, 1234, 1234)
			}
		}, chain.ErrInvalidWorkspace, true},
		{"staging replaced by a symlink while it is written", func(outside string) {
			sfs.firstMkdir = func(staging string) { move(staging); os.Symlink(outside, staging) }
		}, nil, false},
		{"target replaced by a symlink after the check", func(outside string) {
			sfs.beforeStage = func(dir string) {
				target := filepath.Join(filepath.Dir(outside), "home")
				move(target)
				os.Symlink(outside, target)
			}
		}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && !root {
				t.Skip("not root: cannot make a directory of another user")
			}
			parent := t.TempDir()
			outside := filepath.Join(parent, "outside")
			target := filepath.Join(parent, "home")
			for _, d := range []string{outside, target} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if root {
				os.Chown(target, 1234, 1234) // shared: its owner is not the restore's
			} else {
				os.Chmod(target, 0o777) // shared: others may write
			}
			tc.arm(outside)
			var written []string // outside, while the restore ran
			sfs.created = func() {
				if written == nil {
					written = names(outside)
				}
			}
			_, err := db.Restore(ctx, id, target, nil)
			sfs.beforeStage, sfs.afterStage, sfs.firstMkdir, sfs.created = nil, nil, nil, nil
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Errorf("Restore = %v, want %v", err, tc.want)
			}
			if after := names(outside); after != nil || written != nil {
				t.Errorf("the restore wrote %q outside its target (%q while it ran)", after, written)
			}
			if tc.want == nil {
				// Into the directory it checked, wherever that is now.
				home := target
				if st, _ := os.Lstat(target); st.Mode()&os.ModeSymlink != 0 {
					home = target + ".moved"
				}
				if b, err := os.ReadFile(filepath.Join(home, "src", "a.txt")); err != nil || string(b) != "a" {
					t.Errorf("the restore did not write its target %s: %q, %v", home, b, err)
				}
			}
		})
	}
}

// An error names the restore's directories by their paths, not by the
// descriptors the restore writes through.
func TestRestoreErrorsNameDirectoriesByPath(t *testing.T) {
	f := newFaultFixture(t)
	f.edit()
	id := f.mustCapture("t").ID
	for _, existing := range []bool{false, true} {
		target := filepath.Join(t.TempDir(), "out")
		if existing {
			if err := os.Mkdir(target, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		f.ffs.Reset()
		f.ffs.FailNth(faultfs.Mkdir, 3, syscall.ENOSPC) // a directory of the tree
		_, err := f.db.Restore(context.Background(), id, target, nil)
		f.ffs.Reset()
		if !errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "/proc/self/fd/") ||
			!strings.Contains(err.Error(), filepath.Dir(target)) || !strings.Contains(err.Error(), "/.sbxdb-restore-") {
			t.Errorf("into an existing directory: %v; error %q, want one naming the staging directory by its path", existing, err)
		}
	}
}
