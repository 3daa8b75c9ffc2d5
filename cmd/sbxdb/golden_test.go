package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/proc"
)

// The golden files, testdata/*.txt, hold command lines and what they
// print, in the style of pebble's datadriven tests:
//
//	# a comment
//	run [local] [env=NAME=VALUE]...
//	sbxdb ARGS...
//	----
//	standard output
//	--- stderr
//	standard error
//	exit N
//
// The "--- stderr" line and what follows it are there only when the
// command wrote to standard error. ARGS are split at spaces; '…' and "…"
// quote (with \" and \\ inside "…"), and $TMP, $STORE and $WS name the
// file's directory, store and workspace. In the output, unstable values
// are placeholders: $TMP for the directory, $HOLDER for this process as a
// lease or lock holder names it, $TIME for a time of today, $MS for epoch
// milliseconds of today, $VERSION, $GO and $COMMIT for the build, and what
// the served runs normalise (N.NNs for durations, UUID for random ids).
//
// Each file starts in a new directory $TMP holding the fixture store
// $STORE (newStoreAt: threads main, pruned, loop and live, whose lease is
// live; no blob stored) and the workspace $WS (goldenTree, its files
// modified at the fixture's t0), with
// $SBXDB_DIR and $SBXDB_SERVER unset and $TMP the working directory. Its
// blocks run in order, each through cli: also through a server of a copy
// of the store, which must print the same, unless the block says local.
// Other directives change the files between blocks:
//
//	write PATH SPEC     make PATH (under $TMP) as a tree spec says
//	                    ("/", "-> TARGET", "x:BYTES" or BYTES, Go-quoted),
//	                    modified an hour after the workspace's files
//	remove PATH         remove PATH and what is beneath it
//	mkfifo PATH         make a named pipe at PATH (under $TMP); a file
//	                    using it is skipped where there are none
//	flip-last GLOB      flip the last byte of each file GLOB matches
//	hold-store          open $STORE for writing in this process, so that
//	                    others find it busy (after 100 ms), until
//	release-store
//	warn-captures       make every capture report a file that vanished
//
// go test ./cmd/sbxdb -run TestGolden -update rewrites the expected
// output of every block with what it printed; review the diff.
var update = flag.Bool("update", false, "rewrite the expected output in cmd/sbxdb/testdata/*.txt")

// goldenTree is the workspace $WS of the golden files.
var goldenTree = tree{
	"README.md":   "hello\n",
	"bin/run.sh":  "x:#!/bin/sh\necho run\n",
	"src/main.go": "package main\n\nfunc main() {}\n",
	"docs":        "/",
	"latest":      "-> bin/run.sh",
}

func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		abs, err := filepath.Abs(file) // runGolden changes the working directory
		if err != nil {
			t.Fatal(err)
		}
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runGolden(t, abs) })
	}
}

// goldenBlock is one directive of a golden file, with the lines it spans.
type goldenBlock struct {
	line int    // of the directive, from 1
	text string // a comment or blank line, kept as it is, when cmd is ""
	raw  string // the directive's line
	cmd  string // the directive's name
	args []string
	// The command line and the output of a run.
	argv     string
	expected string
}

// parseGolden splits a golden file into its blocks.
func parseGolden(t *testing.T, file string) []goldenBlock {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var blocks []goldenBlock
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			blocks = append(blocks, goldenBlock{line: i + 1, text: line})
			continue
		}
		fields := strings.Fields(line)
		blk := goldenBlock{line: i + 1, raw: line, cmd: fields[0], args: fields[1:]}
		if blk.cmd == "run" {
			if i+2 >= len(lines) || !strings.HasPrefix(lines[i+1], "sbxdb") || lines[i+2] != "----" {
				t.Fatalf("%s:%d: run needs a line \"sbxdb ARGS\" and a line \"----\"", file, i+1)
			}
			blk.argv = lines[i+1]
			j := i + 3
			for ; j < len(lines) && !exitLine.MatchString(lines[j]); j++ {
			}
			if j == len(lines) {
				t.Fatalf("%s:%d: the output of run ends with no \"exit N\" line", file, i+1)
			}
			blk.expected = strings.Join(lines[i+3:j+1], "\n") + "\n"
			i = j
		}
		blocks = append(blocks, blk)
	}
	return blocks
}

