//go:build unix

package vfs

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// OpenBeneath and OpenDirBeneath open what lies beneath the directory and
// refuse, as IsGone reports, a symlink as the last component or on the
// way, a ".." that leaves it, a name that is not there and a socket; a
// FIFO opens without blocking. forEachOpenMode runs the checks with openat2, where
// the kernel has it, and one component at a time.
func TestOpenBeneath(t *testing.T) {
	forEachOpenMode(t, func(t *testing.T) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		must(t, os.MkdirAll(filepath.Join(root, "d/e"), 0o755))
		must(t, os.WriteFile(filepath.Join(root, "d/e/f"), []byte("inside"), 0o644))
		must(t, os.WriteFile(filepath.Join(base, "secret"), []byte("outside"), 0o644))
		must(t, os.Symlink(filepath.Join(base, "secret"), filepath.Join(root, "abs")))
		must(t, os.Symlink("d/e/f", filepath.Join(root, "rel")))
		must(t, os.Symlink("d", filepath.Join(root, "dlink")))
		must(t, os.Symlink(base, filepath.Join(root, "up")))
		must(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))
		sock, err := net.Listen("unix", filepath.Join(root, "sock"))
		must(t, err)
		defer sock.Close()
		dir, err := OpenDir(root)
		must(t, err)
		defer dir.Close()

		r, err := OpenBeneath(dir, "d/e/f")
		must(t, err)
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil || string(b) != "inside" {
			t.Fatalf("read %q, %v", b, err)
		}
		d, err := OpenDirBeneath(dir, "d/e")
		must(t, err)
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil || len(names) != 1 || names[0] != "f" {
			t.Fatalf("listed %q, %v", names, err)
		}
		if d, err := OpenDirBeneath(dir, "."); err != nil {
			t.Fatalf("the directory itself: %v", err)
		} else {
			d.Close()
		}
		for _, rel := range []string{"abs", "rel", "dlink/e/f", "up/secret", "../secret", "d/../../secret", "missing", "d/e/f/g", "sock"} {
			if r, err := OpenBeneath(dir, rel); err == nil || !IsGone(err) {
				if r != nil {
					r.Close()
				}
				t.Errorf("OpenBeneath(%q) = %v, want an error IsGone reports", rel, err)
			}
		}
		for _, rel := range []string{"dlink", "up", "d/e/f", "missing"} {
			if d, err := OpenDirBeneath(dir, rel); err == nil || !IsGone(err) {
				if d != nil {
					d.Close()
				}
				t.Errorf("OpenDirBeneath(%q) = %v, want an error IsGone reports", rel, err)
			}
		}
		// Nobody writes to the FIFO: a blocking open would never return.
		r, err = OpenBeneath(dir, "fifo")
		must(t, err)
		r.Close()
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
