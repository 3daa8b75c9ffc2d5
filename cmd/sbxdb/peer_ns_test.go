//go:build linux

package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/internal/proc"
)

// A store lock and a writer lease held by a process in another pid
// namespace of this host are named as such, not by a pid that means
// another process here: the lock while the holder runs, the lease it left
// behind once it exited (which is never taken over as dead: from here its
// pid cannot be looked up).
func TestHolderInAnotherPidNamespace(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("unshare as root is needed for a pid namespace (uid %d, %v)", os.Geteuid(), err)
		}
		t.Skipf("a pid namespace needs unshare, run as root (uid %d, %v)", os.Geteuid(), err)
	}
	localOnly(t) // the lock of a store this test's child holds; a server holding it is no busy store
	store, ws := captured(t, "cp1")
	child := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
		os.Args[0], "-test.run=^TestCaptureTakesOverAKilledWritersLease$", "-test.count=1")
	child.Env = append(os.Environ(), holdLeaseEnv+"="+store)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(line, "holding fence ") {
		t.Fatalf("the holder in a new pid namespace said %q, %v", line, err)
	}
	other := "a process in another pid namespace on " + proc.Self().Host + " (pid 1 there)"

	defer func(d time.Duration) { lockTimeout = d }(lockTimeout)
	lockTimeout = 100 * time.Millisecond
	code, out, errOut := runArgs([]string{"threads", "--db", store})
	if want := "sbxdb: store " + store + " is busy: held by " + other + ", if it still runs\n"; code != exitBusy || out != "" || errOut != want {
		t.Errorf("store locked from another pid namespace: exit %d, stdout %q, stderr %q; want exit 11 and %q", code, out, errOut, want)
	}

	// Closing its stdin ends the holder without releasing its lease.
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatalf("the holder: %v", err)
	}
	code, out, errOut = runArgs([]string{"capture", ws, "--db", store, "--thread", "main"})
	if want := `sbxdb: SANDBOX_SNAPSHOT_WRITER_CONFLICT: thread "main" has a live writer (fence 2) held by ` + other + " until "; code != exitBusy || out != "" || !strings.HasPrefix(errOut, want) {
		t.Errorf("lease left in another pid namespace: exit %d, stdout %q, stderr %q; want exit 11 and %q…", code, out, errOut, want)
	}
}