var exitLine = regexp.MustCompile(`^exit \d+$`)

// goldenEnv is the state a golden file's directives change.
type goldenEnv struct {
	tmp, store, ws string
	held           *engine.DB // hold-store
}

func runGolden(t *testing.T, file string) {
	blocks := parseGolden(t, file)
	env := &goldenEnv{tmp: t.TempDir()}
	if real, err := filepath.EvalSymlinks(env.tmp); err == nil {
		env.tmp = real
	}
	env.store, env.ws = filepath.Join(env.tmp, "store"), filepath.Join(env.tmp, "ws")
	newStoreAt(t, env.store)
	makeTree(t, env.ws, goldenTree)
	setMtimes(t, env.ws, t0)
	t.Setenv(dirEnv, "")
	t.Setenv(serverEnv, "")
	t.Chdir(env.tmp)
	defer func(w func(store) store, d time.Duration) { wrapStore, lockTimeout = w, d }(wrapStore, lockTimeout)
	defer env.release()

	var out strings.Builder
	for _, blk := range blocks {
		where := fmt.Sprintf("%s:%d", file, blk.line)
		switch blk.cmd {
		case "":
			out.WriteString(blk.text + "\n")
			continue
		case "run":
			got := env.run(t, where, blk)
			out.WriteString(blk.raw + "\n" + blk.argv + "\n----\n" + got)
			if !*update && got != blk.expected {
				t.Errorf("%s: %s\n(-want +got):\n%s", where, blk.argv, cmp.Diff(blk.expected, got))
			}
			continue
		}
		env.directive(t, where, blk)
		out.WriteString(blk.raw + "\n")
	}
	if *update {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// run runs a run block and renders what it printed.
func (env *goldenEnv) run(t *testing.T, where string, blk goldenBlock) string {
	argv, err := splitArgs(strings.TrimPrefix(blk.argv, "sbxdb"))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for i, a := range argv {
		argv[i] = strings.NewReplacer("$TMP", env.tmp, "$STORE", env.store, "$WS", env.ws).Replace(a)
	}
	var code int
	var stdout, stderr string
	t.Run(fmt.Sprintf("line%d", blk.line), func(t *testing.T) {
		for _, a := range blk.args {
			switch {
			case a == "local":
				localOnly(t)
			case strings.HasPrefix(a, "env="):
				k, v, _ := strings.Cut(strings.TrimPrefix(a, "env="), "=")
				t.Setenv(k, v)
			default:
				t.Fatalf("%s: run takes local and env=NAME=VALUE, not %q", where, a)
			}
		}
		code, stdout, stderr = cli(t, argv...)
	})
	var b strings.Builder
	b.WriteString(env.mask(stdout))
	if stdout != "" && !strings.HasSuffix(stdout, "\n") {
		b.WriteString("\n(no newline at the end)\n")
	}
	if stderr != "" {
		b.WriteString("--- stderr\n" + env.mask(stderr))
		if !strings.HasSuffix(stderr, "\n") {
			b.WriteString("\n(no newline at the end)\n")
		}
	}
	fmt.Fprintf(&b, "exit %d\n", code)
	return b.String()
}

// directive carries out a directive other than run.
func (env *goldenEnv) directive(t *testing.T, where string, blk goldenBlock) {
	arg := func(i int) string {
		if i >= len(blk.args) {
			t.Fatalf("%s: %s needs %d arguments", where, blk.cmd, i+1)
		}
		return blk.args[i]
	}
	switch blk.cmd {
	case "write":
		spec, err := strconv.Unquote(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(blk.raw, "write")), arg(0))))
		if err != nil {
			t.Fatalf("%s: write PATH \"SPEC\": %v", where, err)
		}
		makeTree(t, env.tmp, tree{arg(0): spec})
		setMtimes(t, filepath.Join(env.tmp, arg(0)), t0.Add(time.Hour))
	case "remove":
		if err := os.RemoveAll(filepath.Join(env.tmp, arg(0))); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
	case "mkfifo":
		p := filepath.Join(env.tmp, arg(0))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if err := mkfifo(p); errors.Is(err, errors.ErrUnsupported) {
			t.Skipf("%s: no named pipes on this system", where)
		} else if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
	case "flip-last":
		files, _ := filepath.Glob(filepath.Join(env.tmp, arg(0)))
		if len(files) == 0 {
			t.Fatalf("%s: flip-last: no file matches %s", where, arg(0))
		}
		for _, f := range files {
			flipLast(t, f)
		}
	case "hold-store":
		db, err := engine.Open(env.store, &engine.Options{NoSync: true})
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		env.held, lockTimeout = db, 100*time.Millisecond
	case "release-store":
		env.release()
	case "warn-captures":
		wrapStore = func(s store) store { return warnStore{s} }
	default:
		t.Fatalf("%s: unknown directive %q", where, blk.cmd)
	}
}

