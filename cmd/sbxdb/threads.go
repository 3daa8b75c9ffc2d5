package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/sbxdb/sbxdb/lease"
)

var threadsCmd = register(&command{
	name:    "threads",
	group:   groupInspect,
	summary: "List threads with head, checkpoint count, latest time and writer lease",
	detail: `One line per thread that has checkpoints, a head, a saved transcript or a
writer lease. LATEST is the newest createdAt of the thread's checkpoints, in
UTC. WRITER is "live until TIME", "expired" or "none".

` + viaServer,
	run: runThreads,
})

// threadRow is one thread as `sbxdb threads --json` prints it.
type threadRow struct {
	ThreadID        string  `json:"threadId"`
	HeadID          *string `json:"headId"` // null: no head
	Checkpoints     int     `json:"checkpoints"`
	LatestCreatedAt *int64  `json:"latestCreatedAt"` // epoch ms; null: no checkpoints
	Writer          writer  `json:"writer"`
}

// writer is a thread's writer lease, without its owner token.
type writer struct {
	State     string `json:"state"`               // "live", "expired" or "none"
	Fence     uint64 `json:"fence,omitempty"`     // of the lease, when there is one
	ExpiresAt int64  `json:"expiresAt,omitempty"` // epoch ms, when there is a lease
}

func newWriter(s lease.State, now time.Time) writer {
	switch {
	case !s.Held:
		return writer{State: "none"}
	case s.Live(now.UnixMilli()):
		return writer{State: "live", Fence: s.Fence, ExpiresAt: s.ExpiresAt}
	}
	return writer{State: "expired", Fence: s.Fence, ExpiresAt: s.ExpiresAt}
}

func (w writer) String() string {
	if w.State == "live" {
		return "live until " + timeText(w.ExpiresAt)
	}
	return w.State
}

func runThreads(inv *invocation, _ []string) error {
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	ids, err := db.Threads(inv.ctx)
	if err != nil {
		return err
	}
	writers, err := db.Writers(inv.ctx)
	if err != nil {
		return err
	}
	// A thread with a lease but nothing stored yet is a writer at work.
	for id, s := range writers {
		if s.Held && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)

	now := time.Now()
	rows := []threadRow{}
	for _, id := range ids {
		sum, err := db.ThreadSummary(inv.ctx, id)
		if err != nil {
			return err
		}
		head, err := db.Head(inv.ctx, id)
		if err != nil {
			return err
		}
		rows = append(rows, threadRow{ThreadID: id, HeadID: nullable(head), Checkpoints: sum.Checkpoints,
			LatestCreatedAt: sum.LatestCreatedAt, Writer: newWriter(writers[id], now)})
	}
	if inv.json {
		return writeJSON(inv.out, rows)
	}
	tw := table(inv.out)
	fmt.Fprintln(tw, "THREAD\tHEAD\tCHECKPOINTS\tLATEST\tWRITER")
	for _, r := range rows {
		latest := "-"
		if r.LatestCreatedAt != nil {
			latest = timeText(*r.LatestCreatedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", cell(r.ThreadID), cell(deref(r.HeadID)), r.Checkpoints, latest, r.Writer)
	}
	return tw.Flush()
}

// deref returns *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
