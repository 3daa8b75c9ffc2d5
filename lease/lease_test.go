package lease

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/proc"
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

func TestStateEncoding(t *testing.T) {
	holder := proc.Identity{Host: "host-a", Boot: "boot-1", NS: "pid:[4026531836]", PID: 4242, Start: 987654}
	for _, s := range []State{
		{},
		{LastFence: 7},
		{LastFence: 9, Held: true, OwnerToken: "tok", Fence: 9, ExpiresAt: -5},
		{LastFence: 9, Held: true, OwnerToken: "tok", Fence: 9, ExpiresAt: 1796154053352, Holder: holder},
	} {
		got, err := decode(s.encode())
		if err != nil || got != s {
			t.Errorf("decode(encode(%+v)) = %+v, %v", s, got, err)
		}
	}
	for _, bad := range [][]byte{
		{1, 7}, // no such form
		append(State{Held: true, Holder: holder}.encode(), 0),                // trailing byte
		State{Held: true, Holder: holder}.encode()[:12],                      // truncated holder
		{0, formLeaseHolder, 0, 1, 2, 0, 0, 0, 1},                            // pid 0
		{0, formLeaseHolder, 0, 1, 2, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x08, 1}, // pid 2^31
	} {
		if s, err := decode(bad); err == nil {
			t.Errorf("decode(%x) = %+v, want an error", bad, s)
		}
	}
}

// A record written before holders were recorded (form 1, built here byte by
// byte as that encoder wrote it) decodes unchanged, with its holder unknown,
// and is written back in the same form.
func TestStateWithoutHolderDecodesUnchanged(t *testing.T) {
	e := &chain.Encoder{}
	e.Uvarint(12)
	e.Byte(1)
	e.String("0b7c5e36-58f4-4a4c-9b2e-55d1d1ec2a0b")
	e.Uvarint(12)
	e.Varint(1796154053352)
	old := e.Bytes()
	got, err := decode(old)
	want := State{LastFence: 12, Held: true, OwnerToken: "0b7c5e36-58f4-4a4c-9b2e-55d1d1ec2a0b", Fence: 12, ExpiresAt: 1796154053352}
	if err != nil || got != want {
		t.Fatalf("decode(form 1) = %+v, %v; want %+v", got, err, want)
	}
	if !bytes.Equal(got.encode(), old) {
		t.Errorf("encode(%+v) = %x, want the form-1 bytes %x", got, got.encode(), old)
	}
}
