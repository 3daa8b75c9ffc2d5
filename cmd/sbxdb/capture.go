package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/sbxdb/sbxdb/workspace"
	"github.com/spf13/pflag"
)

var captureCmd = register(&command{
	name:       "capture",
	group:      groupWorkspace,
	args:       "DIR",
	nargs:      1,
	writes:     true,
	creates:    true,
	flagsUsage: "--thread THREAD [--id ID] [--label LABEL] [--exclude GLOB]... [--include GLOB]... [--allow-empty] [--no-default-excludes] [--skip-unsupported] [--secret-env NAME]... [--rehash]",
	summary:    "Record the workspace DIR as a new checkpoint on the head of a thread",
	detail: `capture opens the store for writing, creating it if it does not exist, and
holds the thread's writer lease while it runs; a live lease of another writer
is SANDBOX_SNAPSHOT_WRITER_CONFLICT, unless that writer was a process that
provably no longer runs (of this host, boot and pid namespace): capture then
takes its lease over and says so on standard error (sbxdb unlock frees a
thread whose writer is gone elsewhere, as in another container).
The new checkpoint's parent is the thread's head; its reason is "named" with
--label, else "automatic".

The default policy skips .git, node_modules and .env* at any depth, the root
CLAUDE.md and GEMINI.md, and .claude/.codex/.grok skill directories;
--no-default-excludes records them (node_modules restored rather than
installed again). --exclude skips more (a skipped directory is not walked);
--include records only the files that match, or lie beneath a directory
that matches. A glob without a slash matches a name at any depth ("*.log"),
one with a slash is anchored at DIR ("src/*.go"), "**" matches any number of
directories, and a trailing "/" matches directories only ("build/"). Capture
and restore apply the same policy: restore with the same --exclude,
--include and --no-default-excludes flags, or the restore refuses the
checkpoint. When the --include globs match no file (nor symlink), the capture
fails and records nothing, unless --allow-empty: then it records the empty
checkpoint.

--secret-env NAME zero-fills the value of the environment variable NAME
wherever it occurs in the files' bytes, before they are hashed and stored.
The variable must be set and not empty. Secrets are never taken on the
command line, where other users can read them.

Files whose size, times, inode and mode are as the thread's previous capture
of DIR found them, and that were not modified just before it, are not read
again. Writes through a shared mmap can change a file without moving its
times: --rehash reads and hashes every file (bytes already stored are still
not stored twice).

Files and directories are opened beneath DIR without following symlinks, so
a name renamed to a symlink during the capture never leads outside DIR. A
file that changes while it is read is read again (up to 3 times) and
recorded as read; a file or directory that vanishes is left out. A named
pipe, socket or device, an entry that cannot be read, a name a checkpoint
cannot hold (not UTF-8, a backslash) and a symlink the policy refuses fail
the capture, which then records nothing; with --skip-unsupported each is
left out instead. Each entry changed, vanished or skipped prints a line
sbxdb: warning: "PATH" changed|vanished|skipped: WHY on standard error, the
summary counts them, and the exit status is 3.

On a terminal a progress line shows the files and bytes read and the rate.
The summary line counts the files recorded, those unchanged, those read, the
new blobs stored (with their compressed size), the files whose bytes were
stored already (deduplicated), and any entries the policy excluded (an
excluded directory counts once), skipped, or changed or vanished while read.
A directory of DIR that is another sbxdb store (its lock file and its
database or blobs) is never captured, whatever the flags: the summary counts
it as an sbxdb store left out.
With --json: {id, threadId, parentCheckpointId, reason, label, stats,
warnings, seconds}; stats.changed, stats.vanished and stats.skipped count the
warnings, stats.excluded the entries the policy left out and
stats.excludedByRule those by rule (".git", "node_modules", ".env*",
"--exclude GLOB", "not included", "sbxdb store", …).

While sbxdb serve runs for the store, capture works through it (sbxdb help
says how the server is found), with the same output: the server reads DIR,
named by its absolute path, on its own machine, and capture holds and renews
the writer lease through the API, so that the other commands, and captures
into other threads, run meanwhile. The --secret-env values travel in the
request to the server.`,
	flags: func(fset *pflag.FlagSet, inv *invocation) {
		fset.StringVar(&inv.thread, "thread", "", "capture onto the head of thread `THREAD` (required)")
		fset.StringVar(&inv.id, "id", "", "the new checkpoint's `ID` (default a random UUID)")
		fset.StringVar(&inv.label, "label", "", "label the checkpoint `LABEL`, making its reason \"named\"")
		policyFlags(fset, inv, false)
		fset.Var(&inv.secretEnvs, "secret-env", "zero-fill the value of environment variable `NAME` in stored bytes (repeatable)")
		fset.BoolVar(&inv.rehash, "rehash", false, "read and hash every file, trusting no stat from the previous capture")
		fset.BoolVar(&inv.skipUnsupported, "skip-unsupported", false, "leave out named pipes, sockets, devices, unreadable entries and unrecordable names, with a warning each (exit status 3)")
		fset.BoolVar(&inv.allowEmpty, "allow-empty", false, "record an empty checkpoint when the --include globs match no file")
	},
	check: func(inv *invocation, args []string) error {
		if inv.thread == "" {
			return errors.New("missing --thread THREAD")
		}
		if err := inv.checkPolicy(); err != nil {
			return err
		}
		return checkCount(args, 1, "DIR")
	},
	run: runCapture,
})

