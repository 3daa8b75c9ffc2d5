package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/spf13/pflag"
)

// The maintenance commands: check (fsck), gc and compact.

var checkCmd = register(&command{
	name:       "check",
	group:      groupMaintain,
	flagsUsage: "[--verify-blobs] [--repair]",
	summary:    "Check the store's consistency: reference counts, heads, chains and blobs",
	detail: `Recomputes every blob key's reference count from the checkpoints and
compares it with the stored count; checks that the thread index and the
checkpoint records agree, that every head names a checkpoint of its thread,
that every referenced blob is stored, and that the blob index matches its
files. With --verify-blobs every blob is read back and checked against its
key (sha256) and size. Problems are errors; a checkpoint no head chain
reaches is a warning; a parent retention deleted (dangling parent) is a
note, as ordinary as the retention that left it. Neither warnings nor notes
change the exit status.

Blob files moved into blobs/quarantine (the database opened on an older
meta page, so it may be older than its blob files) are warnings naming
each file and the blobs it holds.

--repair (opening the store for writing) rewrites the reference counts
from the checkpoints; drops from the blob index every blob found damaged
or missing (with --verify-blobs, every blob whose bytes do not match its
key), printing the checkpoints that name it: they are kept, and restore
again once a capture of the same files stores the bytes again; and
indexes every intact blob in quarantine that the index lacks, then
removes the quarantined file. After a repair that changed the blob index,
the store is checked again and the exit status says how that went. Exit
status 0 when no errors were found, 12 otherwise (with --json, the report
is printed either way). Unreferenced blobs are
not a problem: gc deletes them once they are older than its --older-than.
With --json: {threads, checkpoints, blobKeys, blobs, unreferenced,
verified, repaired, findings: [{severity, kind, subject, detail}],
dropped: [{key, checkpoints}], reindexed, reindexedFiles, left}.

` + viaServer,
	flags: func(fset *pflag.FlagSet, inv *invocation) {
		fset.BoolVar(&inv.verifyBlobs, "verify-blobs", false, "read every blob back and check it against its key")
		fset.BoolVar(&inv.repair, "repair", false, "rewrite the reference counts, drop damaged blobs from the index, re-index the quarantine")
	},
	check: func(inv *invocation, args []string) error {
		inv.writes = inv.repair
		return checkCount(args, 0, "")
	},
	run: runCheck,
})

func runCheck(inv *invocation, _ []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	opts := sbxdb.CheckStoreOptions{VerifyBlobs: inv.verifyBlobs, Repair: inv.repair}
	if inv.verifyBlobs {
		opts.Progress = inv.checkProgress()
	}
	rep, err := db.Check(inv.ctx, opts)
	inv.clearStatus()
	if err != nil && rep == nil {
		return err
	}
	if inv.json {
		if err != nil {
			return err // the repair failed: that is the outcome
		}
		if err := writeJSON(inv.out, rep); err != nil {
			return err
		}
	} else {
		tw := table(inv.out)
		for _, f := range rep.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Severity, f.Kind, cell(f.Subject), f.Detail)
		}
		tw.Flush()
		verified := ""
		if rep.Verified {
			verified = ", every blob read back"
		}
		notes := ""
		if n := severity(rep, sbxdb.SeverityNote); n > 0 {
			notes = ", " + count(n, "note")
		}
		fmt.Fprintf(inv.out, "%s, %s, %s referenced, %s stored (%d unreferenced)%s: %s, %s%s\n",
			count(rep.Threads, "thread"), count(rep.Checkpoints, "checkpoint"), count(rep.BlobKeys, "blob key"),
			count(rep.Blobs, "blob"), rep.Unreferenced, verified, count(severity(rep, sbxdb.SeverityError), "error"),
			count(severity(rep, sbxdb.SeverityWarning), "warning"), notes)
		if rep.OrphanFiles > 0 {
			fmt.Fprintf(inv.out, "%s left by a crash (gc removes them)\n", count(rep.OrphanFiles, "orphan blob file"))
		}
		if rep.Repaired > 0 {
			fmt.Fprintf(inv.out, "repaired: rewrote the counts of %s\n", count(rep.Repaired, "blob key"))
		}
		printBlobRepair(inv, rep)
	}
	if err != nil { // the repair failed; the report above says what was found
		return err
	}
	if len(rep.Dropped) > 0 || rep.Reindexed > 0 || rep.ReindexedFiles > 0 {
		// The blob index changed: what is wrong now decides the exit.
		after, err := db.Check(inv.ctx, sbxdb.CheckStoreOptions{})
		if err != nil {
			return err
		}
		if !inv.json {
			fmt.Fprintf(inv.out, "after the repair: %s, %s\n", count(severity(after, sbxdb.SeverityError), "error"), count(severity(after, sbxdb.SeverityWarning), "warning"))
		}
		if !after.Clean() {
			return problems(inv)
		}
		return nil
	}
	if !rep.Clean() {
		if rep.Repaired > 0 && onlyKind(rep, sbxdb.FindingRefCount) {
			return nil // what was wrong is repaired
		}
		return problems(inv)
	}
	return nil
}

