package fuzz

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/workspace"
	bolt "go.etcd.io/bbolt"
)

// rstArea is a fuzz worker's restore playground, reused for every exec:
//
//	<work>/store          the store (not watched: the engine writes there)
//	<work>/canary/file    canaries beside and above the restore root
//	<work>/r/canary/file
//	<work>/r/x/y          the root; restores go to <root>/sub/out
//
// Everything else under <work> is watched: a restore may create only
// <root>/sub and <root>/sub/out with its tree, and on failure nothing.
type rstArea struct {
	work, root, target string
	canaries           map[string][]byte
	base               map[string]string // the snapshot of a clean area
}

func rstNewArea(tb testing.TB, work string) *rstArea {
	tb.Helper()
	a := &rstArea{work: work, root: filepath.Join(work, "r", "x", "y"), canaries: map[string][]byte{}}
	a.target = filepath.Join(a.root, "sub", "out")
	if err := os.MkdirAll(a.root, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, c := range []string{"canary", "r/canary", "r/x/canary"} {
		p := filepath.Join(work, filepath.FromSlash(c), "file")
		content := []byte("canary " + c + "\n")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			tb.Fatal(err)
		}
		a.canaries[p] = content
	}
	a.base = a.snapshot(tb)
	return a
}

// snapshot describes every path under work but the store: kind, mode,
// size and content digest of files, link targets.
func (a *rstArea) snapshot(tb testing.TB) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(a.work, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(a.work, p)
		rel = filepath.ToSlash(rel)
		if rel == "store" {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %d %x", len(b), sha256.Sum256(b))
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + t
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		tb.Fatalf("walking %s: %v", a.work, err)
	}
	return out
}

func (a *rstArea) rel(p string) string {
	r, _ := filepath.Rel(a.work, p)
	return filepath.ToSlash(r)
}

// restore runs db.Restore of id into the target and checks what changed:
// on failure nothing (every new directory removed, the preset target still
// there), on success only the target's parent and the target's tree. Flag
// bit 1 creates the target as an empty directory first, bit 2 its parent.
func (a *rstArea) restore(t *testing.T, db *engine.DB, id string, opts *sbxdb.RestoreOptions, flags uint8) bool {
	t.Helper()
	if flags&4 != 0 {
		os.Mkdir(filepath.Dir(a.target), 0o755)
	}
	if flags&2 != 0 {
		os.MkdirAll(a.target, 0o755)
	}
	before := a.snapshot(t)
	_, err := db.Restore(blobCtx, id, a.target, opts)
	after := a.snapshot(t)
	for p, want := range a.canaries {
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Errorf("canary %s changed: %q, %v", p, got, err)
		}
	}
	for p, d := range before {
		if after[p] != d && !(p == a.rel(a.target) && err == nil) {
			t.Errorf("Restore (error %v) changed or removed %s: %q → %q", err, p, d, after[p])
		}
	}
	sub, out := a.rel(filepath.Dir(a.target)), a.rel(a.target)
	for p, d := range after {
		if _, ok := before[p]; ok {
			continue
		}
		switch {
		case err != nil:
			t.Errorf("failed Restore (%v) left %s behind (%s)", err, p, d)
		case p == sub || p == out || strings.HasPrefix(p, out+"/"):
		default:
			t.Errorf("Restore created %s (%s) outside its target", p, d)
		}
	}
	if err != nil {
		t.Logf("Restore %s: %v", id, err)
	}
	return err == nil
}

// clean puts the area back: removes the target's parent and anything else
// that is not in the clean snapshot (reported already if it was there).
func (a *rstArea) clean(t *testing.T) {
	t.Helper()
	os.RemoveAll(filepath.Dir(a.target))
	now := a.snapshot(t)
	var extra []string
	for p := range now {
		if _, ok := a.base[p]; !ok {
			extra = append(extra, p)
		}
	}
	slices.Sort(extra) // parents first: RemoveAll takes their children
	for _, p := range extra {
		os.RemoveAll(filepath.Join(a.work, filepath.FromSlash(p)))
	}
	for p, want := range a.canaries {
		os.WriteFile(p, want, 0o644)
	}
}