// policyFlags binds the flags that choose the workspace policy, which
// capture and restore share; restore must be given the capture's.
func policyFlags(fset *pflag.FlagSet, inv *invocation, restore bool) {
	if restore {
		fset.Var(&inv.excludes, "exclude", "an --exclude `GLOB` the capture was given (repeatable)")
		fset.Var(&inv.includes, "include", "an --include `GLOB` the capture was given (repeatable)")
		fset.BoolVar(&inv.noDefaultExcludes, "no-default-excludes", false, "the capture was given --no-default-excludes")
		fset.BoolVar(&inv.allowEscaping, "allow-escaping-symlinks", false, "create symlinks whose target is absolute or leaves the tree")
		return
	}
	fset.Var(&inv.excludes, "exclude", "also skip paths matching `GLOB` (repeatable)")
	fset.Var(&inv.includes, "include", "record only files matching `GLOB` or beneath a matching directory (repeatable)")
	fset.BoolVar(&inv.noDefaultExcludes, "no-default-excludes", false, "record what the default policy skips (.git, node_modules, .env*, …); restore needs the flag too")
	fset.BoolVar(&inv.allowEscaping, "allow-escaping-symlinks", false, "record symlinks whose target is absolute or leaves the tree")
}

// checkPolicy reports a malformed --exclude or --include glob. The globs
// travel as they are (sbxdb.CaptureRequest, sbxdb.RestoreRequest), and
// the store makes the workspace policy of them.
func (inv *invocation) checkPolicy() error {
	_, err := workspace.GlobPolicy(inv.noDefaultExcludes, inv.excludes, inv.includes)
	return err
}

// absDir returns dir made absolute, as a server takes it: its working
// directory is not the command's.
func absDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", cell(dir), err)
	}
	return abs, nil
}

// captureJSON is what `sbxdb capture --json` prints.
type captureJSON struct {
	ID       string             `json:"id"`
	ThreadID string             `json:"threadId"`
	ParentID *string            `json:"parentCheckpointId"`
	Reason   chain.Reason       `json:"reason"`
	Label    string             `json:"label,omitempty"`
	Stats    sbxdb.CaptureStats `json:"stats"`
	// Warnings names the entries that changed or vanished while read,
	// and those skipped as unsupported.
	Warnings []sbxdb.CaptureWarning `json:"warnings,omitempty"`
	Seconds  float64                `json:"seconds"`
}