func (env *goldenEnv) release() {
	if env.held != nil {
		env.held.Close()
		env.held = nil
	}
}

// setMtimes sets the modification time of the regular files at or beneath
// root to at: long before a capture, so that which files a capture reads
// again does not depend on how fast the test runs (the racy-clean window).
func setMtimes(t *testing.T, root string, at time.Time) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		return os.Chtimes(p, at, at)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Values of today in an output, and epoch milliseconds after the
// fixture's.
var (
	timeRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	msRE   = regexp.MustCompile(`\b1\d{12}\b`)
)

// mask replaces what differs from run to run with placeholders.
func (env *goldenEnv) mask(s string) string {
	b := readBuildInfo()
	pairs := []string{env.tmp, "$TMP", proc.Self().String(), "$HOLDER", `"version":"` + b.Version + `"`, `"version":"$VERSION"`,
		`"go":"` + b.Go + `"`, `"go":"$GO"`}
	if b.Commit != "" {
		pairs = append(pairs, b.Commit, "$COMMIT")
	}
	s = strings.NewReplacer(pairs...).Replace(s)
	s = versionRE.ReplaceAllStringFunc(s, func(line string) string {
		return strings.NewReplacer(b.Version, "$VERSION", b.Go, "$GO").Replace(line)
	})
	recent := t0.Add(24 * time.Hour)
	s = timeRE.ReplaceAllStringFunc(s, func(m string) string {
		if tm, err := time.Parse(time.RFC3339Nano, m); err == nil && tm.After(recent) {
			return "$TIME"
		}
		return m
	})
	s = msRE.ReplaceAllStringFunc(s, func(m string) string {
		if n, err := strconv.ParseInt(m, 10, 64); err == nil && n > recent.UnixMilli() {
			return "$MS"
		}
		return m
	})
	return normalise(s)
}

// versionRE matches the lines of sbxdb version that name the build.
var versionRE = regexp.MustCompile(`(?m)^(sbxdb|go) +\S.*$`)

// splitArgs splits a command line at spaces; '…' and "…" quote, with \"
// and \\ escaped inside "…".
func splitArgs(s string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inArg := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t':
			if inArg {
				args, inArg = append(args, cur.String()), false
				cur.Reset()
			}
		case '\'', '"':
			inArg = true
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if c == '"' && s[j] == '\\' && j+1 < len(s) {
					j++
				}
				cur.WriteByte(s[j])
			}
			if j == len(s) {
				return nil, errors.New("unclosed quote in " + s)
			}
			i = j
		default:
			inArg = true
			cur.WriteByte(c)
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}
