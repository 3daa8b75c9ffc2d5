package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/proc"
)

// Every failure maps to one exit status and one --json code.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{nil, exitOK, ""},
		{&usageError{err: errors.New("missing THREAD")}, exitUsage, codeUsage},
		{errWarnings, exitWarnings, ""},
		{errInterrupted, exitInterrupted, codeInterrupted},
		{reword(sbxdb.ErrNoStore, "no sbxdb store at x"), exitNoStore, codeNoStore},
		{reword(sbxdb.ErrLocked, "store x is busy: held by another process (pid 1)"), exitBusy, codeBusy},
		{fmt.Errorf("%w; if that writer is gone…", chain.Errorf(chain.ErrWriterConflict, "thread %q has a live writer", "t")), exitBusy, chain.CodeWriterConflict},
		{chain.Errorf(chain.ErrInvalidBlob, "damaged"), exitDamaged, chain.CodeInvalidBlob},
		{fmt.Errorf("restoring: %w", chain.Errorf(chain.ErrMissingBlob, "missing")), exitDamaged, chain.CodeMissingBlob},
		{fmt.Errorf("%w: checkpoints/x: checksum", chain.ErrCorrupt), exitDamaged, codeCorrupt},
		{fmt.Errorf("%w: pack 1", sbxdb.ErrBlobCorrupt), exitDamaged, codeCorrupt},
		{errProblems, exitDamaged, codeCorrupt},
		{&reportedError{errProblems}, exitDamaged, codeCorrupt},
		{chain.Errorf(chain.ErrCheckpointNotFound, "checkpoint %q not found", "x"), exitError, chain.CodeCheckpointNotFound},
		{&sbxdb.AmbiguousRefError{Ref: "abcd", Candidates: []string{"abcd1", "abcd2"}, Count: 2}, exitError, "SBXDB_AMBIGUOUS"},
		{&client.Error{Status: 503, Code: "SBXDB_UNAVAILABLE", Message: "draining"}, exitError, "SBXDB_UNAVAILABLE"},
		{fmt.Errorf("server unix:x: %w", client.ErrUnreachable), exitError, codeError},
		{errors.New("checkpoint nope not found"), exitError, codeError},
		{sbxdb.ErrFormat, exitError, codeError},
	} {
		if status, code := exitStatus(tc.err); status != tc.status || code != tc.code {
			t.Errorf("exitStatus(%v) = %d, %q; want %d, %q", tc.err, status, code, tc.status, tc.code)
		}
	}
}

// jsonFailure runs a command line with --json that must fail with exit
// status want: one JSON line on standard output, nothing on standard
// error. It returns the error's code and message.
func jsonFailure(t *testing.T, want int, args ...string) (code, message string) {
	t.Helper()
	status, out, errOut := cli(t, args...)
	if status != want || errOut != "" || strings.Count(out, "\n") != 1 {
		t.Fatalf("sbxdb %s: exit %d, stdout %q, stderr %q; want exit %d and one JSON line", strings.Join(args, " "), status, out, errOut, want)
	}
	e := decode[map[string]map[string]string](t, out)
	if len(e) != 1 || len(e["error"]) != 2 {
		t.Fatalf("sbxdb %s: %s is not {\"error\":{\"code\",\"message\"}}", strings.Join(args, " "), out)
	}
	return e["error"]["code"], e["error"]["message"]
}

// With --json, a command line that does not parse is a JSON error too,
// wherever --json stands, even after the flag that failed.
func TestJSONUsageErrors(t *testing.T) {
	dir := newStore(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--json"}, "missing command"},
		{[]string{"--json", "frob"}, `unknown command "frob"`},
		{[]string{"thrads", "--json"}, `unknown command "thrads"; did you mean threads?`},
		{[]string{"show", "--json", "--db", dir}, "show: missing CHECKPOINT"},
		{[]string{"threads", "--bogus", "--json"}, "threads: unknown flag: --bogus"},
		{[]string{"gc", "--older-than", "x", "--json=true"}, `gc: invalid argument "x" for "--older-than" flag: "x" is not a duration (examples: 24h, 7d, 90m)`},
		{[]string{"help", "frob", "--json"}, `help: unknown command "frob"`},
	} {
		code, msg := jsonFailure(t, exitUsage, tc.args...)
		if code != codeUsage || msg != tc.msg {
			t.Errorf("sbxdb %q: %s %q; want %s %q", tc.args, code, msg, codeUsage, tc.msg)
		}
	}
	// --json=false and a --json after "--" ask for none.
	for _, args := range [][]string{{"threads", "--bogus", "--json=false"}, {"show", "--", "--json", "extra"}} {
		if code, out, errOut := cli(t, args...); code != exitUsage || out != "" || !strings.Contains(errOut, "\nusage: ") {
			t.Errorf("sbxdb %q: exit %d, stdout %q, stderr %q; want a usage error in text", args, code, out, errOut)
		}
	}
}

