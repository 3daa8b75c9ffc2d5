package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
)

// An Open that fails on the database file names the file once: the
// operating system's error names it already.
func TestOpenErrorNamesTheFileOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, engine.DBFile)
	// A symbolic link to itself cannot be opened, even by root.
	if err := os.Symlink(engine.DBFile, path); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := engine.Open(dir, &engine.Options{ReadOnly: ro})
		if err == nil {
			t.Fatalf("read-only %v: Open succeeded", ro)
		}
		if n := strings.Count(err.Error(), path); n != 1 || !errors.Is(err, syscall.ELOOP) {
			t.Errorf("read-only %v: %q names %s %d times, ELOOP %v", ro, err, path, n, errors.Is(err, syscall.ELOOP))
		}
		// The file may be there: it is not "no store".
		if errors.Is(err, sbxdb.ErrNoStore) {
			t.Errorf("read-only %v: %v is ErrNoStore", ro, err)
		}
		if target, err := os.Readlink(path); err != nil || target != engine.DBFile {
			t.Errorf("read-only %v: the link is now %q, %v", ro, target, err)
		}
		// Nothing but the lock file, which every Open takes first.
		if got := slices.DeleteFunc(names(dir), func(n string) bool { return n == "sbx.lock" }); !slices.Equal(got, []string{engine.DBFile}) {
			t.Errorf("read-only %v: the directory holds %v", ro, got)
		}
	}
}

// A database file the process may not read (not as root, which reads
// anything) is a permission error naming the file once, not "no store".
func TestOpenErrorUnreadableFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any file")
	}
	dir := t.TempDir()
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	path := filepath.Join(dir, engine.DBFile)
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(path, 0o644)
	for _, ro := range []bool{false, true} {
		_, err := engine.Open(dir, &engine.Options{ReadOnly: ro})
		if n := strings.Count(err.Error(), path); n != 1 || !errors.Is(err, os.ErrPermission) || errors.Is(err, sbxdb.ErrNoStore) {
			t.Errorf("read-only %v: %q names %s %d times, ErrPermission %v", ro, err, path, n, errors.Is(err, os.ErrPermission))
		}
	}
	if err := os.Chmod(dir, 0o600); err != nil { // no search permission
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if _, err := engine.Open(dir, &engine.Options{ReadOnly: true}); !errors.Is(err, os.ErrPermission) || errors.Is(err, sbxdb.ErrNoStore) {
		t.Errorf("a directory without search permission: %v", err)
	}
}

// A directory path below a regular file holds no store: a read-only Open
// says so.
func TestOpenBelowARegularFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Open(file, &engine.Options{ReadOnly: true}); !errors.Is(err, sbxdb.ErrNoStore) {
		t.Errorf("read-only Open of a file: %v, want ErrNoStore", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "x" {
		t.Errorf("the file is now %q, %v", b, err)
	}
}