// checkTree checks that the target holds exactly the manifest's tree:
// files with their blob's bytes and mode 0755 or 0644, directories
// (recorded or implied), symlinks with their target, nothing else.
func (a *rstArea) checkTree(t *testing.T, files []chain.Entry, blobs map[string][]byte) {
	t.Helper()
	want := map[string]*chain.Entry{}
	for i := range files {
		e := &files[i]
		want[e.Path] = e
		for j := 0; j < len(e.Path); j++ {
			if e.Path[j] == '/' && want[e.Path[:j]] == nil {
				want[e.Path[:j]] = &chain.Entry{Path: e.Path[:j], Kind: chain.KindDir}
			}
		}
	}
	seen := map[string]bool{}
	filepath.WalkDir(a.target, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Errorf("walking the restored tree: %v", err)
			return nil
		}
		if p == a.target {
			return nil
		}
		rel, _ := filepath.Rel(a.target, p)
		rel = filepath.ToSlash(rel)
		seen[rel] = true
		e := want[rel]
		info, ierr := d.Info()
		switch {
		case e == nil:
			t.Errorf("Restore wrote %s, which the manifest does not hold", rel)
		case ierr != nil:
			t.Errorf("%s: %v", rel, ierr)
		case e.Kind == chain.KindDir:
			if !info.IsDir() {
				t.Errorf("%s: %v, want a directory", rel, info.Mode())
			}
		case e.Kind == chain.KindSymlink:
			if target, err := os.Readlink(p); err != nil || target != e.Target {
				t.Errorf("%s: link to %q (%v), want %q", rel, target, err, e.Target)
			}
		case e.Kind == chain.KindFile:
			perm := fs.FileMode(0o644)
			if e.Executable {
				perm = 0o755
			}
			b, err := os.ReadFile(p)
			switch {
			case !info.Mode().IsRegular() || info.Mode().Perm() != perm:
				t.Errorf("%s: mode %v, want a regular file %v", rel, info.Mode(), perm)
			case err != nil || !bytes.Equal(b, blobs[e.BlobKey]):
				t.Errorf("%s: %d bytes (%v), not the blob's %d", rel, len(b), err, len(blobs[e.BlobKey]))
			}
		}
		return nil
	})
	for p := range want {
		if !seen[p] {
			t.Errorf("Restore did not write %s", p)
		}
	}
}

// rstLexicalEscape is the rule of SPEC §5.3: a symlink target that is
// absolute or, joined to the link's directory, leaves the root.
func rstLexicalEscape(link, target string) bool {
	if strings.HasPrefix(target, "/") || strings.HasPrefix(target, "\\") || filepath.IsAbs(target) {
		return true
	}
	r := path.Join(path.Dir(link), target)
	return r == ".." || strings.HasPrefix(r, "../")
}

// rstFate is where the OS takes a symlink followed inside a root.
type rstFate int

const (
	rstInside    rstFate = iota // it stays inside the root: dangling, looping or not
	rstLeaves                   // it leaves the root or reaches an absolute target
	rstUndecided                // the OS could not follow it to the end
)

