package main

import (
	"fmt"
	"strings"

	"github.com/sbxdb/sbxdb/chain"
)

var showCmd = register(&command{
	name:    "show",
	group:   groupInspect,
	args:    "CHECKPOINT",
	nargs:   1,
	summary: "Show one checkpoint: header, files, artifacts and conversation size",
	detail: `The entries are counted by kind (files as capture and restore count
them, empty directories, symlinks), then listed: kind, size in bytes, x for executable, path, and the first 12
hex digits of the blob key (or -> target for a symlink). With --json, the
checkpoint in its wire shape (the TypeScript SandboxCheckpoint).

` + checkpointHelp + `

` + viaServer,
	run: runShow,
})

func runShow(inv *invocation, args []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	cp, err := getCheckpoint(inv, db, args[0])
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.out, cp)
	}

	w := inv.out
	parent := cp.ParentID
	if parent == "" {
		parent = "(root)"
	}
	tw := table(w)
	for _, kv := range [][2]string{
		{"checkpoint", cp.ID}, {"thread", cp.ThreadID}, {"parent", parent},
		{"created", timeText(cp.CreatedAt)}, {"reason", string(cp.Reason)},
		{"label", cp.Label}, {"source run", cp.SourceRunID},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], cell(kv[1]))
	}
	tw.Flush()

	k := kinds(cp)
	fmt.Fprintf(w, "\nentries: %d (%s, %s, %s)\n", len(cp.Files),
		count(k[chain.KindFile], "file"), count(k[chain.KindDir], "empty dir"), count(k[chain.KindSymlink], "symlink"))
	if len(cp.Files) > 0 {
		tw = table(w)
		fmt.Fprintln(tw, "KIND\tSIZE\tX\tPATH\tBLOB/TARGET")
		for _, e := range cp.Files {
			size, x, what := "-", "", "-"
			switch e.Kind {
			case chain.KindFile:
				size, what = fmt.Sprint(e.Size), shortKey(e.BlobKey)
				if e.Executable {
					x = "x"
				}
			case chain.KindSymlink:
				what = "-> " + cell(e.Target)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(string(e.Kind)), size, x, cell(e.Path), what)
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nartifacts: %d\n", len(cp.Artifacts))
	if len(cp.Artifacts) > 0 {
		tw = table(w)
		fmt.Fprintln(tw, "ID\tNAME\tMIME TYPE\tSIZE\tCREATED\tBLOB")
		for _, a := range cp.Artifacts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", cell(a.ArtifactID), cell(a.Name), cell(a.MimeType),
				a.Size, timeText(a.CreatedAt), shortKey(a.BlobKey))
		}
		tw.Flush()
	}

	bytes := 0
	for _, m := range cp.Conversation {
		bytes += len(m)
	}
	_, err = fmt.Fprintf(w, "\nconversation: %s, %s\n", count(len(cp.Conversation), "message"), count(bytes, "byte"))
	return err
}

// shortKey abbreviates a blob key to the first 12 hex digits of its hash.
func shortKey(key string) string {
	for _, p := range []string{chain.FilePrefix, chain.ArtifactPrefix} {
		if h, ok := strings.CutPrefix(key, p); ok && len(h) > 12 {
			return h[:12]
		}
	}
	return cell(key)
}
