package lease

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
)

// fakeBackend renews to a growing expiry until told to fail.
type fakeBackend struct {
	mu       sync.Mutex
	renewals int
	failAt   int // the renewal number that fails; 0 never
	released []Writer
}

func (f *fakeBackend) RenewWriter(ctx context.Context, w Writer) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewals++
	if f.renewals == f.failAt {
		return time.Time{}, chain.Errorf(chain.ErrWriterLost, "lost")
	}
	return time.UnixMilli(int64(1000 * f.renewals)), nil
}

func (f *fakeBackend) ReleaseWriter(ctx context.Context, w Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, w)
	return nil
}

func TestLeaseRenewUpdatesExpiry(t *testing.T) {
	b := &fakeBackend{failAt: 2}
	w := Writer{ThreadID: "t", OwnerToken: "o", Fence: 3}
	l := New(w, time.UnixMilli(5), time.Second, b)
	got, err := l.Renew(context.Background())
	if err != nil || got.UnixMilli() != 1000 || l.ExpiresAt().UnixMilli() != 1000 {
		t.Fatalf("Renew = %v, %v; ExpiresAt %v", got, err, l.ExpiresAt())
	}
	if _, err := l.Renew(context.Background()); !errors.Is(err, chain.ErrWriterLost) {
		t.Fatalf("failing Renew: %v", err)
	}
	if l.ExpiresAt().UnixMilli() != 1000 {
		t.Errorf("a failed Renew changed ExpiresAt to %v", l.ExpiresAt())
	}
	l.Release(context.Background())
	if len(b.released) != 1 || b.released[0] != w {
		t.Errorf("Release passed %v, want the lease's writer", b.released)
	}
}

func TestKeepAliveStopsOnLossOrCancel(t *testing.T) {
	b := &fakeBackend{failAt: 3}
	l := New(Writer{ThreadID: "t"}, time.Time{}, time.Millisecond, b)
	if err := l.KeepAlive(context.Background()); !errors.Is(err, chain.ErrWriterLost) {
		t.Fatalf("KeepAlive after a lost renewal: %v, want WRITER_LOST", err)
	}
	if b.renewals != 3 {
		t.Errorf("renewals before the loss: %d, want 3", b.renewals)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	l = New(Writer{ThreadID: "t"}, time.Time{}, time.Millisecond, &fakeBackend{})
	go func() { done <- l.KeepAlive(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("KeepAlive after cancel: %v, want nil", err)
	}
}

func TestNewTokenIsUUIDv4(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		tok := NewToken()
		if !re.MatchString(tok) || seen[tok] {
			t.Fatalf("token %q is not a fresh UUIDv4", tok)
		}
		seen[tok] = true
	}
}
