package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra/doc"
)

var manCmd = register(&command{
	name:    "man",
	group:   groupOther,
	args:    "DIR",
	nargs:   1,
	noStore: true,
	noJSON:  true,
	summary: "Write a man page for sbxdb and each of its commands into DIR",
	detail: `Writes sbxdb.1 and sbxdb-COMMAND.1 for each command into DIR (made if it
does not exist), from the same text sbxdb help prints: install them into a
man1 directory of MANPATH, e.g. /usr/local/share/man/man1, and man sbxdb
reads them. The pages are dated this month, or as $SOURCE_DATE_EPOCH says
for a reproducible build.`,
	run: runMan,
})

func runMan(inv *invocation, args []string) error {
	dir := args[0]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	t := newTree(inv, nil)
	t.root.DisableAutoGenTag = true // the same pages for the same build
	header := &doc.GenManHeader{Title: "SBXDB", Section: "1", Source: "sbxdb " + version(), Manual: "sbxdb manual"}
	if err := doc.GenManTree(t.root, header, dir); err != nil {
		return err
	}
	_, err := fmt.Fprintf(inv.out, "wrote the man pages into %s\n", dir)
	return err
}
