package engine_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

// needProc skips a test that needs proc.Check to tell a gone process from a
// running one, which only /proc makes possible.
func needProc(t *testing.T) proc.Identity {
	t.Helper()
	me := proc.Self()
	if me.Start == 0 || me.Boot == "" {
		t.Skipf("no /proc on this system (Self() = %+v): no holder can be proved gone", me)
	}
	return me
}

// goneHolder is a process of this host and boot that proc.Check proves
// gone: this process's pid with another start time, as after pid reuse.
func goneHolder(me proc.Identity) proc.Identity {
	gone := me
	gone.Start++
	return gone
}

// appendTo appends checkpoint id on the thread's head.
func appendTo(ctx context.Context, db *engine.DB, w lease.Writer, id, parent string) error {
	_, err := db.Append(ctx, chain.AppendInput{Checkpoint: checkpoint(id, w.ThreadID, parent), ExpectedHeadID: parent, Writer: w})
	return err
}

// A lease left by a process of this host that no longer runs is taken over
// by AcquireWriterWith(TakeOverDead) with the next fence, and its holder is
// refused from then on; plain AcquireWriter still gets WRITER_CONFLICT.
func TestTakeOverDeadHoldersLease(t *testing.T) {
	me := needProc(t)
	ctx := t.Context()
	db := open(t, t.TempDir())
	dead := goneHolder(me)
	if proc.Check(dead) != proc.Gone {
		t.Fatalf("forged holder %+v is not gone", dead)
	}
	old, err := db.AcquireWriterAs(ctx, "t", dead)
	if err != nil {
		t.Fatal(err)
	}
	if err := appendTo(ctx, db, old.Writer, "c1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AcquireWriter(ctx, "t"); !errors.Is(err, chain.ErrWriterConflict) {
		t.Fatalf("plain AcquireWriter over a dead holder's live lease: %v, want WRITER_CONFLICT", err)
	}
	if l, err := db.AcquireWriterWith(ctx, "t", lease.AcquireOptions{}); !errors.Is(err, chain.ErrWriterConflict) {
		t.Fatalf("AcquireWriterWith without TakeOverDead: %v, %v; want WRITER_CONFLICT", l, err)
	}

	l, err := db.AcquireWriterWith(ctx, "t", lease.AcquireOptions{TakeOverDead: true})
	if err != nil {
		t.Fatalf("taking over a dead holder's lease: %v", err)
	}
	if l.Fence != old.Fence+1 {
		t.Errorf("fence after the takeover: %d, want %d", l.Fence, old.Fence+1)
	}
	want := lease.State{LastFence: old.Fence, Held: true, Fence: old.Fence, ExpiresAt: old.ExpiresAt().UnixMilli(), Holder: dead}
	if l.TookOver == nil || *l.TookOver != want {
		t.Errorf("TookOver = %+v, want %+v", l.TookOver, want)
	}
	ws, err := db.Writers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s := ws["t"]; !s.Held || s.Fence != l.Fence || s.Holder != me {
		t.Errorf("stored state after the takeover: %+v, want fence %d held by %+v", s, l.Fence, me)
	}

	// The dead holder, were it still running, is refused.
	if err := appendTo(ctx, db, old.Writer, "c2", "c1"); !errors.Is(err, chain.ErrWriterLost) {
		t.Errorf("old writer's Append after the takeover: %v, want WRITER_LOST", err)
	}
	if _, err := old.Renew(ctx); !errors.Is(err, chain.ErrWriterLost) {
		t.Errorf("old writer's Renew after the takeover: %v, want WRITER_LOST", err)
	}
	if err := appendTo(ctx, db, l.Writer, "c2", "c1"); err != nil {
		t.Errorf("new writer's Append: %v", err)
	}
	// The new holder is this process, which runs: never taken over.
	if _, err := db.AcquireWriterWith(ctx, "t", lease.AcquireOptions{TakeOverDead: true}); !errors.Is(err, chain.ErrWriterConflict) {
		t.Errorf("taking over a running holder's lease: %v, want WRITER_CONFLICT", err)
	}
}

