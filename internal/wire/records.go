package wire

import (
	"errors"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

// Instance is an engine.InstanceRecord on the wire (SPEC §4), every string
// a Text: the instance store takes any string, so a record must cross
// unchanged whatever it holds. A required member that is absent or null
// decodes to nil, which Record refuses; an optional one (latestSnapshotId,
// latestRunId) is "" then, as in the record.
type Instance struct {
	Key               *Text  `json:"key"`
	Provider          *Text  `json:"provider"`
	ProviderSandboxID *Text  `json:"providerSandboxId"`
	LatestSnapshotID  *Text  `json:"latestSnapshotId,omitempty"`
	ThreadID          *Text  `json:"threadId"`
	LatestRunID       *Text  `json:"latestRunId,omitempty"`
	UpdatedAt         *int64 `json:"updatedAt"`
}

// FromInstance is rec's wire form; an empty optional field is absent.
func FromInstance(rec engine.InstanceRecord) Instance {
	text := func(s string) *Text { t := Text(s); return &t }
	optional := func(s string) *Text {
		if s == "" {
			return nil
		}
		return text(s)
	}
	return Instance{
		Key: text(rec.Key), Provider: text(rec.Provider), ProviderSandboxID: text(rec.ProviderSandboxID),
		LatestSnapshotID: optional(rec.LatestSnapshotID), ThreadID: text(rec.ThreadID),
		LatestRunID: optional(rec.LatestRunID), UpdatedAt: &rec.UpdatedAt,
	}
}

// Record returns the record w names, or an error naming the first
// required member it lacks.
func (w Instance) Record() (engine.InstanceRecord, error) {
	for _, m := range []struct {
		name    string
		present bool
	}{
		{"key", w.Key != nil}, {"provider", w.Provider != nil}, {"providerSandboxId", w.ProviderSandboxID != nil},
		{"threadId", w.ThreadID != nil}, {"updatedAt", w.UpdatedAt != nil},
	} {
		if !m.present {
			return engine.InstanceRecord{}, errors.New("instance record member " + m.name + " is missing")
		}
	}
	str := func(t *Text) string {
		if t == nil {
			return ""
		}
		return string(*t)
	}
	return engine.InstanceRecord{
		Key: str(w.Key), Provider: str(w.Provider), ProviderSandboxID: str(w.ProviderSandboxID),
		LatestSnapshotID: str(w.LatestSnapshotID), ThreadID: str(w.ThreadID),
		LatestRunID: str(w.LatestRunID), UpdatedAt: *w.UpdatedAt,
	}, nil
}

// Writer is a chain.Writer as a request carries it; the server reads it
// with chain.Writer's own decoder.
type Writer struct {
	ThreadID   Text   `json:"threadId"`
	OwnerToken Text   `json:"ownerToken"`
	Fence      uint64 `json:"fence"`
}

// FromWriter is w's wire form. An owner token no JSON string carries, or a
// fence past 2^53−1, can match no lease (tokens are UUIDs, fences count up
// from 1); they travel as "" and 0, which match none either, so every store
// check decides as it would for w.
func FromWriter(w chain.Writer) Writer {
	out := Writer{ThreadID: Text(w.ThreadID), OwnerToken: Text(w.OwnerToken), Fence: w.Fence}
	if !Representable(w.OwnerToken) {
		out.OwnerToken = ""
	}
	if w.Fence > chain.MaxSafeInteger {
		out.Fence = 0
	}
	return out
}

// State is a lease.State on the wire ("Lease state", docs/API.md); the
// owner token is never sent. Holder is null when none was recorded.
type State struct {
	LastFence uint64         `json:"lastFence"`
	Held      bool           `json:"held"`
	Fence     uint64         `json:"fence"`
	ExpiresAt int64          `json:"expiresAt"`
	Holder    *proc.Identity `json:"holder"`
}

// FromState is s's wire form, without its owner token.
func FromState(s lease.State) State {
	out := State{LastFence: s.LastFence, Held: s.Held, Fence: s.Fence, ExpiresAt: s.ExpiresAt}
	if !s.Holder.IsZero() {
		h := s.Holder
		out.Holder = &h
	}
	return out
}

// State returns the lease.State w names (OwnerToken "").
func (w State) State() lease.State {
	s := lease.State{LastFence: w.LastFence, Held: w.Held, Fence: w.Fence, ExpiresAt: w.ExpiresAt}
	if w.Holder != nil {
		s.Holder = *w.Holder
	}
	return s
}

// Lease is a granted lease on the wire: its writer, expiry (epoch ms), the
// store's renewal cadence and, after a takeover, the lease it replaced.
type Lease struct {
	ThreadID     Text   `json:"threadId"`
	OwnerToken   Text   `json:"ownerToken"`
	Fence        uint64 `json:"fence"`
	ExpiresAt    int64  `json:"expiresAt"`
	RenewAfterMs int64  `json:"renewAfterMs"`
	TookOver     *State `json:"tookOver,omitempty"`
}

// FromLease is l's wire form.
func FromLease(l *lease.Lease) Lease {
	out := Lease{ThreadID: Text(l.ThreadID), OwnerToken: Text(l.OwnerToken), Fence: l.Fence,
		ExpiresAt: l.ExpiresAt().UnixMilli(), RenewAfterMs: l.RenewAfter.Milliseconds()}
	if l.TookOver != nil {
		s := FromState(*l.TookOver)
		out.TookOver = &s
	}
	return out
}

// Lease returns the lease handle w describes, renewed and released
// through b.
func (w Lease) Lease(b lease.Backend) *lease.Lease {
	l := lease.New(lease.Writer{ThreadID: string(w.ThreadID), OwnerToken: string(w.OwnerToken), Fence: w.Fence},
		time.UnixMilli(w.ExpiresAt), time.Duration(w.RenewAfterMs)*time.Millisecond, b)
	if w.TookOver != nil {
		s := w.TookOver.State()
		l.TookOver = &s
	}
	return l
}