// problems is the outcome of a check that found errors: exit status 12,
// the report printed says which (with --json, nothing more is printed).
func problems(inv *invocation) error {
	if inv.json {
		return &reportedError{errProblems}
	}
	return errProblems
}

// printBlobRepair says what a repair did to the blob index: the blobs it
// dropped and the checkpoints that need them, what it re-indexed from
// quarantine, and what it had to leave.
func printBlobRepair(inv *invocation, rep *sbxdb.CheckReport) {
	if len(rep.Dropped) > 0 {
		fmt.Fprintf(inv.out, "repaired: dropped %s from the index; the checkpoints naming them restore again once the same bytes are captured again:\n",
			count(len(rep.Dropped), "damaged blob"))
		tw := table(inv.out)
		for _, d := range rep.Dropped {
			fmt.Fprintf(tw, "  %s\tneeded by %s\n", d.Key, strings.Join(d.Checkpoints, ", "))
		}
		tw.Flush()
	}
	if rep.ReindexedFiles > 0 || rep.Reindexed > 0 {
		fmt.Fprintf(inv.out, "repaired: indexed %s again from %s in quarantine\n",
			count(rep.Reindexed, "blob"), count(rep.ReindexedFiles, "file"))
	}
	for _, l := range rep.Left {
		fmt.Fprintf(inv.out, "left for a later repair: %s\n", l)
	}
}

// severity counts the findings of rep of one severity.
func severity(rep *sbxdb.CheckReport, sev string) int {
	n := 0
	for _, f := range rep.Findings {
		if f.Severity == sev {
			n++
		}
	}
	return n
}

// onlyKind reports whether every error of rep is of kind.
func onlyKind(rep *sbxdb.CheckReport, kind string) bool {
	return !slices.ContainsFunc(rep.Findings, func(f sbxdb.Finding) bool {
		return f.Severity == sbxdb.SeverityError && f.Kind != kind
	})
}