// rstResolve follows the symlinks of links (a slash path under a root →
// its target) with the OS, not with the engine's rule, and says where each
// leads. Only the links are made, in a fresh directory. Following a link
// is resolving its target from the link's directory: an absolute target
// starts from "/", outside; any other is resolved by
// os.Root.MkdirAll(<link's directory>/<target>/.). os.Root follows
// symlinks component by component, as the kernel does, and refuses to
// leave the root: a ".." above the root, or an absolute target on the way,
// is an escape even when the path would come back in. MkdirAll creates
// each missing component as a directory, so a path through a name the tree
// lacks (or holds as a file) resolves as it would once that name became a
// directory: a dangling link leaves when some later mkdir would take it
// out.
//
// os.Root gives up (ELOOP) after 8 links, the kernel after 40, as the
// engine does (counted from the target: the link itself is not one of
// them). When os.Root gives up, the kernel resolves the target too: if it
// gives up as well, the links loop (or repeat past 40) and the link points
// nowhere, inside. The kernel does not stop at the root, but the root has
// a random name in a directory of its own, so a path that left it unseen
// past os.Root's 8 links reaches none of these links again. Any other
// outcome, or error, is undecided.
func rstResolve(t *testing.T, links map[string]string) map[string]rstFate {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = root.Stat("..")
	escape := errors.Unwrap(err) // os.Root's own "path escapes from parent"
	if escape == nil {
		t.Fatalf("os.Root let \"..\" out of the root: %v", err)
	}
	for p, target := range links {
		if d := path.Dir(p); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				t.Fatalf("making the directory of symlink %q: %v", p, err)
			}
		}
		if err := root.Symlink(target, p); err != nil {
			t.Fatalf("making symlink %q -> %q: %v", p, target, err)
		}
	}
	fates := map[string]rstFate{}
	for p, target := range links {
		if path.IsAbs(target) {
			fates[p] = rstLeaves
			continue
		}
		name := target + "/."
		if d := path.Dir(p); d != "." {
			name = d + "/" + name
		}
		err := root.MkdirAll(name, 0o755)
		switch {
		case err == nil:
			fates[p] = rstInside
		case errors.Is(err, escape):
			fates[p] = rstLeaves
		case errors.Is(err, syscall.ELOOP):
			_, kerr := os.Stat(dir + "/" + name) // not filepath.Join: it would clean ".." away
			if errors.Is(kerr, syscall.ELOOP) {
				fates[p] = rstInside
				break
			}
			err = fmt.Errorf("%w; the kernel: %v", err, kerr)
			fallthrough
		default:
			fates[p] = rstUndecided
			t.Logf("the OS could not follow symlink %q -> %q: %v", p, target, err)
		}
	}
	return fates
}

// rstLinks maps each symlink of files to its target.
func rstLinks(files []chain.Entry) map[string]string {
	links := map[string]string{}
	for _, e := range files {
		if e.Kind == chain.KindSymlink {
			links[e.Path] = e.Target
		}
	}
	return links
}

// rstLinksOnDisk maps each symlink of the tree under dir (slash paths) to
// its target.
func rstLinksOnDisk(t *testing.T, dir string) map[string]string {
	t.Helper()
	links := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		target, err := os.Readlink(p)
		rel, _ := filepath.Rel(dir, p)
		links[filepath.ToSlash(rel)] = target
		return err
	})
	if err != nil {
		t.Errorf("reading the restored symlinks: %v", err)
	}
	return links
}

// checkLinks checks, for a restore without AllowEscapingSymlinks, that no
// restored symlink points outside the target: lexically, or followed by
// the OS through the other symlinks restored (rstResolve).
func (a *rstArea) checkLinks(t *testing.T, files []chain.Entry) {
	t.Helper()
	fates := rstResolve(t, rstLinksOnDisk(t, a.target))
	for _, e := range files {
		if e.Kind != chain.KindSymlink {
			continue
		}
		switch {
		case rstLexicalEscape(e.Path, e.Target):
			t.Errorf("Restore accepted symlink %q -> %q, which leaves the tree", e.Path, e.Target)
		case fates[e.Path] == rstLeaves:
			recKnown(t, "symlink-chain", "Restore accepted symlink %q -> %q, which leaves the tree through another restored symlink", e.Path, e.Target)
		}
	}
}

// rstMissing is a key no store holds.
var rstMissing = testkit.FileKeyOf([]byte("never stored"))

