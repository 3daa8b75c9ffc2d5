package main

import (
	"strings"
	"testing"
)

// delete-thread without --yes, or refused, changes nothing.
func TestDeleteThreadRefusedChangesNothing(t *testing.T) {
	store, _ := captured(t, "cp1")
	before := ok(t, "threads", "--db", store, "--json")
	log := ok(t, "log", "main", "--db", store, "--json")
	code, out, errOut := cli(t, "delete-thread", "main", "--db", store)
	if want := "sbxdb delete-thread: would delete 1 checkpoint of thread main, its head, and its transcript and artifact records if it has any; add --yes to delete them\n"; code != exitUsage || out != "" ||
		!strings.HasPrefix(errOut, want) {
		t.Errorf("without --yes: exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, want)
	}
	if msg := fail(t, "delete-thread", "", "--yes", "--db", store); msg != "sbxdb: SANDBOX_SNAPSHOT_INVALID_ID: threadId is empty\n" {
		t.Errorf("an empty thread id: %q", msg)
	}
	if after := ok(t, "threads", "--db", store, "--json"); after != before {
		t.Errorf("threads changed:\n%s\n%s", before, after)
	}
	if after := ok(t, "log", "main", "--db", store, "--json"); after != log {
		t.Errorf("log changed:\n%s\n%s", log, after)
	}
}
