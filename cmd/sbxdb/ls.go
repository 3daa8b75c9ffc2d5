package main

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/sbxdb/sbxdb/chain"
)

var lsCmd = register(&command{
	name:    "ls",
	group:   groupInspect,
	args:    "CHECKPOINT [PATH]",
	summary: "List a checkpoint's entries under a path: mode, size and path",
	detail: `One line per entry of the checkpoint at or beneath PATH (all of them
without PATH), in path byte order: its mode, its size in bytes ("-" for a
directory or a symlink) and its path, a symlink's followed by "-> TARGET".
The mode is the one restore gives the entry: "drwxr-xr-x" for a directory,
"-rw-r--r--" for a file, "-rwxr-xr-x" for an executable file, "lrwxrwxrwx"
for a symlink. The manifest records only empty directories; the
directories that hold entries are listed too, each before what it holds,
as restore creates them.

PATH is relative to the workspace root with / separators ("src/app"), as
show lists it; a leading / is ignored. A PATH naming a file lists that file,
one naming a directory lists it and everything beneath it, and one naming
nothing in the checkpoint is an error. With --json, an array of the
manifest entries listed, in their wire shape ({path, kind, blobKey, size,
executable} or {path, kind, target}): directories only implied by deeper
entries are not in it.

` + checkpointHelp + `

` + viaServer,
	check: func(_ *invocation, args []string) error {
		if len(args) == 2 {
			return nil
		}
		if len(args) > 2 {
			return checkCount(args, 2, "CHECKPOINT PATH")
		}
		return checkCount(args, 1, "CHECKPOINT")
	},
	run: runLs,
})

func runLs(inv *invocation, args []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	cp, err := getCheckpoint(inv, db, args[0])
	if err != nil {
		return err
	}
	under := "."
	if len(args) == 2 {
		under = lsPath(args[1])
	}
	entries := lsEntries(cp.Files, under)
	if len(entries) == 0 && under != "." {
		return fmt.Errorf("%s is not in checkpoint %s", cell(args[1]), cell(cp.ID))
	}
	if inv.json {
		list := []chain.Entry{}
		for _, e := range entries {
			if !e.implied {
				list = append(list, e.Entry)
			}
		}
		return writeJSON(inv.out, list)
	}
	width := 0
	for _, e := range entries {
		width = max(width, len(e.size()))
	}
	for _, e := range entries {
		name := cell(e.Path)
		if e.Kind == chain.KindSymlink {
			name += " -> " + cell(e.Target)
		}
		if _, err := fmt.Fprintf(inv.out, "%s %*s %s\n", e.mode(), width, e.size(), name); err != nil {
			return err
		}
	}
	return nil
}

// lsEntry is one line of sbxdb ls: a manifest entry, or a directory that
// entries beneath it imply.
type lsEntry struct {
	chain.Entry
	implied bool // not in the manifest: a directory above recorded entries
}

// mode is the entry's mode as ls -l prints it: the mode restore gives it.
func (e lsEntry) mode() string {
	switch {
	case e.Kind == chain.KindDir:
		return "drwxr-xr-x"
	case e.Kind == chain.KindSymlink:
		return "lrwxrwxrwx"
	case e.Kind == chain.KindFile && e.Executable:
		return "-rwxr-xr-x"
	case e.Kind == chain.KindFile:
		return "-rw-r--r--"
	}
	return "?---------" // a kind this build does not know
}

// size is the entry's size column: bytes for a file, "-" for the rest.
func (e lsEntry) size() string {
	if e.Kind != chain.KindFile {
		return "-"
	}
	return strconv.FormatInt(e.Size, 10)
}

// lsPath cleans ls's PATH argument into the form of a manifest path: a
// leading /, "." segments and trailing slashes are dropped. "." is the
// whole tree. A path with a ".." segment is left with it, and matches no
// entry.
func lsPath(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return "."
	}
	return path.Clean(p)
}

// lsEntries returns the entries of files at or beneath the cleaned path
// under (all of them for "."), with the directories above them up to
// under that the manifest does not record, in path byte order.
func lsEntries(files []chain.Entry, under string) []lsEntry {
	in := func(p string) bool {
		return under == "." || p == under || strings.HasPrefix(p, under+"/")
	}
	var out []lsEntry
	recorded := map[string]bool{}
	for _, e := range files {
		if in(e.Path) {
			out = append(out, lsEntry{Entry: e})
			recorded[e.Path] = true
		}
	}
	implied := map[string]bool{}
	for _, e := range out {
		for d := path.Dir(e.Path); d != "." && in(d) && !recorded[d] && !implied[d]; d = path.Dir(d) {
			implied[d] = true
		}
	}
	for d := range implied {
		out = append(out, lsEntry{Entry: chain.Entry{Path: d, Kind: chain.KindDir}, implied: true})
	}
	// A directory sorts before what it holds: "src" < "src/…". Paths
	// sharing a prefix are not contiguous ("src-old" sorts between "src"
	// and "src/…"), as in the manifest.
	slices.SortStableFunc(out, func(a, b lsEntry) int { return strings.Compare(a.Path, b.Path) })
	return out
}
