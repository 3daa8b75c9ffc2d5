//go:build linux

package engine_test

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/workspace"
	"golang.org/x/sys/unix"
)

// unsupportedEntry is one entry a capture cannot record, how to make it,
// and what the capture says of it.
type unsupportedEntry struct {
	path   string
	make   func(t *testing.T, p string) bool // false: not possible here, skip
	err    error                             // the capture's error without SkipUnsupported
	msg    string                            // in that error
	detail string                            // the warning's detail with it
}

func unsupportedEntries() []unsupportedEntry {
	node := func(mode uint32, dev int) func(t *testing.T, p string) bool {
		return func(t *testing.T, p string) bool {
			os.MkdirAll(filepath.Dir(p), 0o755)
			return unix.Mknod(p, mode|0o644, dev) == nil
		}
	}
	link := func(target string) func(t *testing.T, p string) bool {
		return func(t *testing.T, p string) bool {
			os.MkdirAll(filepath.Dir(p), 0o755)
			return os.Symlink(target, p) == nil
		}
	}
	file := func(t *testing.T, p string) bool {
		os.MkdirAll(filepath.Dir(p), 0o755)
		return os.WriteFile(p, []byte("x"), 0o644) == nil
	}
	return []unsupportedEntry{
		{"pipes/fifo", node(unix.S_IFIFO, 0), chain.ErrUnsupportedEntry, `"pipes/fifo" is a named pipe, not a regular file, directory or symlink`, "a named pipe"},
		{"sock", node(unix.S_IFSOCK, 0), chain.ErrUnsupportedEntry, `"sock" is a socket, not`, "a socket"},
		{"dev/null", node(unix.S_IFCHR, int(unix.Mkdev(1, 3))), chain.ErrUnsupportedEntry, `"dev/null" is a character device, not`, "a character device"},
		{"bad\xffname", file, chain.ErrUnsupportedEntry, "cannot be recorded", "the name is not valid UTF-8"},
		{`back\slash`, file, chain.ErrUnsupportedEntry, "cannot be recorded", "the name holds a backslash"},
		{"C:", file, chain.ErrInvalidWorkspace, "not a valid manifest path", "not a valid manifest path"},
		{"links/abs", link("/etc/passwd"), chain.ErrUnsupportedEntry, "points outside the workspace", `a symlink to "/etc/passwd", outside the workspace`},
		{"links/up", link("../../x"), chain.ErrUnsupportedEntry, "points outside the workspace", `a symlink to "../../x", outside the workspace`},
		{"links/bad", link("t\xff"), chain.ErrUnsupportedEntry, "invalid target", "a symlink whose target is empty, holds NUL or is not valid UTF-8"},
	}
}