var gcCmd = register(&command{
	name:       "gc",
	group:      groupMaintain,
	writes:     true,
	flagsUsage: "--older-than DURATION [--keep N] [--thread THREAD]... [--repack-threshold FRACTION] [--no-recompress] [--dry-run] [-v]",
	summary:    "Delete old checkpoints and unused blobs, and give their space back",
	detail: `Three steps. Retention (with --keep N): on every thread (or each --thread),
keep the newest N checkpoints of the head chain, the head included (N 0
keeps the head only), and delete the rest of the thread; a thread whose
writer lease another writer holds is skipped and named. The sweep: delete
every blob no checkpoint uses that was last uploaded or used more than
--older-than ago (required: say 24h or 7d, longer than your longest
capture; 0 deletes unused blobs of any age, which is safe against captures
in this process but not against a host that uploaded blobs it has yet to
name). Nothing is deleted when a referenced blob is missing (run sbxdb
check). Repacking: pack files whose dead share reaches --repack-threshold
are rewritten without it, and pack files written more than --older-than
ago at the fast level captures compress at are recompressed at a better one
(--no-recompress leaves them). Blob files a crash left behind are removed
once older than --older-than.

Prints the checkpoints deleted per thread, the blobs deleted, the packs
rewritten and recompressed and the bytes given back (-v lists every blob
key). --dry-run changes nothing and prints the plan: what would be
deleted as the store is now (its sweep counts the references retention
would drop), which files repacking would rewrite after that sweep, and the
bytes it would give back (with --json, the same fields and freed); a run
after it decides again, keeping what was used or leased meanwhile. With
--json: {retention: {deleted, busy}, sweep: {examined, referenced, deleted,
bytes}, repack: {packs, blobs, before, after, recompressed,
recompressedBytes}, before, after}.

` + viaServer,
	flags: func(fset *pflag.FlagSet, inv *invocation) {
		fset.Func("keep", "keep the newest `N` checkpoints of each thread, the head included (default: no retention)", func(s string) error {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fmt.Errorf("%q is not a count of checkpoints", s)
			}
			inv.keep = &n
			return nil
		})
		fset.Func("older-than", "delete unused blobs older than `DURATION` (required; e.g. 24h, 7d, 90m, 0)", func(s string) error {
			d, err := parseAge(s)
			if err != nil {
				return err
			}
			inv.olderThan = &d
			return nil
		})
		fset.Var(&inv.threads, "thread", "apply retention to `THREAD` only (repeatable)")
		fset.BoolVar(&inv.dryRun, "dry-run", false, "change nothing; print what would be deleted")
		fset.Float64Var(&inv.repackThreshold, "repack-threshold", cas.DefaultRepackThreshold, "rewrite packs whose dead share is at least `FRACTION`")
		fset.BoolVar(&inv.noRecompress, "no-recompress", false, "do not recompress cold packs at a better level")
		fset.BoolVarP(&inv.verbose, "verbose", "v", false, "list every deleted blob key")
	},
	check: func(inv *invocation, args []string) error {
		switch {
		case inv.olderThan == nil:
			return errors.New("--older-than is required (for example 24h: longer than your longest capture)")
		case len(inv.threads) > 0 && inv.keep == nil:
			return errors.New("--thread limits retention: give --keep too")
		case !(inv.repackThreshold > 0 && inv.repackThreshold <= 1):
			return fmt.Errorf("--repack-threshold %v: must be above 0 and at most 1", inv.repackThreshold)
		}
		if inv.dryRun {
			inv.writes = false
		}
		return checkCount(args, 0, "")
	},
	run: runGC,
})

func runGC(inv *invocation, _ []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	opts := sbxdb.GCOptions{
		Retain:          inv.keep != nil,
		Keep:            derefInt(inv.keep),
		Threads:         inv.threads,
		OlderThan:       *inv.olderThan,
		Immediate:       *inv.olderThan == 0,
		RepackThreshold: inv.repackThreshold,
		Recompress:      !inv.noRecompress,
	}
	if inv.dryRun {
		// The dry run prints the plan itself.
		p, err := db.PlanGC(inv.ctx, opts)
		switch {
		case err != nil:
			return err
		case inv.json:
			return writeJSON(inv.out, p)
		}
		printGCPlan(inv, p)
		return nil
	}
	res, err := db.GC(inv.ctx, opts)
	// On failure, what was done before it is said too: retention may
	// have deleted checkpoints before the sweep failed. --json prints the
	// failure alone, saying so.
	switch {
	case res == nil:
	case !inv.json:
		printGC(inv, res, err == nil)
	case err == nil:
		err = writeJSON(inv.out, res)
	default:
		n := 0
		for _, ids := range res.Retention.Deleted {
			n += len(ids)
		}
		if n > 0 {
			err = fmt.Errorf("%w (retention had deleted %s first)", err, count(n, "checkpoint"))
		}
	}
	return err
}

func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// parseAge parses a non-negative duration, with "d" for days as well as
// time.ParseDuration's units ("7d", "36h", "1d12h", "0").
func parseAge(s string) (time.Duration, error) {
	var d time.Duration
	rest := s
	if i := strings.Index(rest, "d"); i > 0 {
		days, err := strconv.Atoi(rest[:i])
		if err != nil || days < 0 {
			return 0, fmt.Errorf("%q is not a duration (examples: 24h, 7d, 90m)", s)
		}
		d, rest = time.Duration(days)*24*time.Hour, rest[i+1:]
	}
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (examples: 24h, 7d, 90m)", s)
		}
		d += r
	}
	if d < 0 || strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return d, nil
}

// printRetention prints retention's deletions per thread and its summary,
// with verb ("deleted", "would delete").
func printRetention(inv *invocation, r sbxdb.RetentionResult, verb string) {
	w := inv.out
	n := 0
	for _, t := range slices.Sorted(maps.Keys(r.Deleted)) {
		ids := r.Deleted[t]
		n += len(ids)
		fmt.Fprintf(w, "thread %s: %s %s: %s\n", cell(t), verb, count(len(ids), "checkpoint"), strings.Join(ids, " "))
	}
	fmt.Fprintf(w, "retention: %s %s in %s", verb, count(n, "checkpoint"), count(len(r.Deleted), "thread"))
	if len(r.Busy) > 0 {
		fmt.Fprintf(w, "; skipped %s whose writer is busy: %s", count(len(r.Busy), "thread"), strings.Join(r.Busy, " "))
	}
	fmt.Fprintln(w)
}

