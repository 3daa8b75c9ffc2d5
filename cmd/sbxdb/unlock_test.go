package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/meta"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
	bolt "go.etcd.io/bbolt"
)

// holdLeaseEnv, set in a child run of this test binary, names a store whose
// thread "main" the child leases; it then waits until its stdin closes.
const holdLeaseEnv = "SBXDB_TEST_HOLD_LEASE"

// A capture killed with SIGKILL leaves its lease live for the whole lease
// duration; the next capture of the thread takes it over at once, since
// its holder is a process of this host that no longer runs, and says so.
func TestCaptureTakesOverAKilledWritersLease(t *testing.T) {
	if store := os.Getenv(holdLeaseEnv); store != "" {
		holdLease(store)
		return
	}
	if me := proc.Self(); me.Start == 0 || me.Boot == "" {
		t.Skipf("no /proc on this system (Self() = %+v): a killed holder cannot be proved gone", me)
	}
	store, ws := captured(t, "cp1")
	child := exec.Command(os.Args[0], "-test.run=^TestCaptureTakesOverAKilledWritersLease$", "-test.count=1")
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
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "holding fence 2\n" {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child said %q, %v; want \"holding fence 2\"", line, err)
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()

	code, out, errOut := cli(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp2")
	if code != 0 {
		t.Fatalf("capture after the holder was killed: exit %d, %q", code, errOut)
	}
	want := fmt.Sprintf("sbxdb: took over the writer lease of thread main from pid %d on %s, which is gone (fence 2 → 3)\n",
		child.Process.Pid, proc.Self().Host)
	if errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	if !strings.HasPrefix(out, "captured cp2 on thread main: ") {
		t.Errorf("stdout %q", out)
	}
	if head := rows(ok(t, "log", "main", "--db", store))[1][0]; head != "cp2" {
		t.Errorf("head after the capture: %s, want cp2", head)
	}
}

// holdLease is the child of TestCaptureTakesOverAKilledWritersLease.
func holdLease(store string) {
	db, err := engine.Open(store, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := db.AcquireWriter(context.Background(), "main")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("holding fence %d\n", l.Fence)
	io.Copy(io.Discard, os.Stdin) // until killed, or the parent is gone
}

// forgeLease stores a lease of thread taken at now for an hour and held by
// holder, as that process would have left it, and returns its writer.
func forgeLease(t *testing.T, store, thread string, holder proc.Identity, now time.Time) lease.Writer {
	t.Helper()
	db, err := bolt.Open(filepath.Join(store, engine.DBFile), 0o644, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var g meta.Grant
	err = db.Update(func(tx *bolt.Tx) (err error) {
		g, err = meta.AcquireLease(kv.Bolt(tx), thread, holder, now.UnixMilli(), time.Hour.Milliseconds(), lease.AcquireOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return g.Writer
}

// remoteHolder is a process of another host: never provably gone.
var remoteHolder = proc.Identity{Host: "host-elsewhere", Boot: "b", PID: 4242, Start: 7}

// A live lease of a writer on another host is a conflict that names the
// holder and the expiry as RFC 3339 and points at unlock.
func TestCaptureConflictNamesHolder(t *testing.T) {
	store, ws := captured(t, "cp1")
	forgeLease(t, store, "main", remoteHolder, time.Now())
	msg := failWith(t, exitBusy, "capture", ws, "--db", store, "--thread", "main")
	wantMatch(t, msg, `^sbxdb: SANDBOX_SNAPSHOT_WRITER_CONFLICT: thread "main" has a live writer \(fence 2\) held by pid 4242 on host-elsewhere `+
		"until \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z; if that writer is gone, `sbxdb unlock main` frees the thread\n$")
	if m := regexp.MustCompile(`\d{13}`).FindString(msg); m != "" {
		t.Errorf("conflict message %q holds epoch milliseconds %s", msg, m)
	}
}

// unlock removes a live lease of a writer on another host: the old writer
// is refused, and the next capture gets a higher fence.
func TestUnlockCommand(t *testing.T) {
	store, ws := captured(t, "cp1")
	old := forgeLease(t, store, "main", remoteHolder, time.Now())
	out := ok(t, "unlock", "main", "--db", store)
	wantMatch(t, out, `^removed the writer lease of thread main: fence 2, held by pid 4242 on host-elsewhere, `+
		`live until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\n$`)
	if out := ok(t, "unlock", "main", "--db", store); out != "thread main has no writer lease: nothing to unlock\n" {
		t.Errorf("second unlock: %q", out)
	}

	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	head, err := db.Head(t.Context(), "main")
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Append(t.Context(), chain.AppendInput{
		Checkpoint:     &chain.Checkpoint{ID: "late", ThreadID: "main", ParentID: head, CreatedAt: time.Now().UnixMilli(), Reason: chain.ReasonAutomatic},
		ExpectedHeadID: head, Writer: old,
	})
	if !errors.Is(err, chain.ErrWriterLost) {
		t.Errorf("the unlocked writer's Append: %v, want WRITER_LOST", err)
	}
	l, err := db.AcquireWriter(t.Context(), "main")
	if err != nil {
		t.Fatalf("AcquireWriter after unlock: %v", err)
	}
	if l.Fence <= old.Fence {
		t.Errorf("fence after unlock: %d, want above %d", l.Fence, old.Fence)
	}
	l.Release(t.Context())
	db.Close()
	ok(t, "capture", ws, "--db", store, "--thread", "main", "--id", "cp2")

	// JSON, an expired lease, and the failures.
	forgeLease(t, store, "other", remoteHolder, time.Now())
	r := decode[unlockJSON](t, ok(t, "unlock", "other", "--db", store, "--json"))
	if !r.Removed || r.ThreadID != "other" || r.Fence != 1 || r.Holder == nil || *r.Holder != remoteHolder || r.ExpiresAt <= time.Now().UnixMilli() {
		t.Errorf("unlock --json: %+v", r)
	}
	if r := decode[unlockJSON](t, ok(t, "unlock", "other", "--db", store, "--json")); r != (unlockJSON{ThreadID: "other"}) {
		t.Errorf("unlock --json of no lease: %+v", r)
	}
	forgeLease(t, store, "other", proc.Identity{}, time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC))
	if out := ok(t, "unlock", "other", "--db", store); out != "removed the writer lease of thread other: fence 3, held by an unknown holder, expired at 2026-01-02T04:04:05.006Z\n" {
		t.Errorf("unlock of an expired lease: %q", out)
	}
	if msg := fail(t, "unlock", "a\x00b", "--db", store); !strings.Contains(msg, chain.CodeInvalidID) {
		t.Errorf("unlock of an invalid thread id: %q", msg)
	}
	none := filepath.Join(t.TempDir(), "typo")
	if msg := failWith(t, exitNoStore, "unlock", "main", "--db", none); !strings.Contains(msg, "no sbxdb store at "+none) {
		t.Errorf("unlock without a store: %q", msg)
	}
}
