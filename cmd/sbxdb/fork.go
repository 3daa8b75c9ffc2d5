package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/spf13/pflag"
)

var forkCmd = register(&command{
	name:       "fork",
	group:      groupWorkspace,
	args:       "CHECKPOINT THREAD",
	nargs:      2,
	writes:     true,
	flagsUsage: "[--id ID]",
	summary:    "Start a new thread from a checkpoint of another",
	detail: `Copies CHECKPOINT as the root of THREAD, which must be empty, with the
checkpoint's conversation as THREAD's transcript, in one transaction (SPEC
§3): the new checkpoint has no parent, names the same files and artifacts,
and stores no blob again. THREAD's writer lease is held for the fork. A
THREAD with checkpoints, a head or a saved transcript is
SANDBOX_SNAPSHOT_FORK_DESTINATION_NOT_EMPTY, and the source's own thread
SANDBOX_SNAPSHOT_FORK_SOURCE_THREAD_MISMATCH (exit 1). With --json: {id,
threadId, sourceThreadId, sourceCheckpointId}.

` + checkpointHelp + `

` + viaServer,
	flags: func(fset *pflag.FlagSet, inv *invocation) {
		fset.StringVar(&inv.id, "id", "", "the new checkpoint's `ID` (default a random UUID)")
	},
	run: runFork,
})

// forkJSON is what `sbxdb fork --json` prints.
type forkJSON struct {
	ID                 string `json:"id"`
	ThreadID           string `json:"threadId"`
	SourceThreadID     string `json:"sourceThreadId"`
	SourceCheckpointID string `json:"sourceCheckpointId"`
}

func runFork(inv *invocation, args []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	src, err := getCheckpoint(inv, db, args[0])
	if err != nil {
		return err
	}
	dest := args[1]
	id := inv.id
	if id == "" {
		id = lease.NewToken()
	}
	var cp *chain.Checkpoint
	err = withLease(inv.ctx, db, dest, inv.errOut, func(ctx context.Context, w lease.Writer) error {
		cp, err = db.Fork(ctx, chain.ForkInput{
			SourceThreadID: src.ThreadID, SourceCheckpointID: src.ID,
			DestinationThreadID: dest, DestinationCheckpointID: id,
			CreatedAt: time.Now().UnixMilli(), Writer: w,
		})
		return err
	})
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.out, forkJSON{ID: cp.ID, ThreadID: cp.ThreadID, SourceThreadID: src.ThreadID, SourceCheckpointID: src.ID})
	}
	_, err = fmt.Fprintf(inv.out, "forked %s of thread %s into thread %s as %s\n", cell(src.ID), cell(src.ThreadID), cell(cp.ThreadID), cell(cp.ID))
	return err
}
