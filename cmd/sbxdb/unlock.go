package main

import (
	"fmt"
	"time"

	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

var unlockCmd = register(&command{
	name:    "unlock",
	group:   groupMaintain,
	args:    "THREAD",
	nargs:   1,
	writes:  true,
	summary: "Remove a thread's writer lease, whoever holds it, so a new writer can start",
	detail: `Removes the thread's writer lease, live or expired, and advances its fence
counter: the old holder, if it still runs, is refused on its next write or
renewal (SANDBOX_SNAPSHOT_WRITER_LOST), and the next writer gets a higher
fence. Use it when a writer on another host is known to be gone. A capture
takes over by itself the lease of a writer on this host that no longer runs.
Prints the lease removed (fence, holder, expiry) or that there was none; the
exit status is 0 either way. With --json: {threadId, removed, fence, holder:
{host, boot, ns, pid, start} or null, expiresAt}.

` + viaServer,
	run: runUnlock,
})

// unlockJSON is what `sbxdb unlock --json` prints.
type unlockJSON struct {
	ThreadID  string         `json:"threadId"`
	Removed   bool           `json:"removed"`             // a lease was removed
	Fence     uint64         `json:"fence,omitempty"`     // the removed lease's fence
	Holder    *proc.Identity `json:"holder"`              // null: none removed, or not recorded
	ExpiresAt int64          `json:"expiresAt,omitempty"` // epoch ms, of the removed lease
}

func runUnlock(inv *invocation, args []string) error {
	thread := args[0]
	db, err := inv.open()
	if err != nil {
		return err
	}
	defer db.Close()
	removed, err := db.Unlock(inv.ctx, thread)
	if err != nil {
		return err
	}
	if inv.json {
		r := unlockJSON{ThreadID: thread, Removed: removed.Held}
		if removed.Held {
			r.Fence, r.ExpiresAt = removed.Fence, removed.ExpiresAt
			if !removed.Holder.IsZero() {
				r.Holder = &removed.Holder
			}
		}
		return writeJSON(inv.out, r)
	}
	if !removed.Held {
		_, err = fmt.Fprintf(inv.out, "thread %s has no writer lease: nothing to unlock\n", cell(thread))
		return err
	}
	state := "live until"
	if !removed.Live(time.Now().UnixMilli()) {
		state = "expired at"
	}
	_, err = fmt.Fprintf(inv.out, "removed the writer lease of thread %s: fence %d, held by %s, %s %s\n",
		cell(thread), removed.Fence, lease.HolderText(removed.Holder), state, lease.TimeText(removed.ExpiresAt))
	return err
}
