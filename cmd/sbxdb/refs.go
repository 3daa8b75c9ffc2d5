package main

import (
	"fmt"

	"github.com/sbxdb/sbxdb/chain"
)

var refsCmd = register(&command{
	name:    "refs",
	group:   groupInspect,
	summary: "List blob keys with their reference counts",
	detail: `One line per blob key that checkpoints use, with the number of checkpoints
using it, in key order, then a total. A key used twice in one checkpoint counts
once. With --json, an array of {key, references}.

` + viaServer,
	run: runRefs,
})

func runRefs(inv *invocation, _ []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	refs, err := db.BlobReferences(inv.ctx)
	if err != nil {
		return err
	}
	if inv.json {
		if refs == nil {
			refs = []chain.BlobRef{}
		}
		return writeJSON(inv.out, refs)
	}
	tw := table(inv.out)
	fmt.Fprintln(tw, "BLOB KEY\tREFS")
	var total int64
	for _, r := range refs {
		fmt.Fprintf(tw, "%s\t%d\n", cell(r.Key), r.References)
		total += r.References
	}
	fmt.Fprintf(tw, "total: %s\t%d\n", count(len(refs), "key"), total)
	return tw.Flush()
}