func runCapture(inv *invocation, args []string) error {
	dir, err := absDir(args[0])
	if err != nil {
		return err
	}
	secrets, err := secretsFromEnv(inv.secretEnvs)
	if err != nil {
		return err
	}
	reason := chain.ReasonAutomatic
	if inv.label != "" {
		reason = chain.ReasonNamed
	}
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()

	start := time.Now()
	var res *sbxdb.CaptureResult
	err = withLease(inv.ctx, db, inv.thread, inv.errOut, func(ctx context.Context, w lease.Writer) (err error) {
		res, err = db.Capture(ctx, sbxdb.CaptureRequest{
			Writer: w, Dir: dir, ID: inv.id, Reason: reason, Label: inv.label,
			Excludes: inv.excludes, Includes: inv.includes, Secrets: secrets,
			AllowEscapingSymlinks: inv.allowEscaping, Rehash: inv.rehash,
			NoDefaultExcludes: inv.noDefaultExcludes, SkipUnsupported: inv.skipUnsupported,
			RequireFiles: len(inv.includes) > 0 && !inv.allowEmpty, Progress: inv.progressFunc("reading", start),
		})
		return err
	})
	if err != nil {
		switch {
		case errors.Is(err, sbxdb.ErrEmptyCapture):
			return fmt.Errorf("%w%s; --allow-empty records the empty checkpoint", err, excludedIncludes(inv))
		case errors.Is(err, chain.ErrUnsupportedEntry), engine.IsUnreadableEntry(err):
			return fmt.Errorf("%w; --skip-unsupported leaves such entries out", err)
		}
		if res != nil {
			return fmt.Errorf("captured %s, but %w", res.Checkpoint.ID, err)
		}
		return err
	}
	elapsed := time.Since(start)

	cp, st := res.Checkpoint, res.Stats
	printCaptureWarnings(inv.errOut, res.Warnings)
	if inv.json {
		err = writeJSON(inv.out, captureJSON{
			ID: cp.ID, ThreadID: cp.ThreadID, ParentID: nullable(cp.ParentID), Reason: cp.Reason, Label: cp.Label,
			Stats: st, Warnings: res.Warnings, Seconds: elapsed.Seconds(),
		})
		return warned(err, res.Warnings)
	}
	_, err = fmt.Fprintf(inv.out, "captured %s on thread %s: %s (%s), %d unchanged, %d read (%s), %s (%s stored), %d deduplicated%s%s in %s\n",
		cell(cp.ID), cell(cp.ThreadID), count(st.Files, "file"), size(st.Bytes), st.Unchanged,
		st.FilesRead, size(st.BytesRead), count(st.BlobsNew, "new blob"), size(st.BytesNew),
		st.Deduplicated, leftOut(st), changedWhileRead(st), seconds(elapsed))
	return warned(err, res.Warnings)
}

// excludedIncludes is the hint of an empty capture whose include patterns
// start with a name the default policy excludes (".git", "node_modules",
// ".env*"), which the walk prunes before any include is asked: one
// "; NAME is excluded by default" per such name, then how to record them.
// It is "" with --no-default-excludes or when no pattern starts so.
func excludedIncludes(inv *invocation) string {
	if inv.noDefaultExcludes {
		return ""
	}
	excluded := workspace.DefaultExclude("")
	var names []string
	for _, g := range inv.includes {
		seg, _, dir := strings.Cut(strings.TrimPrefix(g, "/"), "/")
		if !excluded(seg, chain.KindDir) {
			continue
		}
		if dir {
			seg += "/"
		}
		if !slices.Contains(names, seg) {
			names = append(names, seg)
		}
	}
	var s string
	for _, n := range names {
		s += "; " + n + " is excluded by default"
	}
	switch {
	case len(names) == 1:
		s += "; --no-default-excludes records it"
	case len(names) > 1:
		s += "; --no-default-excludes records them"
	}
	return s
}

// warned is the outcome of a capture that printed its summary with err:
// errWarnings (exit status 3) when it left warnings and nothing failed.
func warned(err error, warnings []sbxdb.CaptureWarning) error {
	if err == nil && len(warnings) > 0 {
		return errWarnings
	}
	return err
}