// Only a holder proved gone is taken over: one on another host, one whose
// identity was not recorded (a lease from before holders were), and one
// that runs keep their lease, and the failed attempt changes nothing.
func TestTakeOverSparesHoldersNotProvedGone(t *testing.T) {
	me := needProc(t)
	ctx := t.Context()
	db := open(t, t.TempDir())
	holders := map[string]proc.Identity{
		"remote":  {Host: me.Host + "-elsewhere", Boot: "another-boot", PID: 4242, Start: 1},
		"unknown": {},
		"running": me,
	}
	for name, holder := range holders {
		l, err := db.AcquireWriterAs(ctx, name, holder)
		if err != nil {
			t.Fatal(err)
		}
		before, err := db.Writers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.AcquireWriterWith(ctx, name, lease.AcquireOptions{TakeOverDead: true}); !errors.Is(err, chain.ErrWriterConflict) {
			t.Errorf("%s holder: takeover gave %v, want WRITER_CONFLICT", name, err)
		}
		after, err := db.Writers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after[name] != before[name] || after[name].Holder != holder {
			t.Errorf("%s holder: state %+v after the refused takeover, was %+v", name, after[name], before[name])
		}
		if err := appendTo(ctx, db, l.Writer, name+"-1", ""); err != nil {
			t.Errorf("%s holder: its Append after the refused takeover: %v", name, err)
		}
	}
}

