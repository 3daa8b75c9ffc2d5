package meta

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/testkit"
)

func TestCodecRoundTrip(t *testing.T) {
	cp := testkit.SampleCheckpoint()
	if err := chain.ValidateContent(cp); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCheckpoint(EncodeCheckpoint(cp))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cp, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

// Every truncation and many corruptions of a payload decode to an error or
// a value, never a panic, and never allocate beyond the input's size.
func TestDecodeHostilePayloads(t *testing.T) {
	p := EncodeCheckpoint(testkit.SampleCheckpoint())
	for n := range len(p) {
		if _, err := DecodeCheckpoint(p[:n]); err == nil {
			t.Errorf("truncation to %d of %d bytes decoded without error", n, len(p))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := bytes.Clone(p)
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] = byte(rng.UintN(256))
		}
		DecodeCheckpoint(b)
	}
	// A forged element count must not allocate for it.
	forged := append(bytes.Clone(p[:len(p)-1]), 0xff, 0xff, 0xff, 0xff, 0x0f)
	allocs := testing.AllocsPerRun(10, func() { DecodeCheckpoint(forged) })
	if allocs > 200 {
		t.Errorf("forged count: %v allocations", allocs)
	}
}
