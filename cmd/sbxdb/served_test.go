package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/server"
)

// Every command line a test runs through cli runs twice: as the test
// wrote it, on the store's files, and through a server of a copy of the
// store taken just before (server.Listen and Serve on DIR/sbxdb.sock, as
// sbxdb serve runs them). The two runs must give the same exit status and
// the same output once what differs by nature is normalised: the copy's
// paths, durations, the random ids of checkpoints captured without --id,
// the packing of small blobs, and what the server's writable open of the
// copy changed in the file. A restore writes into a copy of its target,
// and the two trees written must be the same. compact and migrate must
// refuse, naming the server.

// localOnlyTests holds the names of the tests whose command lines run
// without the served twin.
var localOnlyTests sync.Map

// localOnly runs t's command lines without the served twin: t is about a
// store's files as this process finds them (another process holding them,
// what opening them does), which a server opening them changes.
func localOnly(t *testing.T) { localOnlyTests.Store(t.Name(), true) }

func isLocalOnly(t *testing.T) bool {
	for name := t.Name(); ; {
		if _, ok := localOnlyTests.Load(name); ok {
			return true
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// twin is the served run of one command line.
type twin struct {
	c      *command
	dir    string   // the store the command line names
	store  string   // the copy the server serves
	served []string // the command line, naming the copy
	// target is restore's DIR and twinTarget the served run's.
	target, twinTarget string

	db         *engine.DB
	stopServer func() error // stops the server; its error

	code           int
	stdout, stderr string
}

// newTwin prepares the served run of args: it copies the store and starts
// a server of the copy. It returns nil when there is nothing to compare:
// t is localOnly, args is a usage error, names a server itself, or names
// no store (unless the command creates one), or the copy cannot be served;
// and with -short, which runs each command line once.
func newTwin(t *testing.T, args []string) *twin {
	t.Helper()
	if len(args) == 0 || testing.Short() || isLocalOnly(t) {
		return nil
	}
	c, inv, pos, err := parseLine(args)
	if c == nil || c.noStore || err != nil || inv.server != "" || os.Getenv(serverEnv) != "" {
		return nil
	}
	tw := &twin{c: c, dir: inv.dir}
	if tw.dir == "" {
		tw.dir = defaultDir()
	}
	_, err = os.Stat(filepath.Join(tw.dir, engine.DBFile))
	hasStore := err == nil
	if !hasStore && !c.creates {
		return nil
	}
	root, err := os.MkdirTemp("", "sbxtwin") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	tw.store = filepath.Join(root, "store")
	if hasStore {
		copyDir(t, tw.dir, tw.store)
		// No server serves what is no store to this build: a directory
		// without one (serve would create it), or one of an older
		// format (serve would migrate it).
		probe, err := engine.Open(tw.store, &engine.Options{ReadOnly: true})
		if errors.Is(err, sbxdb.ErrNoStore) || errors.Is(err, sbxdb.ErrFormat) {
			return nil
		}
		if err == nil {
			probe.Close()
		}
	}
	tw.served = withDB(args, tw.store)
	if c == restoreCmd {
		tw.target = pos[len(pos)-1]
		tw.twinTarget = filepath.Join(root, "out", filepath.Base(tw.target))
		if fi, err := os.Stat(tw.target); err == nil && fi.IsDir() {
			if err := os.MkdirAll(tw.twinTarget, 0o755); err != nil {
				t.Fatal(err)
			}
			makeTree(t, tw.twinTarget, readTree(t, tw.target))
		}
		for i := len(tw.served) - 1; i > 0; i-- {
			if tw.served[i] == tw.target {
				tw.served[i] = tw.twinTarget
				break
			}
		}
	}

	tw.db, err = engine.Open(tw.store, &engine.Options{NoSync: true})
	if err != nil {
		t.Logf("sbxdb %s: no served run: the copy of the store does not open: %v", strings.Join(args, " "), err)
		return nil
	}
	l, err := server.Listen("unix:" + filepath.Join(tw.store, socketName))
	if err != nil {
		tw.db.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.New(tw.db, server.Options{}).Serve(ctx, l) }()
	tw.stopServer = func() error {
		cancel()
		return <-served
	}
	return tw
}

// parseLine parses the command line args as a run does, without running
// it: the command it runs (nil for none of sbxdb's, such as help), the
// invocation with its flags, the positional arguments, and the usage
// error when it does not parse.
func parseLine(args []string) (*command, *invocation, []string, error) {
	inv := &invocation{ctx: context.Background(), out: io.Discard, errOut: io.Discard}
	t := newTree(inv, args)
	cmd, rest, err := t.root.Find(args)
	if err != nil || t.spec[cmd] == nil {
		return nil, inv, nil, err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return t.spec[cmd], inv, nil, err
	}
	if h, _ := cmd.Flags().GetBool("help"); h {
		return nil, inv, nil, nil
	}
	pos := cmd.Flags().Args()
	return t.spec[cmd], inv, pos, cmd.ValidateArgs(pos)
}

// withDB returns args naming store with --db: the value of every --db
// flag replaced, or one --db added.
func withDB(args []string, store string) []string {
	out := append([]string(nil), args...)
	found := false
	for i := 0; i < len(out) && out[i] != "--"; i++ {
		switch a := out[i]; {
		case a == "--db" && i+1 < len(out):
			out[i+1] = store
			found = true
			i++
		case strings.HasPrefix(a, "--db="):
			out[i] = "--db=" + store
			found = true
		}
	}
	if !found {
		out = append([]string{"--db=" + store}, out...)
	}
	return out
}

func (tw *twin) run(t *testing.T) {
	tw.code, tw.stdout, tw.stderr = runArgs(tw.served)
}

func (tw *twin) stop(t *testing.T) {
	t.Helper()
	if err := tw.stopServer(); err != nil {
		t.Errorf("the server of the copy: %v", err)
	}
	if err := tw.db.Close(); err != nil {
		t.Errorf("closing the copy: %v", err)
	}
}

// What differs between two runs by nature.
var normalised = []struct {
	re   *regexp.Regexp
	with string
}{
	// Durations and rates.
	{regexp.MustCompile(`\b\d+\.\d\ds\b`), "N.NNs"},
	{regexp.MustCompile(`"seconds":[-+0-9.eE]+`), `"seconds":N`},
	// The ids of checkpoints captured without --id.
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`), "UUID"},
	// A capture fills its blocks of small blobs in the order its parallel
	// readers finish (each block sorts its members, but which blobs share
	// a block varies), so their compressed size varies by a few bytes.
	{regexp.MustCompile(`\([0-9.]+ [kMG]?B stored\)`), "(N stored)"},
	{regexp.MustCompile(`"bytesNew":\d+`), `"bytesNew":N`},
	// The server opened its copy for writing, which commits once
	// (engine.Open): the file's free pages are not the same, and a
	// damaged meta page found at that open is recorded with its time.
	{regexp.MustCompile(`"(dbFileBytes|freePages)":\d+`), `"$1":N`},
	{regexp.MustCompile(`(?m)^database file .*$`), "database file N"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: (meta page \d+ did not check out)`), "$1"},
}

// damagedRE is the reason a blob is damaged, in cat's error.
var damagedRE = regexp.MustCompile(`( is damaged: ).*`)

func normalise(out string) string {
	for _, n := range normalised {
		out = n.re.ReplaceAllString(out, n.with)
	}
	return out
}

// shown abbreviates a command's output for a failure message.
func shown(s string) string {
	if len(s) > 2000 {
		return fmt.Sprintf("%q… (%d bytes)", s[:2000], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// compare fails t when the served run differs from the local one.
func (tw *twin) compare(t *testing.T, code int, stdout, stderr string) {
	t.Helper()
	args := strings.Join(tw.served, " ")
	if tw.c.exclusive {
		sock := filepath.Join(tw.store, socketName)
		want := regexp.MustCompile(`^sbxdb: store ` + regexp.QuoteMeta(tw.store) + ` is served by sbxdb serve \(pid \d+\) at unix:` + regexp.QuoteMeta(sock) + "; stop it first\n$")
		if tw.code != exitBusy || tw.stdout != "" || !want.MatchString(tw.stderr) {
			t.Errorf("served sbxdb %s: exit %d, stdout %q, stderr %q; want exit 11 and %q", args, tw.code, tw.stdout, tw.stderr, want)
		}
		return
	}
	local := func(s string) string { return normalise(s) }
	served := func(s string) string {
		if tw.twinTarget != "" {
			abs, _ := filepath.Abs(tw.target)
			s = strings.ReplaceAll(s, tw.twinTarget, abs)
			if abs != tw.target {
				// Only the summary line names DIR as given.
				s = strings.Replace(s, "into "+abs+":", "into "+tw.target+":", 1)
				s = strings.Replace(s, `"dir":"`+abs+`"`, `"dir":"`+tw.target+`"`, 1)
			}
		}
		return normalise(strings.ReplaceAll(s, tw.store, tw.dir))
	}
	if tw.c == catCmd && code != 0 {
		// What cat wrote before it failed is to be discarded; a
		// server can only cut a damaged body off, not say why.
		stdout, tw.stdout = "", ""
		stderr, tw.stderr = damagedRE.ReplaceAllString(stderr, "$1"), damagedRE.ReplaceAllString(tw.stderr, "$1")
	}
	if tw.code != code || served(tw.stdout) != local(stdout) || served(tw.stderr) != local(stderr) {
		t.Errorf("sbxdb %s differs through a server:\nlocal:  exit %d\nstdout %s\nstderr %s\nserved: exit %d\nstdout %s\nstderr %s",
			args, code, shown(local(stdout)), shown(local(stderr)), tw.code, shown(served(tw.stdout)), shown(served(tw.stderr)))
		return
	}
	if tw.twinTarget != "" && code == 0 {
		got, want := readTree(t, tw.twinTarget), readTree(t, tw.target)
		if len(got) != len(want) {
			t.Errorf("served restore wrote %d entries, the local one %d", len(got), len(want))
		}
		for p, v := range want {
			if got[p] != v {
				t.Errorf("served restore: %s is %q, locally %q", p, got[p], v)
			}
		}
	}
}

// copyDir copies the tree at src to dst: directories, regular files with
// their modes and modification times (the sweep and the crash clean-up go
// by them), and symlinks. Sockets are left out.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			return os.MkdirAll(to, mode.Perm()|0o700)
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case mode.IsRegular():
			if err := copyFile(p, to, mode.Perm()); err != nil {
				return err
			}
			return os.Chtimes(to, info.ModTime(), info.ModTime())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