// rstParse builds a manifest from text, one entry a line (at most 32):
// the first byte is the kind, the rest the path; a symlink's target
// follows a tab.
//
//	f file "hello\n"   F file, 11 KB of text (zstd)   x executable, 3000 random bytes
//	e empty file       m file whose blob is not stored
//	s file whose size is not its blob's              d directory
//	l symlink (path TAB target)
//
// A line starting with any other byte is a file "hello\n" at the whole line.
func rstParse(fx *blobFixture, text string) []chain.Entry {
	var files []chain.Entry
	for line := range strings.SplitSeq(text, "\n") {
		if len(files) == 32 {
			break
		}
		if line == "" {
			continue
		}
		hello := fx.small[0]
		e := chain.Entry{Path: line[1:], Kind: chain.KindFile, BlobKey: hello, Size: int64(len(fx.blobs[hello]))}
		set := func(key string) { e.BlobKey, e.Size = key, int64(len(fx.blobs[key])) }
		switch line[0] {
		case 'f':
		case 'F':
			set(fx.small[1])
		case 'x':
			set(fx.small[2])
			e.Executable = true
		case 'e':
			set(fx.small[3])
		case 'm':
			e.BlobKey = rstMissing
		case 's':
			e.Size++
		case 'd':
			e = chain.Entry{Path: line[1:], Kind: chain.KindDir}
		case 'l':
			p, target, _ := strings.Cut(line[1:], "\t")
			e = chain.Entry{Path: p, Kind: chain.KindSymlink, Target: target}
		default:
			e.Path = line
		}
		files = append(files, e)
	}
	return files
}

// rstRestorable says whether a restore of files must succeed: the checks
// of SPEC §6.5 and §10 Q5, Q20 pass (manifest rules, no drive prefix, the
// default policy admits every entry, symlinks do not escape unless
// allowed, every blob is stored with the recorded size), and the file
// system can hold the names. chainOnly says the one reason to refuse is a
// symlink that escapes through another one (the symlink-chain
// regression); undecided that the OS could not follow one of the symlinks
// to the end (rstResolve), so that refusing is allowed too.
func rstRestorable(t *testing.T, fx *blobFixture, files []chain.Entry, allowEscape bool) (ok, chainOnly, undecided bool) {
	ok = rstRestorableLexically(fx, files, allowEscape)
	if ok && !allowEscape {
		for _, fate := range rstResolve(t, rstLinks(files)) {
			switch fate {
			case rstLeaves:
				return false, true, false
			case rstUndecided:
				undecided = true
			}
		}
	}
	return ok, false, undecided
}

func rstRestorableLexically(fx *blobFixture, files []chain.Entry, allowEscape bool) bool {
	if chain.ValidateFiles(files) != nil {
		return false
	}
	var policy workspace.Policy
	for _, e := range files {
		p := e.Path
		if len(p) >= 2 && p[1] == ':' || !policy.Admits(p, e.Kind) || len(p) > 3000 {
			return false
		}
		for seg := range strings.SplitSeq(p, "/") {
			if len(seg) > 255 {
				return false
			}
		}
		switch e.Kind {
		case chain.KindFile:
			if b, ok := fx.blobs[e.BlobKey]; !ok || int64(len(b)) != e.Size {
				return false
			}
		case chain.KindSymlink:
			if e.Target == "" || strings.IndexByte(e.Target, 0) >= 0 || !utf8.ValidString(e.Target) || len(e.Target) > 3000 {
				return false
			}
			if !allowEscape && rstLexicalEscape(p, e.Target) {
				return false
			}
		}
	}
	return true
}

