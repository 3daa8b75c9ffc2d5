package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sbxdb/sbxdb/chain"
)

var diffCmd = register(&command{
	name:    "diff",
	group:   groupInspect,
	args:    "A B",
	nargs:   2,
	summary: "Compare the file manifests of checkpoints A and B",
	detail: `One line per path that differs, in path order:

  + PATH (WHAT)          only in B
  - PATH (WHAT)          only in A
  M PATH (OLD -> NEW)    in both, with other bytes, kind, mode or target

WHAT is "N B" for a file (N bytes, ", executable" when it is), "dir" for an
empty directory and "symlink to TARGET" for a symlink; a file whose bytes
changed but not its size shows the same size twice. The last line counts the
paths added, removed and changed. Only the manifests are compared (bytes by
blob key, no blob is read); conversations and artifacts are not. The exit
status is 0 whether or not they differ. With --json: {from, to, changes,
added, removed, changed}, each change {op, path, old, new} with op "+", "-"
or "M" and old and new manifest entries in their wire shape (null when
absent).

A and B are CHECKPOINTs, each resolved on its own.
` + checkpointHelp + `

` + viaServer,
	run: runDiff,
})

// change is one path that differs, as `sbxdb diff --json` prints it.
type change struct {
	Op   string       `json:"op"` // "+", "-" or "M"
	Path string       `json:"path"`
	Old  *chain.Entry `json:"old"` // in A; nil when added
	New  *chain.Entry `json:"new"` // in B; nil when removed
}

// diffJSON is what `sbxdb diff --json` prints.
type diffJSON struct {
	From    string   `json:"from"`
	To      string   `json:"to"`
	Changes []change `json:"changes"`
	Added   int      `json:"added"`
	Removed int      `json:"removed"`
	Changed int      `json:"changed"`
}

func runDiff(inv *invocation, args []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	a, err := getCheckpoint(inv, db, args[0])
	if err != nil {
		return err
	}
	b, err := getCheckpoint(inv, db, args[1])
	if err != nil {
		return err
	}
	d := diffJSON{From: a.ID, To: b.ID, Changes: diffManifests(a.Files, b.Files)}
	for _, c := range d.Changes {
		switch c.Op {
		case "+":
			d.Added++
		case "-":
			d.Removed++
		default:
			d.Changed++
		}
	}
	if inv.json {
		return writeJSON(inv.out, d)
	}
	for _, c := range d.Changes {
		switch c.Op {
		case "+":
			fmt.Fprintf(inv.out, "+ %s (%s)\n", cell(c.Path), what(c.New))
		case "-":
			fmt.Fprintf(inv.out, "- %s (%s)\n", cell(c.Path), what(c.Old))
		default:
			fmt.Fprintf(inv.out, "M %s (%s -> %s)\n", cell(c.Path), what(c.Old), what(c.New))
		}
	}
	_, err = fmt.Fprintf(inv.out, "%d added, %d removed, %d changed\n", d.Added, d.Removed, d.Changed)
	return err
}

// diffManifests returns the paths whose entries differ between a and b, in
// path byte order.
func diffManifests(a, b []chain.Entry) []change {
	old := make(map[string]*chain.Entry, len(a))
	for i := range a {
		old[a[i].Path] = &a[i]
	}
	changes := []change{}
	seen := make(map[string]bool, len(b))
	for i := range b {
		n := &b[i]
		seen[n.Path] = true
		switch o := old[n.Path]; {
		case o == nil:
			changes = append(changes, change{Op: "+", Path: n.Path, New: n})
		case *o != *n:
			changes = append(changes, change{Op: "M", Path: n.Path, Old: o, New: n})
		}
	}
	for i := range a {
		if o := &a[i]; !seen[o.Path] {
			changes = append(changes, change{Op: "-", Path: o.Path, Old: o})
		}
	}
	slices.SortFunc(changes, func(x, y change) int { return strings.Compare(x.Path, y.Path) })
	return changes
}

// what describes a manifest entry for a diff line.
func what(e *chain.Entry) string {
	switch e.Kind {
	case chain.KindFile:
		s := strconv.FormatInt(e.Size, 10) + " B"
		if e.Executable {
			s += ", executable"
		}
		return s
	case chain.KindDir:
		return "dir"
	case chain.KindSymlink:
		return "symlink to " + cell(e.Target)
	}
	return cell(string(e.Kind))
}
