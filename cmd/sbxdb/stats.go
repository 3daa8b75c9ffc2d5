package main

import (
	"fmt"
	"time"

	"github.com/sbxdb/sbxdb/engine"
)

var statsCmd = register(&command{
	name:    "stats",
	group:   groupInspect,
	summary: "Show what the store holds and what it costs on disk",
	detail: `Prints the number of threads and checkpoints; the checkpoint metadata as it
would take stored whole (logical: every checkpoint with its full file list and
conversation) and as stored (physical: records plus the chunks checkpoints
share), and the sharing ratio between them; the blobs' uncompressed bytes
(each blob once) and the bytes their pack and large files take; and the
database file's size and free pages. It reads every record header and chunk
size, not the blobs. With --json, the same fields as an object.

` + viaServer,
	run: runStats,
})

func runStats(inv *invocation, _ []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := db.Stats(inv.ctx)
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.out, s)
	}
	tw := table(inv.out)
	ratio := func(a, b int64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1fx", float64(a)/float64(b))
	}
	fmt.Fprintf(tw, "threads\t%d\n", s.Threads)
	fmt.Fprintf(tw, "checkpoints\t%d\n", s.Checkpoints)
	fmt.Fprintf(tw, "metadata, logical\t%s\t(stored whole)\n", size(s.LogicalMetadataBytes))
	fmt.Fprintf(tw, "metadata, physical\t%s\t(records and %s)\n", size(s.PhysicalMetadataBytes), count(s.Chunks, "chunk"))
	fmt.Fprintf(tw, "metadata sharing\t%s\n", ratio(s.LogicalMetadataBytes, s.PhysicalMetadataBytes))
	fmt.Fprintf(tw, "blobs, logical\t%s\t(%s, uncompressed)\n", size(s.BlobLogicalBytes), count(s.Blobs, "blob"))
	fmt.Fprintf(tw, "blobs, physical\t%s\t(%s of logical)\n", size(s.BlobPhysicalBytes), ratio(s.BlobPhysicalBytes, s.BlobLogicalBytes))
	if s.Metadata != "" {
		fmt.Fprintf(tw, "metadata database\t%s\n", s.Metadata)
	} else {
		free := int64(s.FreePages) * int64(s.PageSize)
		fmt.Fprintf(tw, "database file\t%s\t(%s free in %s)\n", size(s.DBFileBytes), size(free), count(s.FreePages, "page"))
	}
	return tw.Flush()
}

var migrateCmd = register(&command{
	name:      "migrate",
	group:     groupMaintain,
	exclusive: true,
	summary:   "Upgrade a store written by an older sbxdb to this build's format",
	detail: `Opens the store for writing, which rewrites a store of an older format in
this build's format, in one transaction: a crash or an error leaves the store
as it was, in its old format, readable by the build that wrote it. Format 1
(whole checkpoint records) is rewritten as records and shared chunks; in
format 2 (chunks for every manifest) the records stay as they are and the
set of checkpoints whose references are not folded yet is rekeyed and
weighed. A current store is left alone. Commands that only read refuse an
older store and point here; commands that write migrate it themselves. It needs the store
to itself. With --json: {from, to, seconds}.

While sbxdb serve runs for the store, it refuses to run (exit status 11),
naming the server: stop the server first.`,
	run: runMigrate,
})

func runMigrate(inv *invocation, _ []string) error {
	if err := needStore(inv); err != nil {
		return err
	}
	start := time.Now()
	from, to, err := engine.Migrate(inv.ctx, inv.dir, &engine.Options{LockTimeout: lockTimeout, Metadata: inv.metadata})
	if err != nil {
		return openError(inv, err)
	}
	took := time.Since(start)
	if inv.json {
		return writeJSON(inv.out, struct {
			From    int     `json:"from"`
			To      int     `json:"to"`
			Seconds float64 `json:"seconds"`
		}{from, to, took.Seconds()})
	}
	if from == to {
		_, err = fmt.Fprintf(inv.out, "store %s is already format %d\n", inv.dir, to)
		return err
	}
	_, err = fmt.Fprintf(inv.out, "migrated %s from format %d to %d in %s\n", inv.dir, from, to, took.Round(time.Millisecond))
	return err
}
