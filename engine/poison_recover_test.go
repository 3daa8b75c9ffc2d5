package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/vfs/faultfs"
)

// A poisoned store recovers in place (engine.DB.Recover): the same handle
// takes writes again, everything acknowledged before the failure is there,
// and the store, closed and opened from scratch, checks clean.

// poisonByCommit fails the database commit of an append: the store is
// poisoned with EIO.
func (f *poisonFixture) poisonByCommit() {
	t := f.t
	t.Helper()
	f.ffs.Reset()
	f.ffs.FailNth(faultfs.Commit, 1, syscall.EIO)
	if _, err := f.db.Append(context.Background(), f.copyOf("cp2")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append whose commit failed: %v; want EIO", err)
	}
	if err := f.db.Poisoned(); !errors.Is(err, sbxdb.ErrPoisoned) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Poisoned after a failed commit: %v; want ErrPoisoned wrapping EIO", err)
	}
}

// requireWritable captures on the same handle and restores what it took;
// it returns the new checkpoint's id.
func (f *poisonFixture) requireWritable(content string) string {
	t := f.t
	t.Helper()
	write(t, f.ws, "a.txt", []byte(content), 0o644)
	res, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w, Dir: f.ws})
	if err != nil {
		t.Fatalf("capture on the recovered handle: %v", err)
	}
	restoreEqual(t, f.db, res.Checkpoint.ID, filepath.Join(f.dir, "recovered-"+res.Checkpoint.ID), snapshot(t, f.ws))
	return res.Checkpoint.ID
}

// requireHead checks, on a fresh Open, that the thread's head is want and
// the store checks clean.
func (f *poisonFixture) requireHeadAfterReopen(want string) {
	t := f.t
	t.Helper()
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := engine.Open(filepath.Join(f.dir, "store"), &engine.Options{FS: f.ffs})
	if err != nil {
		t.Fatal(err)
	}
	f.db = db
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "reopened after a recovery")
	if h, err := db.Head(context.Background(), "t"); err != nil || h != want {
		t.Fatalf("head after reopening: %q, %v; want %q", h, err, want)
	}
	if cp, err := db.Get(context.Background(), f.cp1.ID); err != nil || cp == nil {
		t.Fatalf("cp1 after reopening: %v, %v", cp, err)
	}
}

func TestPoisonRecoverInPlace(t *testing.T) {
	f := newPoisonFixture(t)
	notify := f.db.PoisonNotify()
	f.poisonByCommit()
	select {
	case <-notify:
	default:
		t.Fatal("PoisonNotify's channel is open after the store was poisoned")
	}
	f.requireWritesRefused(syscall.EIO)
	f.requireReadsWork()
	// The disk still fails: the probe's sync does, and the store stays
	// poisoned, with its first cause, its file open for reads.
	f.ffs.Reset()
	f.ffs.FailNth(faultfs.Sync, 1, syscall.ENOSPC)
	if err := f.db.Recover(context.Background()); !errors.Is(err, sbxdb.ErrPoisoned) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Recover while the disk fails: %v; want ErrPoisoned naming ENOSPC", err)
	}
	if err := f.db.Poisoned(); !errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Poisoned after a failed probe: %v; want the first cause, EIO", err)
	}
	f.readsWorkAgain()
	if _, err := os.Stat(filepath.Join(f.dir, "store", "sbx.probe")); !os.IsNotExist(err) {
		t.Fatalf("the probe's file after a failed probe: %v; want it removed", err)
	}
	if err := f.db.Recover(context.Background()); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if err := f.db.Poisoned(); err != nil {
		t.Fatalf("Poisoned after Recover: %v", err)
	}
	if n := f.db.Recoveries(); n != 1 {
		t.Errorf("Recoveries: %d; want 1", n)
	}
	select {
	case <-f.db.PoisonNotify():
		t.Fatal("PoisonNotify's channel is closed after a recovery")
	default:
	}
	if !f.db.VerifiedAtOpen() {
		t.Error("the recovery trusted the file: every page must be walked after a failed commit")
	}
	f.readsWorkAgain()
	checkNoErrors(t, f.db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "after a recovery")
	id := f.requireWritable("after the recovery\n")
	if err := f.db.SaveThread(context.Background(), "t", []json.RawMessage{[]byte(`"hi"`)}); err != nil {
		t.Fatalf("save-thread on the recovered handle: %v", err)
	}
	// Recover on a store that is not poisoned does nothing.
	if err := f.db.Recover(context.Background()); err != nil || f.db.Recoveries() != 1 {
		t.Fatalf("Recover of a healthy store: %v, %d recoveries", err, f.db.Recoveries())
	}
	f.requireHeadAfterReopen(id)
}

