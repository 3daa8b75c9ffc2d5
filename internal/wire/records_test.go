package wire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

// TestStateRoundTrip: a lease state the server writes (FromState) is the
// one the client reads back (LeaseState), but for the owner token, which
// never travels; a recorded holder comes back whole, none as none.
func TestStateRoundTrip(t *testing.T) {
	holder := proc.Identity{Host: "h", Boot: "b", NS: "pid:[1]", PID: 42, Start: 7}
	for _, s := range []lease.State{
		{LastFence: 3, Held: true, Fence: 3, ExpiresAt: 1700000000000, OwnerToken: "secret", Holder: holder},
		{LastFence: 9},
	} {
		b, err := json.Marshal(FromState(s))
		if err != nil {
			t.Fatal(err)
		}
		var w State
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want := s
		want.OwnerToken = ""
		if d := cmp.Diff(want, w.LeaseState()); d != "" {
			t.Errorf("%s (-want +got):\n%s", b, d)
		}
	}
}

// TestLeaseRoundTrip: a granted lease the server writes (FromLease) is a
// handle on the client with the same writer, expiry, cadence and the
// state it took over.
func TestLeaseRoundTrip(t *testing.T) {
	took := lease.State{LastFence: 4, Held: true, Fence: 4, ExpiresAt: 1700000000000}
	l := lease.New(lease.Writer{ThreadID: "t\xff", OwnerToken: "tok", Fence: 5}, time.UnixMilli(1700000005000), 2*time.Second, nil)
	l.TookOver = &took
	b, err := json.Marshal(FromLease(l))
	if err != nil {
		t.Fatal(err)
	}
	var w Lease
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	got := w.Handle(nil)
	if got.Writer != l.Writer || !got.ExpiresAt().Equal(l.ExpiresAt()) || got.RenewAfter != l.RenewAfter {
		t.Errorf("%s: got %+v, expires %v; want %+v, expires %v", b, got.Writer, got.ExpiresAt(), l.Writer, l.ExpiresAt())
	}
	if got.TookOver == nil || *got.TookOver != took {
		t.Errorf("%s: took over %+v, want %+v", b, got.TookOver, took)
	}
}
