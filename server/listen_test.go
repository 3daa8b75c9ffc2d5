package server

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/client"
)

func TestParseAddr(t *testing.T) {
	for _, tc := range []struct {
		addr, network, address string
	}{
		{"unix:/run/s.sock", "unix", "/run/s.sock"},
		{"unix:rel.sock", "unix", "rel.sock"},
		{"tcp:127.0.0.1:7070", "tcp", "127.0.0.1:7070"},
		{"tcp:[::1]:0", "tcp", "[::1]:0"},
		{"tcp::7070", "tcp", ":7070"},
		{"unix:", "", ""},
		{"tcp:127.0.0.1", "", ""},
		{"tcp:127.0.0.1:", "", ""},
		{"http://localhost:80", "", ""},
		{"/run/s.sock", "", ""},
	} {
		network, address, err := ParseAddr(tc.addr)
		if network != tc.network || address != tc.address || (err == nil) != (tc.network != "") {
			t.Errorf("ParseAddr(%q) = %q, %q, %v", tc.addr, network, address, err)
		}
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "127.8.9.10:1": true, "[::1]:1": true, "localhost:1": true, "LocalHost:1": true,
		":1": false, "0.0.0.0:1": false, "[::]:1": false, "10.0.0.1:1": false, "example.com:1": false, "localhost.evil.com:1": false,
	} {
		if IsLoopback(addr) != want {
			t.Errorf("IsLoopback(%q) = %v", addr, !want)
		}
	}
}

func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	l, err := Listen("unix:" + path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want the socket alone", len(entries))
	}
	if got := AddrString(l); got != "unix:"+path {
		t.Errorf("AddrString = %q", got)
	}
	// A live socket is refused, naming it.
	go func(l net.Listener) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}(l)
	if _, err := Listen("unix:" + path); !errors.Is(err, ErrSocketInUse) || !strings.Contains(err.Error(), path) {
		t.Errorf("a second Listen: %v, want ErrSocketInUse naming %s", err, path)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Close left the socket file: %v", err)
	}

	// A stale socket (nothing answers) is replaced.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	l, err = Listen("unix:" + path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	// Close leaves a file that replaced its socket.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
		t.Errorf("Close removed the file that replaced its socket: %q, %v", b, err)
	}
	// Any file that is no socket is left alone.
	if _, err := Listen("unix:" + path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a regular file: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
		t.Errorf("Listen touched the regular file: %q, %v", b, err)
	}
}

func TestListenTCP(t *testing.T) {
	l, err := Listen("tcp:127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if a := AddrString(l); !strings.HasPrefix(a, "tcp:127.0.0.1:") || strings.HasSuffix(a, ":0") {
		t.Errorf("AddrString = %q", a)
	}
}

// Capture and restore on TCP touch only directories below AllowDirs,
// resolved; refused ones change nothing.
func TestAllowDirs(t *testing.T) {
	db := openDB(t)
	w := writer(t, db, "main")
	root := t.TempDir()
	allowed := filepath.Join(root, "allowed")
	outside := filepath.Join(root, "outside")
	src := tree(t, 3, 10)
	for _, d := range []string{allowed, outside} {
		if err := os.CopyFS(filepath.Join(d, "ws"), os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(allowed, "link")))
	must(os.Symlink(filepath.Join(outside, "new"), filepath.Join(allowed, "dangling")))
	// The prefix itself is reached through a symlink: it is resolved.
	must(os.Symlink(allowed, filepath.Join(root, "alias")))
	ctx := context.Background()

	c, _ := tcp(t, New(db, Options{AllowDirs: []string{filepath.Join(root, "alias")}}), "")
	for _, dir := range []string{
		filepath.Join(allowed, "..", "outside", "ws"),
		filepath.Join(allowed, "link", "ws"),
		filepath.Join(allowed, "link"),
		outside,
		root,
	} {
		_, err := c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: dir})
		wantCode(t, "capture of "+dir, err, CodeForbidden, client.ErrForbidden)
		if h := head(t, db, "main"); h != "" {
			t.Fatalf("a forbidden capture appended %q", h)
		}
	}
	res, err := c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: filepath.Join(root, "alias", "ws"), ID: "cp1"})
	if err != nil || res.Stats.Files != 3 {
		t.Fatalf("capture below the allowed prefix: %+v, %v", res, err)
	}

	for _, dir := range []string{
		filepath.Join(allowed, "..", "outside", "r1"),
		filepath.Join(allowed, "link", "r2"),
		filepath.Join(allowed, "dangling", "r3"),
		filepath.Join(allowed, "dangling"),
	} {
		_, err := c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: dir})
		wantCode(t, "restore to "+dir, err, CodeForbidden, client.ErrForbidden)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("forbidden restores wrote into %s: %d entries", outside, len(entries))
	}
	st, err := c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: filepath.Join(root, "alias", "deep", "r4")})
	if err != nil || st.Files != 3 {
		t.Fatalf("restore below the allowed prefix: %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(allowed, "deep", "r4", "d0", "f0000.txt")); err != nil {
		t.Errorf("the restored tree: %v", err)
	}
	_, err = c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: "deep/r5"})
	wantCode(t, "restore to a relative path", err, CodeBadRequest, client.ErrBadRequest)

	// Without AllowDirs, TCP touches no directory; a unix socket any.
	s := New(db, Options{})
	c, _ = tcp(t, s, "")
	_, err = c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: filepath.Join(allowed, "ws")})
	wantCode(t, "capture on TCP without AllowDirs", err, CodeForbidden, client.ErrForbidden)
	_, err = c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp1", Dir: filepath.Join(allowed, "r6")})
	wantCode(t, "restore on TCP without AllowDirs", err, CodeForbidden, client.ErrForbidden)
	if h := head(t, db, "main"); h != "cp1" {
		t.Fatalf("head %q, want cp1", h)
	}
	u := serveUnix(t, s)
	if _, err := u.c.Capture(ctx, client.CaptureRequest{Writer: w, Dir: filepath.Join(outside, "ws"), ID: "cp2"}); err != nil {
		t.Errorf("capture on the unix socket: %v", err)
	}
	if _, err := u.c.Restore(ctx, client.RestoreRequest{CheckpointID: "cp2", Dir: filepath.Join(outside, "r7")}); err != nil {
		t.Errorf("restore on the unix socket: %v", err)
	}
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		prefix, p string
		want      bool
	}{
		{"/a", "/a", true},
		{"/a", "/a/b", true},
		{"/a", "/ab", false},
		{"/a", "/", false},
		{"/a", "/a/..b", true},
		{"/", "/x", true},
	} {
		if got := within(tc.prefix, tc.p); got != tc.want {
			t.Errorf("within(%q, %q) = %v", tc.prefix, tc.p, got)
		}
	}
}