// A blob file's failed sync poisons too; RecoverLoop notices and recovers
// without being asked.
func TestPoisonRecoverLoopAfterPackSyncFailure(t *testing.T) {
	f := newPoisonFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	attempts := make(chan error, 100)
	go func() {
		defer close(loopDone)
		f.db.RecoverLoop(ctx, engine.RecoverOptions{MinDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond,
			Attempted: func(err error) {
				select {
				case attempts <- err:
				default:
				}
			}})
	}()
	defer func() { cancel(); <-loopDone }()
	for round := range 2 { // poisoned, recovered, poisoned again, recovered again
		write(t, f.ws, "a.txt", []byte("new pack "+string(rune('0'+round))+"\n"), 0o644)
		f.ffs.Reset()
		f.ffs.FailNth(faultfs.Sync, 1, syscall.EIO)
		_, err := f.db.Capture(context.Background(), sbxdb.CaptureInput{Writer: f.w, Dir: f.ws})
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("round %d: capture whose pack sync failed: %v; want EIO", round, err)
		}
		waitFor(t, "the store to recover", func() bool { return f.db.Poisoned() == nil && f.db.Recoveries() == int64(round+1) })
		f.readsWorkAgain()
		f.requireWritable("after recovery " + string(rune('0'+round)) + "\n")
	}
	if err := <-attempts; err != nil {
		t.Errorf("first attempt: %v; want a recovery", err)
	}
	id := f.requireWritable("last\n")
	cancel()
	<-loopDone
	f.requireHeadAfterReopen(id)
}

// A recovery that fails after closing the file leaves the store poisoned,
// every transaction failing with ErrPoisoned rather than reading a closed
// file; the next one recovers, and nothing acknowledged is lost.
func TestPoisonRecoverFailureStaysPoisoned(t *testing.T) {
	f := newPoisonFixture(t)
	f.poisonByCommit()
	remove := f.db.OnPoint("recover-reopen", func() error { return syscall.EMFILE })
	err := f.db.Recover(context.Background())
	if !errors.Is(err, sbxdb.ErrPoisoned) || !errors.Is(err, syscall.EMFILE) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("a failed Recover: %v; want ErrPoisoned naming EIO and EMFILE", err)
	}
	if err := f.db.Poisoned(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Poisoned after a failed recovery: %v; want the first cause, EIO", err)
	}
	if _, err := f.db.Get(context.Background(), f.cp1.ID); !errors.Is(err, sbxdb.ErrPoisoned) {
		t.Fatalf("a read while the file is closed: %v; want ErrPoisoned", err)
	}
	if err := f.db.SaveThread(context.Background(), "t", []json.RawMessage{[]byte(`1`)}); !errors.Is(err, sbxdb.ErrPoisoned) {
		t.Fatalf("a write while the file is closed: %v; want ErrPoisoned", err)
	}
	remove()
	if err := f.db.Recover(context.Background()); err != nil {
		t.Fatalf("the second Recover: %v", err)
	}
	f.readsWorkAgain()
	id := f.requireWritable("after the second attempt\n")
	f.requireHeadAfterReopen(id)
}

// A Close after a failed recovery releases the store; it opens again.
func TestPoisonCloseAfterFailedRecover(t *testing.T) {
	f := newPoisonFixture(t)
	f.poisonByCommit()
	f.db.OnPoint("recover-reopen", func() error { return syscall.EMFILE })
	if err := f.db.Recover(context.Background()); err == nil {
		t.Fatal("Recover succeeded despite its failing hook")
	}
	if err := f.db.Close(); err != nil {
		t.Fatalf("Close after a failed recovery: %v", err)
	}
	if err := f.db.Recover(context.Background()); !errors.Is(err, sbxdb.ErrClosed) {
		t.Fatalf("Recover after Close: %v; want ErrClosed", err)
	}
	db, err := engine.Open(filepath.Join(f.dir, "store"), &engine.Options{FS: f.ffs, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Open after closing a handle whose recovery failed: %v", err)
	}
	f.db = db
	checkNoErrors(t, db, sbxdb.CheckStoreOptions{VerifyBlobs: true}, "reopened after a failed recovery")
}

// readsWorkAgain is requireReadsWork once more, into a fresh directory.
func (f *poisonFixture) readsWorkAgain() {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.dir, "poisoned-restore")); err != nil {
		f.t.Fatal(err)
	}
	f.requireReadsWork()
}

// waitFor polls cond until it holds, failing the test after a deadline
// generous enough for a loaded machine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