// printCaptureWarnings writes one line per entry that changed or vanished
// while the capture read it, as tar does ("file changed as we read it"),
// and per entry skipped as unsupported.
func printCaptureWarnings(w io.Writer, warnings []sbxdb.CaptureWarning) {
	for _, x := range warnings {
		fmt.Fprintf(w, "sbxdb: warning: %s\n", x)
	}
}

// leftOut is the summary's counts of the entries the policy excluded, of
// the other stores' directories left out (never captured, whatever the
// policy) and of those skipped as unsupported, each left out when 0. An
// entry is what either count of entries counts (an excluded directory
// counts once), so neither has a noun to agree with its number.
func leftOut(st sbxdb.CaptureStats) string {
	var s string
	stores := st.ExcludedByRule[workspace.RuleStore]
	if n := st.Excluded - stores; n > 0 {
		s += fmt.Sprintf(", %d excluded by policy", n)
	}
	switch {
	case stores == 1:
		s += ", 1 sbxdb store left out"
	case stores > 1:
		s += fmt.Sprintf(", %d sbxdb stores left out", stores)
	}
	if st.Skipped > 0 {
		s += fmt.Sprintf(", %d skipped as unsupported", st.Skipped)
	}
	return s
}

// changedWhileRead is the summary's count of changed and vanished entries,
// empty when there were none.
func changedWhileRead(st sbxdb.CaptureStats) string {
	if st.Changed == 0 && st.Vanished == 0 {
		return ""
	}
	return fmt.Sprintf(", %d changed and %d vanished while read", st.Changed, st.Vanished)
}

// releaseTimeout bounds the release of a writer lease.
const releaseTimeout = 5 * time.Second

// withLease runs fn holding the writer lease of thread, renewing it in the
// background (through the API when db is a server). A live lease whose holder was a process on this host that no
// longer runs (a writer killed before it released) is taken over, and a
// line on errOut says so. A renewal that fails means the lease is lost: fn's
// context is cancelled, since fn could not publish anyway, and that failure
// is the error. The lease is released afterwards even when ctx was cancelled
// (an interrupt), since a lease left behind would block the thread's next
// writer until it expires. fn's error wins over a release error.
func withLease(ctx context.Context, db leaser, thread string, errOut io.Writer, fn func(ctx context.Context, w lease.Writer) error) error {
	l, err := db.AcquireWriterWith(ctx, thread, lease.AcquireOptions{TakeOverDead: true})
	if err != nil {
		if errors.Is(err, chain.ErrWriterConflict) {
			err = fmt.Errorf("%w; if that writer is gone, `sbxdb unlock %s` frees the thread", err, thread)
		}
		return err
	}
	if old := l.TookOver; old != nil {
		fmt.Fprintf(errOut, "sbxdb: took over the writer lease of thread %s from %s, which is gone (fence %d → %d)\n",
			thread, lease.HolderText(old.Holder), old.Fence, l.Fence)
	}
	work, cancel := context.WithCancelCause(ctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		if err := l.KeepAlive(work); err != nil {
			cancel(fmt.Errorf("renewing the writer lease of thread %s: %w", thread, err))
		}
	}()
	err = fn(work, l.Writer)
	if cause := context.Cause(work); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	cancel(nil)
	<-kept
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer rcancel()
	if rerr := l.Release(rctx); err == nil && rerr != nil {
		err = fmt.Errorf("releasing the writer lease of thread %s: %w", thread, rerr)
	}
	return err
}

// secretsFromEnv returns the values of the environment variables named by
// --secret-env. An unset or empty one is an error: capturing without the
// redaction asked for would store the secret.
func secretsFromEnv(names []string) ([]string, error) {
	secrets := make([]string, 0, len(names))
	for _, name := range names {
		v, ok := os.LookupEnv(name)
		switch {
		case !ok:
			return nil, fmt.Errorf("--secret-env %s: the environment variable is not set", name)
		case v == "":
			return nil, fmt.Errorf("--secret-env %s: the environment variable is empty", name)
		}
		secrets = append(secrets, v)
	}
	return secrets, nil
}