// FuzzRestore restores manifests built from fuzz input (rstParse: files,
// executables, directories, symlinks; blobs stored, missing, or of another
// size; any path bytes) into <root>/sub/out, with the checkpoint stored
// both through db.Append (validated) and raw with meta.PutRecord (so that
// restore's own defences face what validation would refuse). Flag bit 0
// sets AllowEscapingSymlinks; bits 1 and 2 create the target and its
// parent beforehand; bit 3 sorts the manifest by path (capture's order).
//
// It proves that a restore never creates, changes or removes anything
// outside the target (canaries beside and above it stay intact, nothing
// appears beside it) and, when it fails, leaves nothing new at all; that it
// succeeds exactly when the manifest is restorable (rstRestorable: a
// symlink the OS cannot follow to the end may be refused) and then writes
// exactly the manifest's tree with the blobs' bytes and modes; that
// without AllowEscapingSymlinks no restored symlink points outside the
// target, lexically or, as the OS follows it, through another restored
// symlink; that Append accepts exactly the manifests chain.ValidateFiles
// accepts and that both stored forms restore alike; all within 5 s an
// exec.
func FuzzRestore(f *testing.F) {
	fx := blobTemplate(f)
	for _, s := range []string{
		"fa.txt\nxbin/run\ndempty\nFdocs/readme\nllink\ta.txt",
		"f../x", "f/etc/passwd", "fa/../../x", "f./x", "fa//b", "fa/", "f",
		"ll\t../../outside\nfl/x",
		"ll\t../../outside",
		"ld/l\t../x",
		"fC:evil", "fC:/evil", "fa\\..\\..\\x", "f\\x", "fa\x00b",
		"fa\nfa", "fa\nda", "fa\nfa/b", "fa/b\nfa", "dd\nfd/x",
		"la\t.\nlb\ta/..", "la\t.\nlb\ta/../../escape", "la\tb\nlb\ta/x", "ld/l\t../d/l/..",
		"ll\t/etc", "ll\t", "ll\t\x00", "mmissing", "ssize", "fok\nmmissing",
		"f.git/config", "f.env", "fnode_modules/x/y", "fCLAUDE.md",
		"e" + strings.Repeat("n", 300),
	} {
		for _, flags := range []uint8{0, 1, 6} {
			f.Add(s, flags)
		}
	}

	work := f.TempDir()
	store := filepath.Join(work, "store")
	blobStage(f, fx, store)
	rst := rstNewArea(f, work)

	f.Fuzz(func(t *testing.T, manifest string, flags uint8) {
		files := rstParse(fx, manifest)
		if flags&8 != 0 {
			slices.SortStableFunc(files, func(a, b chain.Entry) int { return strings.Compare(a.Path, b.Path) })
		}
		blobWithin(t, func() { rstExec(t, fx, store, rst, files, flags) })
	})
}

func rstExec(t *testing.T, fx *blobFixture, store string, rst *rstArea, files []chain.Entry, flags uint8) {
	allow := flags&1 != 0
	blobReset(t, fx, store, fx.db, "")
	raw := &chain.Checkpoint{ID: "rst-raw", ThreadID: "rst-raw-t", CreatedAt: 1, Reason: chain.ReasonAutomatic, Files: files}
	blobRawUpdate(t, store, func(tx *bolt.Tx) error { return meta.PutRecord(kv.Bolt(tx), raw) })

	db, err := blobOpen(t, store)
	if err != nil {
		t.Errorf("Open: %v", err)
		return
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		blobLockFree(t, store)
	}()
	l, err := db.AcquireWriter(blobCtx, "rst-app-t")
	if err != nil {
		t.Errorf("AcquireWriter: %v", err)
		return
	}
	app := &chain.Checkpoint{ID: "rst-app", ThreadID: "rst-app-t", CreatedAt: 1, Reason: chain.ReasonAutomatic, Files: files}
	_, appErr := db.Append(blobCtx, chain.AppendInput{Checkpoint: app, Writer: l.Writer})
	if verr := chain.ValidateFiles(files); (appErr == nil) != (verr == nil) {
		t.Errorf("Append: %v; ValidateFiles: %v", appErr, verr)
	}

	restorable, chainOnly, undecided := rstRestorable(t, fx, files, allow)
	opts := &sbxdb.RestoreOptions{AllowEscapingSymlinks: allow}
	var outcomes []bool
	for _, id := range []string{"rst-raw", "rst-app"} {
		if id == "rst-app" && appErr != nil {
			continue
		}
		ok := rst.restore(t, db, id, opts, flags)
		outcomes = append(outcomes, ok)
		switch {
		case ok && chainOnly:
			recKnown(t, "symlink-chain", "Restore %s accepted a symlink that escapes through another one: %+v", id, files)
		case ok && !restorable:
			t.Errorf("Restore %s accepted a manifest it must refuse: %+v", id, files)
		case !ok && restorable && !undecided:
			t.Errorf("Restore %s refused a restorable manifest: %+v", id, files)
		}
		if ok {
			rst.checkTree(t, files, fx.blobs)
			if !allow {
				rst.checkLinks(t, files)
			}
		}
		rst.clean(t)
	}
	if len(outcomes) == 2 && outcomes[0] != outcomes[1] {
		t.Errorf("the appended and the raw checkpoint restore differently: %v", outcomes)
	}
}
