package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/spf13/pflag"
)

var restoreCmd = register(&command{
	name:       "restore",
	group:      groupWorkspace,
	args:       "CHECKPOINT DIR",
	usageArgs:  "{CHECKPOINT | --thread THREAD} DIR",
	flagsUsage: "[--path PATH]... [--exclude GLOB]... [--include GLOB]... [--no-default-excludes]",
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
		policyFlags(fset, inv, true)
	},
	check: func(inv *invocation, args []string) error {
		if err := inv.checkPolicy(); err != nil {
			return err
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
		Progress: inv.progressFunc("writing", start),
	})
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if inv.json {
		return writeJSON(inv.out, restoreJSON{ID: id, Dir: dir, RestoreStats: st, Seconds: elapsed.Seconds()})
	}
	_, err = fmt.Fprintf(inv.out, "restored %s into %s: %s (%s), %s, %s in %s\n",
		cell(id), cell(dir), count(st.Files, "file"), size(st.Bytes), count(st.Dirs, "empty dir"),
		count(st.Symlinks, "symlink"), seconds(elapsed))
	return err
}
