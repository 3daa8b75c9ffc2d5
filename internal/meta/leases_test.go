package meta

import (
	"bytes"
	"testing"

	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/lease"
)

func TestStateEncoding(t *testing.T) {
	holder := proc.Identity{Host: "host-a", Boot: "boot-1", NS: "pid:[4026531836]", PID: 4242, Start: 987654}
	for _, s := range []lease.State{
		{},
		{LastFence: 7},
		{LastFence: 9, Held: true, OwnerToken: "tok", Fence: 9, ExpiresAt: -5},
		{LastFence: 9, Held: true, OwnerToken: "tok", Fence: 9, ExpiresAt: 1796154053352, Holder: holder},
	} {
		got, err := decodeLease(encodeLease(s))
		if err != nil || got != s {
			t.Errorf("decode(encode(%+v)) = %+v, %v", s, got, err)
		}
	}
	for _, bad := range [][]byte{
		{1, 7}, // no such form
		append(encodeLease(lease.State{Held: true, Holder: holder}), 0),      // trailing byte
		encodeLease(lease.State{Held: true, Holder: holder})[:12],            // truncated holder
		{0, formLeaseHolder, 0, 1, 2, 0, 0, 0, 1},                            // pid 0
		{0, formLeaseHolder, 0, 1, 2, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x08, 1}, // pid 2^31
	} {
		if s, err := decodeLease(bad); err == nil {
			t.Errorf("decode(%x) = %+v, want an error", bad, s)
		}
	}
}

// A record written before holders were recorded (form 1, built here byte by
// byte as that encoder wrote it) decodes unchanged, with its holder unknown,
// and is written back in the same form.
func TestStateWithoutHolderDecodesUnchanged(t *testing.T) {
	e := &Encoder{}
	e.Uvarint(12)
	e.Byte(1)
	e.String("0b7c5e36-58f4-4a4c-9b2e-55d1d1ec2a0b")
	e.Uvarint(12)
	e.Varint(1796154053352)
	old := e.Bytes()
	got, err := decodeLease(old)
	want := lease.State{LastFence: 12, Held: true, OwnerToken: "0b7c5e36-58f4-4a4c-9b2e-55d1d1ec2a0b", Fence: 12, ExpiresAt: 1796154053352}
	if err != nil || got != want {
		t.Fatalf("decodeLease(form 1) = %+v, %v; want %+v", got, err, want)
	}
	if !bytes.Equal(encodeLease(got), old) {
		t.Errorf("encode(%+v) = %x, want the form-1 bytes %x", got, encodeLease(got), old)
	}
}