// TestCaptureUnsupportedEntries: each entry a manifest cannot hold fails
// the capture, saying what it is in words, and appends nothing; with
// SkipUnsupported all are left out with one warning each, a directory they
// leave empty is recorded empty, and the capture succeeds.
func TestCaptureUnsupportedEntries(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	var made []unsupportedEntry
	for _, e := range unsupportedEntries() {
		t.Run(e.detail, func(t *testing.T) {
			ws := filepath.Join(t.TempDir(), "ws")
			write(t, ws, "ok", []byte("ok"), 0o644)
			if !e.make(t, filepath.Join(ws, e.path)) {
				t.Skipf("cannot make %s here", e.path)
			}
			head, _ := f.db.Head(ctx, "t1")
			_, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws})
			if !errors.Is(err, e.err) || !strings.Contains(err.Error(), e.msg) {
				t.Fatalf("Capture = %v, want %v saying %q", err, e.err, e.msg)
			}
			if strings.Contains(err.Error(), "---") {
				t.Errorf("the error shows a mode string: %v", err)
			}
			if h, _ := f.db.Head(ctx, "t1"); h != head {
				t.Fatal("a refused capture moved the head")
			}
			res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, SkipUnsupported: true})
			if err != nil {
				t.Fatal(err)
			}
			want := []sbxdb.CaptureWarning{{Path: e.path, What: sbxdb.EntrySkipped, Detail: e.detail}}
			if !slices.Equal(res.Warnings, want) || res.Stats.Skipped != 1 || res.Stats.Files != 1 {
				t.Errorf("warnings %v, stats %+v; want %v", res.Warnings, res.Stats, want)
			}
			made = append(made, e)
		})
	}

	// All at once, beside what is recorded.
	ws := filepath.Join(t.TempDir(), "ws")
	write(t, ws, "ok", []byte("ok"), 0o644)
	write(t, ws, "links/in", []byte("in"), 0o644)
	os.Symlink("in", filepath.Join(ws, "links/good"))
	os.Symlink("up", filepath.Join(ws, "links/via")) // leaves through links/up
	want := map[string]string{"links/via": `a symlink to "up", outside the workspace`}
	for _, e := range made {
		e.make(t, filepath.Join(ws, e.path))
		want[e.path] = e.detail
	}
	res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, SkipUnsupported: true, FailOnChange: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, w := range res.Warnings {
		if w.What != sbxdb.EntrySkipped {
			t.Errorf("warning %v is not a skip", w)
		}
		got[w.Path] = w.Detail
	}
	if !maps.Equal(got, want) || res.Stats.Skipped != len(want) {
		t.Errorf("warnings %v (%d skipped), want %v", got, res.Stats.Skipped, want)
	}
	var paths []string
	for _, e := range res.Checkpoint.Files {
		paths = append(paths, e.Path+":"+string(e.Kind))
	}
	wantPaths := []string{"links/good:symlink", "links/in:file", "ok:file"}
	for _, e := range made {
		if d := path.Dir(e.path); d != "." && d != "links" {
			wantPaths = append(wantPaths, d+":dir") // left empty by what was skipped
		}
	}
	slices.Sort(wantPaths)
	if !slices.Equal(paths, wantPaths) {
		t.Errorf("manifest %q, want %q", paths, wantPaths)
	}
	if s := (sbxdb.CaptureWarning{Path: "a/fifo", What: sbxdb.EntrySkipped, Detail: "a named pipe"}).String(); s != `"a/fifo" skipped: a named pipe` {
		t.Errorf("warning string %q", s)
	}
}

// TestCaptureUnsupportedNotIncluded: a named pipe, or a name a manifest
// cannot hold, that the policy leaves out is counted, not refused.
func TestCaptureUnsupportedNotIncluded(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(t.TempDir(), "ws")
	write(t, ws, "src/a.go", []byte("package a"), 0o644)
	write(t, ws, ".env\xff", []byte("S=1"), 0o644)
	write(t, ws, `src/a\b.pipe`, []byte("x"), 0o644)
	if err := unix.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(ws, "x.pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, _ := workspace.Policy{}.WithGlobs([]string{"*.pipe"}, []string{"src/"})
	res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"not included": 1, "--exclude *.pipe": 2, ".env*": 1}; !maps.Equal(res.Stats.ExcludedByRule, want) || len(res.Warnings) != 0 {
		t.Errorf("stats %+v, warnings %v; want %v excluded", res.Stats, res.Warnings, want)
	}
}

// TestCaptureUnreadable: a file or directory that cannot be opened fails
// the capture and appends nothing; with SkipUnsupported it is left out with
// a warning saying why. Root reads everything, so the failure is injected
// at the open (capture.open, capture.openDir); TestCaptureUnreadableEACCES
// makes a real one where it can.
func TestCaptureUnreadable(t *testing.T) {
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := filepath.Join(t.TempDir(), "ws")
	write(t, ws, "ok", []byte("ok"), 0o644)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(ws, "ok"), old, old)
	// Two captures: the second trusts the first's stat cache, so that
	// "ok" is not read again below and only "locked" is.
	for range 2 {
		f.capture(t, ws)
	}
	head, _ := f.db.Head(ctx, "t1")
	write(t, ws, "locked", []byte("secret"), 0o644)
	eio := &fs.PathError{Op: "open", Path: "locked", Err: syscall.EIO}
	remove := f.db.OnPoint("capture.open", func() error { return eio })
	_, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws})
	// The message names the path once: not the *fs.PathError's op and path.
	if !errors.Is(err, chain.ErrInvalidWorkspace) || !engine.IsUnreadableEntry(err) || err.Error() != chain.CodeInvalidWorkspace+`: reading "locked": input/output error` {
		t.Fatalf("capture of an unreadable file: %v", err)
	}
	if h, _ := f.db.Head(ctx, "t1"); h != head {
		t.Fatal("a refused capture moved the head")
	}
	res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, SkipUnsupported: true})
	remove()
	if err != nil {
		t.Fatal(err)
	}
	want := []sbxdb.CaptureWarning{{Path: "locked", What: sbxdb.EntrySkipped, Detail: "cannot be read: input/output error"}}
	if !slices.Equal(res.Warnings, want) || res.Stats.Skipped != 1 || res.Stats.Files != 1 || hasEntry(res.Checkpoint, "locked", chain.KindFile) {
		t.Errorf("warnings %v, stats %+v; want %v and only ok recorded", res.Warnings, res.Stats, want)
	}

	// A directory.
	os.Remove(filepath.Join(ws, "locked"))
	write(t, ws, "sub/a", []byte("a"), 0o644)
	head, _ = f.db.Head(ctx, "t1")
	defer f.db.OnPoint("capture.openDir", func() error { return &fs.PathError{Op: "openat", Path: "sub", Err: syscall.EIO} })()
	_, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws})
	if !errors.Is(err, chain.ErrInvalidWorkspace) || !engine.IsUnreadableEntry(err) || err.Error() != chain.CodeInvalidWorkspace+`: reading directory "sub": input/output error` {
		t.Fatalf("capture of an unreadable directory: %v", err)
	}
	if h, _ := f.db.Head(ctx, "t1"); h != head {
		t.Fatal("a refused capture moved the head")
	}
	res, err = f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, SkipUnsupported: true})
	if err != nil {
		t.Fatal(err)
	}
	want = []sbxdb.CaptureWarning{{Path: "sub", What: sbxdb.EntrySkipped, Detail: "the directory cannot be read: input/output error"}}
	if !slices.Equal(res.Warnings, want) || len(res.Checkpoint.Files) != 1 {
		t.Errorf("warnings %v, manifest %v; want %v and only ok recorded", res.Warnings, res.Checkpoint.Files, want)
	}
}

