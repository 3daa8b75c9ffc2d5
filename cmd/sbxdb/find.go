package main

import (
	"fmt"
	"slices"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/workspace"
	"github.com/spf13/pflag"
)

var findCmd = register(&command{
	name:       "find",
	group:      groupInspect,
	args:       "PATTERN",
	flagsUsage: "[--thread THREAD]...",
	summary:    "List the checkpoints that hold a path matching PATTERN",
	detail: `PATTERN is a glob as --include and --exclude take them: without a slash
it matches an entry's name at any depth ("*.log", "package.json"), with one
it is anchored at the workspace root ("src/*.go"); "**" matches any number
of directories, and a trailing "/" matches directories only. Each match is
one row: the checkpoint, its thread and creation time, and the entry's
kind, size and path, thread by thread (sorted), each thread's checkpoints
oldest first. --thread (repeatable) searches those threads only. Finding
nothing is not an error: it says so. With --json: [{checkpointId,
threadId, createdAt, entry}].

` + viaServer,
	flags: func(fset *pflag.FlagSet, inv *invocation) {
		fset.Var(&inv.threads, "thread", "search `THREAD` only (repeatable)")
	},
	check: func(inv *invocation, args []string) error {
		if err := checkCount(args, 1, "PATTERN"); err != nil {
			return err
		}
		return workspace.CheckPattern(args[0])
	},
	run: runFind,
})

// findRow is one match as `sbxdb find --json` prints it.
type findRow struct {
	CheckpointID string      `json:"checkpointId"`
	ThreadID     string      `json:"threadId"`
	CreatedAt    int64       `json:"createdAt"` // epoch ms
	Entry        chain.Entry `json:"entry"`
}

func runFind(inv *invocation, args []string) error {
	pattern := args[0]
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	threads := slices.Clone([]string(inv.threads))
	if len(threads) == 0 {
		if threads, err = db.Threads(inv.ctx); err != nil {
			return err
		}
	}
	slices.Sort(threads)
	threads = slices.Compact(threads)
	rows := []findRow{}
	for _, thread := range threads {
		list, err := db.List(inv.ctx, thread)
		if err != nil {
			return err
		}
		for _, cp := range list {
			for _, e := range cp.Files {
				if workspace.Match(pattern, e.Path, e.Kind) {
					rows = append(rows, findRow{CheckpointID: cp.ID, ThreadID: cp.ThreadID, CreatedAt: cp.CreatedAt, Entry: e})
				}
			}
		}
	}
	if inv.json {
		return writeJSON(inv.out, rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(inv.out, "no checkpoint of %s holds a path matching %s\n", count(len(threads), "thread"), cell(pattern))
		return err
	}
	tw := table(inv.out)
	fmt.Fprintln(tw, "CHECKPOINT\tTHREAD\tCREATED\tKIND\tSIZE\tPATH")
	for _, r := range rows {
		size := "-"
		if r.Entry.Kind == chain.KindFile {
			size = fmt.Sprint(r.Entry.Size)
		}
		path := cell(r.Entry.Path)
		if r.Entry.Kind == chain.KindSymlink {
			path += " -> " + cell(r.Entry.Target)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.CheckpointID), cell(r.ThreadID), timeText(r.CreatedAt), r.Entry.Kind, size, path)
	}
	return tw.Flush()
}
