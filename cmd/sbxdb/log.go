package main

import (
	"fmt"

	"github.com/sbxdb/sbxdb/chain"
)

var logCmd = register(&command{
	name:    "log",
	aliases: []string{"list"}, // the checkpoint list; ls lists a checkpoint's files
	group:   groupInspect,
	args:    "THREAD",
	nargs:   1,
	summary: "List a thread's chain from the head back through parents",
	detail: `The head comes first, marked (head). The walk stops at the root, at a
parent that no longer exists in the thread (retention deleted it), or at a
checkpoint seen before. Checkpoints of the thread that are not on the chain
are counted, not listed. With --json, each row has its parentCheckpointId,
so a missing parent shows as the last row's parent. FILES counts regular
files, as capture and restore do; ENTRIES adds empty directories and
symlinks. sbxdb list is the same command.

` + viaServer,
	run: runLog,
})

// logRow is one checkpoint as `sbxdb log --json` prints it.
type logRow struct {
	ID          string       `json:"id"`
	ParentID    *string      `json:"parentCheckpointId"`
	CreatedAt   int64        `json:"createdAt"` // epoch ms
	Reason      chain.Reason `json:"reason"`
	Label       string       `json:"label,omitempty"`
	SourceRunID string       `json:"sourceRunId,omitempty"`
	Files       int          `json:"files"`   // regular files, as capture and restore count them
	Entries     int          `json:"entries"` // files, empty directories and symlinks
	Artifacts   int          `json:"artifacts"`
	Head        bool         `json:"head,omitempty"`
}

func runLog(inv *invocation, args []string) error {
	thread := args[0]
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	list, err := db.List(inv.ctx, thread)
	if err != nil {
		return err
	}
	head, err := db.Head(inv.ctx, thread)
	if err != nil {
		return err
	}
	if head == "" && len(list) == 0 {
		return fmt.Errorf("thread %s not found", thread)
	}

	byID := make(map[string]*chain.Checkpoint, len(list))
	for _, cp := range list {
		byID[cp.ID] = cp
	}
	rows := []logRow{}
	seen := map[string]bool{}
	id := head
	for ; id != "" && !seen[id] && byID[id] != nil; id = byID[id].ParentID {
		seen[id] = true
		cp := byID[id]
		rows = append(rows, logRow{
			ID: cp.ID, ParentID: nullable(cp.ParentID), CreatedAt: cp.CreatedAt, Reason: cp.Reason,
			Label: cp.Label, SourceRunID: cp.SourceRunID,
			Files: kinds(cp)[chain.KindFile], Entries: len(cp.Files), Artifacts: len(cp.Artifacts), Head: cp.ID == head,
		})
	}
	if inv.json {
		return writeJSON(inv.out, rows)
	}

	tw := table(inv.out)
	fmt.Fprintln(tw, "ID\tCREATED\tREASON\tLABEL\tSOURCE RUN\tFILES\tENTRIES\tARTIFACTS")
	for _, r := range rows {
		mark := ""
		if r.Head {
			mark = " (head)"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", cell(r.ID), mark, timeText(r.CreatedAt),
			cell(string(r.Reason)), cell(r.Label), cell(r.SourceRunID), r.Files, r.Entries, r.Artifacts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case head == "":
		fmt.Fprintf(inv.out, "thread %s has no head\n", cell(thread))
	case id == "": // reached the root
	case seen[id]:
		fmt.Fprintf(inv.out, "checkpoint %s repeats: the chain loops\n", cell(id))
	case id == head:
		fmt.Fprintf(inv.out, "head %s missing\n", cell(id))
	default:
		fmt.Fprintf(inv.out, "parent %s missing (pruned)\n", cell(id))
	}
	if off := len(list) - len(rows); off > 0 {
		verb := "are"
		if off == 1 {
			verb = "is"
		}
		fmt.Fprintf(inv.out, "%s of thread %s %s not on the head chain\n", count(off, "more checkpoint"), cell(thread), verb)
	}
	return nil
}

// kinds counts a checkpoint's manifest entries by kind: files as capture
// and restore count them, empty directories, symlinks.
func kinds(cp *chain.Checkpoint) map[chain.Kind]int {
	n := map[chain.Kind]int{}
	for _, e := range cp.Files {
		n[e.Kind]++
	}
	return n
}
