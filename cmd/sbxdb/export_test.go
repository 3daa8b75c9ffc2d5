package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExport: export writes the checkpoint's tree as tar and as zip, on
// standard output or into a file, and unpacking either gives the tree a
// restore writes; the same checkpoint gives the same bytes each time. A
// damaged blob fails the export with exit 12 and leaves the file as it was.
func TestExport(t *testing.T) {
	store, _ := captured(t, "cp1")
	restored := filepath.Join(t.TempDir(), "restored")
	ok(t, "restore", "--thread", "main", restored, "--db", store)
	want := readTree(t, restored)

	out := filepath.Join(t.TempDir(), "cp1.tar")
	ok(t, "export", "cp1", "-o", out, "--db", store)
	tarBytes, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, untar(t, tarBytes)); !sameTree(got, want) {
		t.Errorf("the tar unpacks to %v, restore writes %v", got, want)
	}
	if stdout := ok(t, "export", "main@", "--db", store); stdout != string(tarBytes) {
		t.Errorf("export to standard output wrote %d bytes, to a file %d", len(stdout), len(tarBytes))
	}

	zipOut := filepath.Join(t.TempDir(), "cp1.zip")
	ok(t, "export", "cp1", "-o", zipOut, "--db", store) // the extension picks zip
	zipBytes, err := os.ReadFile(zipOut)
	if err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, unzip(t, zipBytes)); !sameTree(got, want) {
		t.Errorf("the zip unpacks to %v, restore writes %v", got, want)
	}

	// A damaged blob: exit 12, and the file keeps what it held.
	corruptPacks(t, store)
	failWith(t, exitDamaged, "export", "cp1", "-o", out, "--db", store)
	if b, _ := os.ReadFile(out); !bytes.Equal(b, tarBytes) {
		t.Errorf("a failed export changed %s", out)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*.partial")); len(left) > 0 {
		t.Errorf("a failed export left %v", left)
	}
	if code, _, errOut := cli(t, "export", "cp1", "--format", "rar", "--db", store); code != exitUsage || !strings.Contains(errOut, `--format "rar": want tar or zip`) {
		t.Errorf("export --format rar: exit %d, %q; want a usage error", code, errOut)
	}
}

// sameTree reports whether two readTree results are equal.
func sameTree(a, b tree) bool {
	if len(a) != len(b) {
		return false
	}
	for p, v := range a {
		if b[p] != v {
			return false
		}
	}
	return true
}

// corruptPacks flips a byte in the middle of every pack of the store.
func corruptPacks(t *testing.T, store string) {
	t.Helper()
	n := 0
	filepath.WalkDir(filepath.Join(store, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".pack") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		n++
		return nil
	})
	if n == 0 {
		t.Fatal("no pack to damage")
	}
}

// untar unpacks a tar stream into a new directory.
func untar(t *testing.T, b []byte) string {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		unpack(t, dir, h.Name, h.FileInfo().Mode(), h.Linkname, tr)
	}
}

// unzip unpacks a zip archive into a new directory.
func unzip(t *testing.T, b []byte) string {
	t.Helper()
	dir := t.TempDir()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		target := ""
		if f.Mode()&fs.ModeSymlink != 0 {
			tb, _ := io.ReadAll(r)
			target = string(tb)
		}
		unpack(t, dir, f.Name, f.Mode(), target, r)
		r.Close()
	}
	return dir
}

// unpack writes one archive entry under dir.
func unpack(t *testing.T, dir, name string, mode fs.FileMode, target string, r io.Reader) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(name, "/")))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	switch {
	case mode.IsDir():
		err = os.MkdirAll(p, 0o755)
	case mode&fs.ModeSymlink != 0:
		err = os.Symlink(target, p)
	default:
		var b []byte
		if b, err = io.ReadAll(r); err == nil {
			err = os.WriteFile(p, b, mode.Perm())
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
