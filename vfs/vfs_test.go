//go:build unix

package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The OS FS opens files as os.OpenFile does: the same flags, modes and
// errors, whatever path it takes to skip the runtime's poller.
func TestOSOpenFile(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	name := filepath.Join(dir, "f")
	f, err := OS.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o751)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("bytes")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(name)
	if err != nil || st.Mode() != 0o751&^0o022 || st.Size() != 5 {
		t.Fatalf("created %v, %v; want mode %v and 5 bytes", st.Mode(), err, fs.FileMode(0o751&^0o022))
	}

	// O_EXCL on an existing name: a *fs.PathError matching fs.ErrExist.
	_, err = OS.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrExist) || !errors.As(err, &pe) || pe.Op != "open" || pe.Path != name {
		t.Fatalf("OpenFile of an existing name with O_EXCL = %v", err)
	}
	// O_NOFOLLOW refuses a symlink.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(name, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OS.OpenFile(link, os.O_WRONLY|syscall.O_NOFOLLOW, 0); err == nil {
		t.Fatal("OpenFile with O_NOFOLLOW opened a symlink")
	}
	// The special bits are passed on, as os.OpenFile passes them.
	setgid := filepath.Join(dir, "setgid")
	f, err = OS.OpenFile(setgid, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600|fs.ModeSetgid)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st, err := os.Stat(setgid); err != nil || st.Mode()&fs.ModeSetgid == 0 {
		t.Errorf("created %v, %v; want the setgid bit", st.Mode(), err)
	}

	// Open reads files and lists directories.
	r, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != "bytes" {
		t.Fatalf("Open read %q, %v", got, err)
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil || len(names) != 3 {
		t.Fatalf("Open of a directory listed %v, %v", names, err)
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a missing file = %v", err)
	}
}