// Concurrent takeovers of one dead holder's lease: the decision is made in
// the transaction that takes the lease, so exactly one wins.
func TestTakeOverDeadHolderOnce(t *testing.T) {
	me := needProc(t)
	ctx := t.Context()
	db := open(t, t.TempDir())
	if _, err := db.AcquireWriterAs(ctx, "t", goneHolder(me)); err != nil {
		t.Fatal(err)
	}
	var won, conflicts atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := db.AcquireWriterWith(ctx, "t", lease.AcquireOptions{TakeOverDead: true})
			switch {
			case err == nil:
				won.Add(1)
			case errors.Is(err, chain.ErrWriterConflict):
				conflicts.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || conflicts.Load() != 7 {
		t.Errorf("%d takeovers and %d conflicts, want 1 and 7", won.Load(), conflicts.Load())
	}
}

// Unlock removes any lease, a live one of a holder on another host
// included, and advances the fence: the old holder is refused, the next
// writer gets a higher fence.
func TestUnlockBreaksAnyLease(t *testing.T) {
	ctx := t.Context()
	db := open(t, t.TempDir())
	remote := proc.Identity{Host: "host-elsewhere", Boot: "b", PID: 4242, Start: 7}
	old, err := db.AcquireWriterAs(ctx, "t", remote)
	if err != nil {
		t.Fatal(err)
	}
	if err := appendTo(ctx, db, old.Writer, "c1", ""); err != nil {
		t.Fatal(err)
	}
	removed, err := db.Unlock(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	want := lease.State{LastFence: old.Fence, Held: true, Fence: old.Fence, ExpiresAt: old.ExpiresAt().UnixMilli(), Holder: remote}
	if removed != want {
		t.Errorf("Unlock removed %+v, want %+v", removed, want)
	}
	ws, err := db.Writers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s := ws["t"]; s != (lease.State{LastFence: old.Fence + 1}) {
		t.Errorf("state after Unlock: %+v, want no lease and last fence %d", s, old.Fence+1)
	}
	if err := appendTo(ctx, db, old.Writer, "c2", "c1"); !errors.Is(err, chain.ErrWriterLost) {
		t.Errorf("old writer's Append after Unlock: %v, want WRITER_LOST", err)
	}
	if _, err := old.Renew(ctx); !errors.Is(err, chain.ErrWriterLost) {
		t.Errorf("old writer's Renew after Unlock: %v, want WRITER_LOST", err)
	}
	l, err := db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatalf("AcquireWriter after Unlock: %v", err)
	}
	if l.Fence <= old.Fence+1 {
		t.Errorf("fence after Unlock: %d, want above %d", l.Fence, old.Fence+1)
	}
	if err := appendTo(ctx, db, l.Writer, "c2", "c1"); err != nil {
		t.Errorf("new writer's Append: %v", err)
	}

	// Nothing held: nothing removed, nothing written.
	if s, err := db.Unlock(ctx, "never"); err != nil || s.Held {
		t.Errorf("Unlock of a thread never leased: %+v, %v", s, err)
	}
	if ws, _ := db.Writers(ctx); len(ws) != 1 {
		t.Errorf("Unlock of a thread never leased stored a record: %+v", ws)
	}
	if _, err := db.Unlock(ctx, ""); !errors.Is(err, chain.ErrInvalidID) {
		t.Errorf("Unlock(\"\"): %v, want INVALID_ID", err)
	}
}

// The WRITER_CONFLICT message names the holder and the expiry as RFC 3339,
// and no time as epoch milliseconds; so does WRITER_LOST of an expiry.
func TestWriterErrorsNameHolderAndTime(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(now.UnixMilli())
	db, err := engine.Open(t.TempDir(), &engine.Options{NoSync: true, Now: func() time.Time { return time.UnixMilli(clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	epochMs := regexp.MustCompile(`\d{13}`)
	holder := proc.Identity{Host: "host-a", PID: 4242, Start: 1}
	l, err := db.AcquireWriterAs(ctx, "t", holder)
	if err != nil {
		t.Fatal(err)
	}
	expiry := l.ExpiresAt().UTC().Format("2006-01-02T15:04:05.000Z07:00")
	_, err = db.AcquireWriter(ctx, "t")
	if !errors.Is(err, chain.ErrWriterConflict) || chain.Code(err) != chain.CodeWriterConflict {
		t.Fatalf("second AcquireWriter: %v, want WRITER_CONFLICT", err)
	}
	for _, want := range []string{`thread "t" has a live writer (fence 1)`, "held by pid 4242 on host-a", "until " + expiry} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("conflict message %q lacks %q", err, want)
		}
	}
	if m := epochMs.FindString(err.Error()); m != "" {
		t.Errorf("conflict message %q holds epoch milliseconds %s", err, m)
	}

	if _, err := db.AcquireWriterAs(ctx, "old", proc.Identity{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AcquireWriter(ctx, "old"); err == nil || !strings.Contains(err.Error(), "held by an unknown holder") {
		t.Errorf("conflict with an unrecorded holder: %v, want it to say \"held by an unknown holder\"", err)
	}

	clock.Add(time.Hour.Milliseconds())
	err = appendTo(ctx, db, l.Writer, "c1", "")
	if !errors.Is(err, chain.ErrWriterLost) || !strings.Contains(err.Error(), "expired at "+expiry) {
		t.Errorf("expired writer's Append: %v, want WRITER_LOST naming %s", err, expiry)
	}
	if m := epochMs.FindString(err.Error()); m != "" {
		t.Errorf("expiry message %q holds epoch milliseconds %s", err, m)
	}
}

// AcquireOptions.Holder names the holder a lease records: nil this
// process, a zero Identity none, any other the process given (a server's
// client). A recorded gone holder's lease is taken over; an unrecorded one
// never is.
func TestAcquireOptionsHolder(t *testing.T) {
	me := needProc(t)
	ctx := t.Context()
	db := open(t, t.TempDir())
	dead, none := goneHolder(me), proc.Identity{}
	for thread, opts := range map[string]lease.AcquireOptions{
		"self": {},
		"none": {Holder: &none},
		"dead": {Holder: &dead},
	} {
		if _, err := db.AcquireWriterWith(ctx, thread, opts); err != nil {
			t.Fatalf("AcquireWriterWith(%q, %+v): %v", thread, opts, err)
		}
	}
	ws, err := db.Writers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for thread, want := range map[string]proc.Identity{"self": me, "none": none, "dead": dead} {
		if got := ws[thread].Holder; got != want {
			t.Errorf("holder of %q = %+v, want %+v", thread, got, want)
		}
	}
	if _, err := db.AcquireWriterWith(ctx, "none", lease.AcquireOptions{TakeOverDead: true}); !errors.Is(err, chain.ErrWriterConflict) {
		t.Errorf("taking over an unrecorded holder's lease: %v, want WRITER_CONFLICT", err)
	}
	l, err := db.AcquireWriterWith(ctx, "dead", lease.AcquireOptions{TakeOverDead: true, Holder: &none})
	if err != nil {
		t.Fatalf("taking over a gone holder's lease: %v", err)
	}
	if l.TookOver == nil || l.TookOver.Holder != dead {
		t.Errorf("TookOver = %+v, want the lease of %+v", l.TookOver, dead)
	}
	if ws, _ := db.Writers(ctx); ws["dead"].Holder != none {
		t.Errorf("holder after the takeover = %+v, want none recorded", ws["dead"].Holder)
	}
}
