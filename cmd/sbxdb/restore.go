package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/spf13/pflag"
)

var restoreCmd = register(&command{
	name:       "restore",
	group:      groupWorkspace,
	args:       "CHECKPOINT DIR",
	usageArgs:  "{CHECKPOINT | --thread THREAD} DIR",
	flagsUsage: "[--path PATH]... [--overwrite [--delete]] [--keep-going] [--exclude GLOB]... [--include GLOB]... [--no-default-excludes]",
	summary:    "Write a checkpoint's tree, or the head of --thread, into DIR",
	detail: `DIR must not exist or be an empty directory. The tree is written into a
staging directory beside DIR, every blob verified as it is written, and
renamed to DIR only when all is well: on failure nothing is left behind. A
missing blob is SANDBOX_SNAPSHOT_MISSING_BLOB and a damaged one
SANDBOX_SNAPSHOT_INVALID_BLOB, naming the path and the key. Files get mode
0755 when recorded executable, else 0644; symlinks are created last, with
their recorded targets.

--thread THREAD restores the thread's head instead of a checkpoint named by
id. --path PATH restores only the entry PATH (slash-separated, relative to
the checkpoint's root) and, when it is a directory, everything beneath it,
with the directories above it; repeat it for more. A PATH the checkpoint
does not hold is SANDBOX_SNAPSHOT_INVALID_PATH, and nothing is written.

--overwrite restores into a DIR that is not empty, as rsync does: the
entries are written and verified into a staging directory inside DIR, then
each file or symlink that differs is renamed over the old one (atomic),
and each identical one is left alone. A symlink of DIR where the
checkpoint has a directory is replaced, never followed; a directory where
the checkpoint has a file is refused unless --delete. --delete also
removes what the checkpoint does not hold, except what the policy
excludes (.git, node_modules, … by default); symlinks are removed, not
followed. A failure puts back everything replaced or removed.

--keep-going restores every file whose blob is intact when some are
missing or damaged: the others are not written (with --overwrite, DIR's
copy is kept), each is named on standard error ("skipped PATH: why") and
in the JSON's "skipped", and the exit status is 12.

Capture and restore apply the same policy: give the --exclude, --include
and --no-default-excludes flags that the capture was given; an entry that
policy would not have recorded is SANDBOX_SNAPSHOT_INVALID_PATH.
restore opens the store read-only. On a terminal a progress line shows the
files and bytes written and the rate. With --json: {id, dir, files, dirs,
symlinks, bytes, seconds}.

` + checkpointHelp + `

While sbxdb serve runs for the store, restore works through it (sbxdb help
says how the server is found), with the same output: the server writes DIR,
named by its absolute path, on its own machine.`,
	flags: func(fset *pflag.FlagSet, inv *invocation) {
		fset.StringVar(&inv.thread, "thread", "", "restore the head of thread `THREAD` (then give no CHECKPOINT)")
		fset.Var(&inv.paths, "path", "restore only the entry `PATH`, with what lies beneath it and the directories above it (repeatable)")
		fset.BoolVar(&inv.overwrite, "overwrite", false, "restore into a non-empty DIR: replace what differs, keep what is identical")
		fset.BoolVar(&inv.deleteExtra, "delete", false, "with --overwrite: also remove what the checkpoint does not hold (not what the policy excludes)")
		fset.BoolVar(&inv.keepGoing, "keep-going", false, "restore every intact file when blobs are missing or damaged; list the others and exit 12")
		policyFlags(fset, inv, true)
	},
	check: func(inv *invocation, args []string) error {
		if err := inv.checkPolicy(); err != nil {
			return err
		}
		if inv.deleteExtra && !inv.overwrite {
			return errors.New("--delete needs --overwrite")
		}
		if inv.deleteExtra && len(inv.paths) > 0 {
			return errors.New("--delete restores the whole tree: give no --path")
		}
		if inv.thread == "" {
			return checkCount(args, 2, "CHECKPOINT DIR")
		}
		if len(args) == 2 {
			return errors.New("give CHECKPOINT or --thread THREAD, not both")
		}
		return checkCount(args, 1, "DIR")
	},
	run: runRestore,
})

// restoreJSON is what `sbxdb restore --json` prints.
type restoreJSON struct {
	ID  string `json:"id"`
	Dir string `json:"dir"`
	sbxdb.RestoreStats
	Seconds float64 `json:"seconds"`
}

func runRestore(inv *invocation, args []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	var id, dir string
	if inv.thread != "" {
		dir = args[0]
		if id, err = db.Head(inv.ctx, inv.thread); err != nil {
			return err
		}
		if id == "" {
			return fmt.Errorf("thread %s has no head checkpoint", cell(inv.thread))
		}
	} else {
		dir = args[1]
		if id, err = resolveCheckpoint(inv, db, args[0]); err != nil {
			return err
		}
	}

	abs, err := absDir(dir)
	if err != nil {
		return err
	}
	start := time.Now()
	st, err := db.Restore(inv.ctx, sbxdb.RestoreRequest{
		CheckpointID: id, Dir: abs, Excludes: inv.excludes, Includes: inv.includes, Paths: inv.paths,
		NoDefaultExcludes: inv.noDefaultExcludes, AllowEscapingSymlinks: inv.allowEscaping,
		Overwrite: inv.overwrite, Delete: inv.deleteExtra, KeepGoing: inv.keepGoing,
		Progress: inv.progressFunc("writing", start),
	})
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if inv.json {
		if err := writeJSON(inv.out, restoreJSON{ID: id, Dir: dir, RestoreStats: st, Seconds: elapsed.Seconds()}); err != nil {
			return err
		}
		if err := skippedError(st.Skipped); err != nil {
			return &reportedError{err: err}
		}
		return nil
	}
	var extra string
	if inv.overwrite {
		extra = ", " + count(st.Unchanged, "unchanged entry")
		if inv.deleteExtra {
			extra += ", " + count(st.Deleted, "deleted entry")
		}
	}
	if _, err = fmt.Fprintf(inv.out, "restored %s into %s: %s (%s), %s, %s%s in %s\n",
		cell(id), cell(dir), count(st.Files, "file"), size(st.Bytes), count(st.Dirs, "empty dir"),
		count(st.Symlinks, "symlink"), extra, seconds(elapsed)); err != nil {
		return err
	}
	for _, s := range st.Skipped {
		fmt.Fprintf(inv.errOut, "skipped %s: %s: %s\n", cell(s.Path), s.Code, s.Reason)
	}
	return skippedError(st.Skipped)
}

// skippedError is the outcome of a --keep-going restore that left files
// out (exit status 12, with the code of the first one's fault), or nil.
func skippedError(skipped []sbxdb.SkippedFile) error {
	if len(skipped) == 0 {
		return nil
	}
	sentinel := chain.ErrInvalidBlob
	if skipped[0].Code == chain.CodeMissingBlob {
		sentinel = chain.ErrMissingBlob
	}
	return reword(sentinel, "%s: restored all but %s, whose blobs are missing or damaged", skipped[0].Code, count(len(skipped), "file"))
}