// TestCaptureMissingWorkspace: a workspace that does not exist is named
// once in the error, which is not that of an unreadable entry.
func TestCaptureMissingWorkspace(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(t.TempDir(), "nonexist")
	_, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws})
	if want := chain.CodeInvalidWorkspace + ": workspace " + ws + ": no such file or directory"; err == nil || err.Error() != want || engine.IsUnreadableEntry(err) {
		t.Fatalf("capture of a missing workspace: %v; want %s", err, want)
	}
	if h, _ := f.db.Head(context.Background(), "t1"); h != "" {
		t.Fatal("a refused capture moved the head")
	}
}

// TestCaptureUnreadableEACCES: a file and a directory without read
// permission, for a user the permissions bind.
func TestCaptureUnreadableEACCES(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files without read permission")
	}
	ctx := context.Background()
	f := newCaptureFixture(t)
	ws := filepath.Join(t.TempDir(), "ws")
	write(t, ws, "ok", []byte("ok"), 0o644)
	write(t, ws, "locked", []byte("secret"), 0o000)
	write(t, ws, "closed/a", []byte("a"), 0o644)
	os.Chmod(filepath.Join(ws, "closed"), 0o000)
	t.Cleanup(func() { os.Chmod(filepath.Join(ws, "closed"), 0o755) })
	if _, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws}); !errors.Is(err, chain.ErrInvalidWorkspace) {
		t.Fatalf("capture with unreadable entries: %v", err)
	}
	if h, _ := f.db.Head(ctx, "t1"); h != "" {
		t.Fatal("a refused capture moved the head")
	}
	res, err := f.db.Capture(ctx, sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, SkipUnsupported: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []sbxdb.CaptureWarning{
		{Path: "closed", What: sbxdb.EntrySkipped, Detail: "the directory cannot be read: permission denied"},
		{Path: "locked", What: sbxdb.EntrySkipped, Detail: "cannot be read: permission denied"},
	}
	if !slices.Equal(res.Warnings, want) || res.Stats.Files != 1 {
		t.Errorf("warnings %v, stats %+v; want %v", res.Warnings, res.Stats, want)
	}
}

// TestCaptureSkippedRequireFiles: a workspace whose only file is skipped
// records no file, which RequireFiles refuses.
func TestCaptureSkippedRequireFiles(t *testing.T) {
	f := newCaptureFixture(t)
	ws := filepath.Join(t.TempDir(), "ws")
	os.MkdirAll(ws, 0o755)
	if err := unix.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w.Writer, Dir: ws, SkipUnsupported: true, RequireFiles: true})
	if !errors.Is(err, sbxdb.ErrEmptyCapture) {
		t.Fatalf("capture of a lone named pipe: %v", err)
	}
	if h, _ := f.db.Head(context.Background(), "t1"); h != "" {
		t.Fatal("a refused capture moved the head")
	}
}
