package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/lease"
	"github.com/spf13/pflag"
)

var deleteThreadCmd = register(&command{
	name:       "delete-thread",
	group:      groupMaintain,
	args:       "THREAD",
	writes:     true,
	flagsUsage: "--yes [--force]",
	summary:    "Delete a thread's checkpoints, head, transcript and writer lease",
	detail: `Removes, in one transaction, every checkpoint of the thread, its head, its
saved transcript, its writer lease and its artifact records, so that sbxdb
threads no longer lists it. The blobs they used stay in the store: sbxdb gc
--older-than DURATION deletes those that no checkpoint uses any more. The
thread's fence counter is kept: a writer that held its lease is refused from
then on (SANDBOX_SNAPSHOT_WRITER_LOST), and a later writer of the same
thread id gets a higher fence.

Without --yes nothing is deleted: the command says how many checkpoints it
would delete and exits 2 (it opens the store read-only). A thread whose
writer lease is live is refused, naming the holder (exit 11), unless
--force, which breaks the lease as sbxdb unlock does. A thread with nothing
stored is not an error: nothing is deleted. With --json: {threadId,
checkpoints: [ids deleted], transcript, lease, artifactRecords}.

` + viaServer,
	flags: func(fset *pflag.FlagSet, inv *invocation) {
		fset.BoolVar(&inv.yes, "yes", false, "delete: without it, only say what would be deleted")
		fset.BoolVar(&inv.force, "force", false, "delete even while a writer holds the thread's lease, breaking it")
	},
	check: func(inv *invocation, args []string) error {
		inv.writes = inv.yes
		return checkCount(args, 1, "THREAD")
	},
	run: runDeleteThread,
})

// deleteThreadJSON is what `sbxdb delete-thread --json` prints.
type deleteThreadJSON struct {
	ThreadID        string   `json:"threadId"`
	Checkpoints     []string `json:"checkpoints"` // the ids deleted
	Transcript      bool     `json:"transcript"`  // a saved transcript was deleted
	Lease           bool     `json:"lease"`       // a writer lease was removed
	ArtifactRecords int      `json:"artifactRecords"`
}

func runDeleteThread(inv *invocation, args []string) error {
	thread := args[0]
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	if !inv.yes {
		return wouldDelete(inv, db, thread)
	}
	res, err := db.DeleteThread(inv.ctx, thread, inv.force)
	if errors.Is(err, chain.ErrWriterConflict) {
		return fmt.Errorf("%w; add --force to break the writer's lease", err)
	}
	if err != nil {
		return err
	}
	if inv.json {
		r := deleteThreadJSON{ThreadID: thread, Checkpoints: res.Checkpoints, Transcript: res.Transcript,
			Lease: res.Lease, ArtifactRecords: res.ArtifactRecords}
		if r.Checkpoints == nil {
			r.Checkpoints = []string{}
		}
		return writeJSON(inv.out, r)
	}
	if len(res.Checkpoints) == 0 && !res.Transcript && !res.Lease && res.ArtifactRecords == 0 {
		_, err = fmt.Fprintf(inv.out, "thread %s has nothing stored: nothing deleted\n", cell(thread))
		return err
	}
	what := []string{count(len(res.Checkpoints), "checkpoint")}
	if res.Transcript {
		what = append(what, "its transcript")
	}
	if res.Lease {
		what = append(what, "its writer lease")
	}
	if res.ArtifactRecords > 0 {
		what = append(what, count(res.ArtifactRecords, "artifact record"))
	}
	msg := fmt.Sprintf("deleted thread %s: %s\n", cell(thread), strings.Join(what, ", "))
	if len(res.Checkpoints) > 0 || res.ArtifactRecords > 0 {
		msg += "their blobs are left in the store: sbxdb gc --older-than DURATION deletes those nothing else uses\n"
	}
	_, err = io.WriteString(inv.out, msg)
	return err
}

// wouldDelete is delete-thread without --yes: a usage error (exit 2)
// saying how many checkpoints of the thread --yes would delete, and that
// its live writer needs --force too.
func wouldDelete(inv *invocation, db store, thread string) error {
	list, err := db.List(inv.ctx, thread)
	if err != nil {
		return err
	}
	head, err := db.Head(inv.ctx, thread)
	if err != nil {
		return err
	}
	writers, err := db.Writers(inv.ctx)
	if err != nil {
		return err
	}
	what := []string{count(len(list), "checkpoint") + " of thread " + cell(thread)}
	if head != "" {
		what = append(what, "its head")
	}
	s := writers[thread]
	if s.Held {
		what = append(what, "its writer lease")
	}
	msg := "would delete " + strings.Join(what, ", ") + ", and its transcript and artifact records if it has any"
	if s.Held && s.Live(time.Now().UnixMilli()) {
		msg += fmt.Sprintf("; the lease is live (held by %s until %s): add --yes --force to delete them anyway",
			lease.HolderText(s.Holder), lease.TimeText(s.ExpiresAt))
	} else {
		msg += "; add --yes to delete them"
	}
	return &usageError{err: errors.New(msg)}
}