// With --json, what a failing command would have said on standard error
// before it failed is held back: the JSON line is all there is. Without
// --json, and when it succeeds, it is said.
func TestJSONFailureAlone(t *testing.T) {
	me := proc.Self()
	if me.Start == 0 || me.Boot == "" {
		t.Skipf("no /proc on this system (Self() = %+v): a dead holder cannot be proved gone", me)
	}
	gone := me
	gone.Start++ // this pid, another start: a process that no longer runs
	store, ws := captured(t, "cp1")

	forgeLease(t, store, "main", gone, time.Now())
	code, msg := jsonFailure(t, exitError, "capture", ws, "--db", store, "--thread", "main", "--id", "cp1", "--json")
	// The message does not repeat the code its own field holds.
	if code != chain.CodeDuplicateID || msg != `checkpoint "cp1" already exists` {
		t.Errorf("capture --json of a used id: %s %q", code, msg)
	}

	forgeLease(t, store, "main", gone, time.Now())
	status, out, errOut := cli(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp1")
	if first, rest, _ := strings.Cut(errOut, "\n"); status != exitError || out != "" || !strings.HasPrefix(first, "sbxdb: took over the writer lease of thread main") ||
		!strings.HasPrefix(rest, "sbxdb: "+chain.CodeDuplicateID+": ") {
		t.Errorf("capture of a used id: exit %d, stdout %q, stderr %q; want the take-over and the error", status, out, errOut)
	}

	forgeLease(t, store, "main", gone, time.Now())
	status, out, errOut = cli(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp2", "--json")
	if status != exitOK || decode[captureJSON](t, out).ID != "cp2" || !strings.HasPrefix(errOut, "sbxdb: took over the writer lease of thread main") {
		t.Errorf("capture --json: exit %d, stdout %q, stderr %q; want the take-over said", status, out, errOut)
	}
}

// warnStore is a store whose captures report a file that vanished.
type warnStore struct{ store }

func (s warnStore) Capture(ctx context.Context, in client.CaptureRequest) (*sbxdb.CaptureResult, error) {
	res, err := s.store.Capture(ctx, in)
	if res != nil {
		res.Warnings = append(res.Warnings, sbxdb.CaptureWarning{Path: "gone.txt", What: sbxdb.EntryVanished, Detail: "the file vanished before it was read"})
		res.Stats.Vanished++
	}
	return res, err
}

// A capture that finished with warnings exits 3, with --json too, and
// says them on standard error.
func TestCaptureWarningsExit(t *testing.T) {
	dir, ws := captured(t, "cp1")
	defer func(w func(store) store) { wrapStore = w }(wrapStore)
	wrapStore = func(s store) store { return warnStore{s} }

	code, out, errOut := cli(t, "capture", ws, "--db", dir, "--thread", "main", "--id", "cp2")
	if want := "sbxdb: warning: \"gone.txt\" vanished: the file vanished before it was read\n"; code != exitWarnings || errOut != want ||
		!strings.HasPrefix(out, "captured cp2 on thread main: ") || !strings.Contains(out, ", 0 changed and 1 vanished while read") {
		t.Errorf("capture with a warning: exit %d, stdout %q, stderr %q; want exit 3 and %q", code, out, errOut, want)
	}
	code, out, errOut = cli(t, "capture", ws, "--db", dir, "--thread", "main", "--id", "cp3", "--json")
	if res := decode[captureJSON](t, out); code != exitWarnings || res.ID != "cp3" || len(res.Warnings) != 1 || res.Stats.Vanished != 1 ||
		!strings.HasPrefix(errOut, "sbxdb: warning: ") {
		t.Errorf("capture --json with a warning: exit %d, stdout %q, stderr %q; want exit 3", code, out, errOut)
	}
}

func TestVersion(t *testing.T) {
	b := buildInfoOf(&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"},
	}})
	if want := (buildInfo{Version: "v1.2.3", Commit: "0123456789abcdef", Dirty: true, Go: runtime.Version(), StoreFormat: engine.FormatVersion}); b != want {
		t.Errorf("buildInfoOf: %+v, want %+v", b, want)
	}
	if b := buildInfoOf(nil); b.Version != "(devel)" || b.Commit != "" || b.Dirty || b.StoreFormat != engine.FormatVersion {
		t.Errorf("buildInfoOf(nil): %+v", b)
	}

	out := ok(t, "version")
	if want := fmt.Sprintf("store format  %d\n", engine.FormatVersion); !strings.HasPrefix(out, "sbxdb  ") || !strings.HasSuffix(out, want) {
		t.Errorf("version:\n%s", out)
	}
	if v := ok(t, "--version"); v != out {
		t.Errorf("--version:\n%s\nversion:\n%s", v, out)
	}
	if js := decode[buildInfo](t, ok(t, "version", "--json")); js != readBuildInfo() {
		t.Errorf("version --json: %+v, want %+v", js, readBuildInfo())
	}
	if code, _, errOut := cli(t, "version", "extra"); code != exitUsage || !strings.HasPrefix(errOut, `sbxdb version: unexpected argument "extra"`) {
		t.Errorf("version extra: exit %d, %q", code, errOut)
	}
}

// sbxdb completion SHELL prints the shell's script, which asks sbxdb
// __complete for the candidates.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash":       "__start_sbxdb",
		"zsh":        "#compdef sbxdb",
		"fish":       "complete -c sbxdb",
		"powershell": "Register-ArgumentCompleter",
	} {
		if out := ok(t, "completion", shell); !strings.Contains(out, want) || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s lacks %q or __complete:\n%.300s", shell, want, out)
		}
	}
	for args, want := range map[string]string{
		"completion tcsh": `sbxdb completion: unknown shell "tcsh": want bash, zsh, fish or powershell` + "\nusage: sbxdb completion SHELL\n",
		"completion":      "sbxdb completion: missing SHELL\nusage: sbxdb completion SHELL\n",
	} {
		if code, out, errOut := cli(t, strings.Fields(args)...); code != exitUsage || out != "" || errOut != want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and %q", args, code, out, errOut, want)
		}
	}
}