// printSweep prints the sweep's keys (with -v) and its summary.
func printSweep(inv *invocation, s sbxdb.SweepResult, verb string) {
	w := inv.out
	if inv.verbose {
		for _, k := range s.Deleted {
			fmt.Fprintf(w, "%s %s\n", verb, k)
		}
	}
	fmt.Fprintf(w, "sweep: examined %s, %d referenced; %s %s (%s)\n",
		count(s.Examined, "blob"), s.Referenced, verb, count(len(s.Deleted), "blob"), size(s.Bytes))
}

// printGCPlan prints a dry run's plan: what gc would delete, rewrite and
// give back as the store is now.
func printGCPlan(inv *invocation, p *sbxdb.GCPlan) {
	w := inv.out
	if inv.keep != nil {
		printRetention(inv, p.Retention, "would delete")
	}
	printSweep(inv, p.Sweep, "would delete")
	r := p.Repack
	fmt.Fprintf(w, "repack: would rewrite %s (%s), recompressing %s (%s)\n",
		count(r.Packs, "file"), size(r.Before), count(r.Recompressed, "cold file"), size(r.RecompressedBytes))
	fmt.Fprintf(w, "would give back %s of %s stored, recompression not counted\n",
		size(p.Freed), size(p.Before.PackBytes+p.Before.LargeBytes))
}

// printGC prints what gc did; complete is false when it stopped on an
// error, after retention.
func printGC(inv *invocation, res *sbxdb.GCResult, complete bool) {
	w := inv.out
	if inv.keep != nil {
		printRetention(inv, res.Retention, "deleted")
	}
	if !complete {
		return
	}
	printSweep(inv, res.Sweep, "deleted")
	r := res.Repack
	fmt.Fprintf(w, "repack: rewrote %s, moving %s: %s → %s", count(r.Packs, "pack"), count(r.Blobs, "live blob"), size(r.Before), size(r.After))
	if r.Recompressed > 0 {
		fmt.Fprintf(w, " (recompressed %s of %s)", count(r.Recompressed, "cold file"), size(r.RecompressedBytes))
	}
	fmt.Fprintln(w)
	for _, d := range r.Damaged {
		fmt.Fprintf(w, "repack: left a damaged pack alone: %s\n", d)
	}
	if res.Orphans > 0 {
		fmt.Fprintf(w, "removed %s a crash left behind\n", count(res.Orphans, "blob file"))
	}
	before, after := res.Before.PackBytes+res.Before.LargeBytes, res.After.PackBytes+res.After.LargeBytes
	fmt.Fprintf(w, "blobs stored: %s → %s, %s given back\n", size(before), size(after), size(before-after))
}

var compactCmd = register(&command{
	name:      "compact",
	group:     groupMaintain,
	writes:    true,
	exclusive: true,
	summary:   "Rewrite the database file without its free pages",
	detail: `bbolt files never shrink: pages freed by deleted checkpoints are reused but
never given back. compact copies the database into a new file and renames it
over the old one (a crash leaves one or the other, whole), then prints the
sizes before and after. Run it after a gc that deleted much; it needs the
store to itself. With --json: {before, after}.

While sbxdb serve runs for the store, it refuses to run (exit status 11),
naming the server: stop the server first.`,
	run: runCompact,
})

func runCompact(inv *invocation, _ []string) error {
	if err := needStore(inv); err != nil {
		return err
	}
	before, after, err := engine.Compact(inv.ctx, inv.dir, &engine.Options{LockTimeout: lockTimeout, Metadata: inv.metadata})
	if err != nil {
		return openError(inv, err)
	}
	if inv.json {
		return writeJSON(inv.out, struct {
			Before int64 `json:"before"`
			After  int64 `json:"after"`
		}{before, after})
	}
	saved := 0.0
	if before > 0 {
		saved = 100 * float64(before-after) / float64(before)
	}
	_, err = fmt.Fprintf(inv.out, "compacted %s: %s → %s (%.0f%% smaller)\n", inv.dir, size(before), size(after), saved)
	return err
}
