package crashtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"golang.org/x/sys/unix"
)

// envAppender, set in a child, makes it append envAppends checkpoints to
// the store, each in an Open–Append–Close of its own, printing each id on
// stdout once Append returned: what it acknowledged.
const (
	envAppender = "SBXDB_CRASH_APPENDER"
	envAppends  = "SBXDB_CRASH_APPENDS"
)

// raceOpenTimeout is how long the processes of these tests wait for each
// other: long enough that no open gives up while another process holds the
// store.
const raceOpenTimeout = 30 * time.Second

func appender(dir string) int {
	n, _ := strconv.Atoi(os.Getenv(envAppends))
	ctx := context.Background()
	thread := "appender"
	for i := range n {
		err := func() error {
			db, err := engine.Open(dir, &engine.Options{LockTimeout: raceOpenTimeout})
			if err != nil {
				return err
			}
			defer db.Close()
			l, err := db.AcquireWriter(ctx, thread)
			if err != nil {
				return err
			}
			defer l.Release(ctx)
			head, err := db.Head(ctx, thread)
			if err != nil {
				return err
			}
			id := fmt.Sprintf("a%04d", i)
			cp := &chain.Checkpoint{ID: id, ThreadID: thread, ParentID: head, CreatedAt: int64(i), Reason: chain.ReasonAutomatic}
			if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, ExpectedHeadID: head, Writer: l.Writer}); err != nil {
				return err
			}
			fmt.Println(id) // acknowledged
			return nil
		}()
		// As the compaction loop does: room for the other to take the lock.
		time.Sleep(2 * time.Millisecond)
		if err != nil {
			fmt.Fprintln(os.Stderr, "appender:", err)
			return 2
		}
	}
	return 0
}

// TestCompactBesideAnotherProcessKeepsItsWrites runs Compact in a loop
// while another process opens the store, appends and closes, over and
// over. Compact replaces sbx.db by renaming a new file over it; a process
// that had opened the old file while waiting for the lock must not commit
// into it once Compact lets go. Every id the other process acknowledged is
// in the store afterwards.
func TestCompactBesideAnotherProcessKeepsItsWrites(t *testing.T) {
	appends := testkit.ScaleShort(t, 60, 100, 150)
	dir := filepath.Join(t.TempDir(), "store")
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envAppender+"="+dir, envAppends+"="+strconv.Itoa(appends))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	compactions := make(chan int)
	go func() {
		n := 0
		for !done.Load() {
			if _, _, err := engine.Compact(context.Background(), dir, &engine.Options{LockTimeout: raceOpenTimeout}); err != nil {
				t.Errorf("compact: %v", err)
				break
			}
			n++
			// A breath between compactions: a waiting open polls for the
			// lock, and a loop that retakes it at once could starve it.
			time.Sleep(2 * time.Millisecond)
		}
		compactions <- n
	}()
	var acked []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		acked = append(acked, sc.Text())
	}
	werr := cmd.Wait()
	done.Store(true)
	n := <-compactions
	if werr != nil {
		t.Fatalf("appender: %v: %s", werr, stderr.String())
	}
	if len(acked) != appends {
		t.Fatalf("appender acknowledged %d appends, want %d", len(acked), appends)
	}

	db, err = engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var lost []string
	for _, id := range acked {
		cp, err := db.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if cp == nil {
			lost = append(lost, id)
		}
	}
	t.Logf("%d appends in as many opens beside %d compactions", appends, n)
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged appends are gone after %d compactions: %v", len(lost), appends, n, lost)
	}
}

// envCompactLimited, set in a child, makes it compact the store under a
// file-size limit too small for the new file: a full disk, as far as the
// compaction can tell.
const envCompactLimited = "SBXDB_CRASH_COMPACT_LIMITED"

// compactLimitedBytes is the child's file-size limit: above the pages an
// open writes in place (meta pages, the small files beside the database),
// below the first pages of a new database file.
const compactLimitedBytes = 8 << 10

func compactLimited(dir string) int {
	lim := unix.Rlimit{Cur: compactLimitedBytes, Max: compactLimitedBytes}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		return 2
	}
	_, _, err := engine.Compact(context.Background(), dir, nil)
	if err == nil {
		fmt.Fprintln(os.Stderr, "compact succeeded past the file-size limit")
		return 3
	}
	fmt.Println(err)
	return 0
}

// TestFailedCompactLeavesNoTempFile makes a compaction fail for want of
// space and checks that it removed its new file and left the store as it
// was.
func TestFailedCompactLeavesNoTempFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	db, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	cp := &chain.Checkpoint{ID: "kept", ThreadID: "t", CreatedAt: 1, Reason: chain.ReasonAutomatic}
	if _, err := db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	db.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envCompactLimited+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	t.Logf("the compaction failed as it should: %s", strings.TrimSpace(string(out)))
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".compact") {
			t.Errorf("the failed compaction left %s behind", e.Name())
		}
	}
	db, err = engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, err := db.Get(ctx, "kept"); err != nil || got == nil {
		t.Fatalf("after the failed compaction Get(kept) = %v, %v", got, err)
	}
}
