package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb/chain"
)

func fileKey(n int) string { return fmt.Sprintf("%s%064x", chain.FilePrefix, n) }

func sample() *chain.Checkpoint {
	return &chain.Checkpoint{
		ID: "cp-é", ThreadID: "thread", ParentID: "parent", CreatedAt: -42,
		Reason: chain.ReasonNamed, Label: "v1", SourceRunID: "run",
		Files: []chain.Entry{
			{Path: "a.txt", Kind: chain.KindFile, BlobKey: fileKey(1), Size: 0},
			{Path: "bin/run", Kind: chain.KindFile, BlobKey: fileKey(2), Size: 1 << 40, Executable: true},
			{Path: "empty", Kind: chain.KindDir},
			{Path: "link", Kind: chain.KindSymlink, Target: "a.txt"},
		},
		Conversation: []json.RawMessage{json.RawMessage(`{"role" : "user"}`), json.RawMessage(`[]`)},
		Artifacts: []chain.Artifact{{ArtifactID: "art", Name: "n", MimeType: "text/plain",
			BlobKey: chain.ArtifactPrefix + strings.Repeat("ab", 32), Size: 3, CreatedAt: 7}},
	}
}

func TestCodecRoundTrip(t *testing.T) {
	cp := sample()
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
	p := EncodeCheckpoint(sample())
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

func TestSealDetectsDamage(t *testing.T) {
	v := Seal([]byte("b"), []byte("k"), []byte("payload"))
	if p, err := Unseal([]byte("b"), []byte("k"), v); err != nil || string(p) != "payload" {
		t.Fatalf("Unseal = %q, %v", p, err)
	}
	for i := range v {
		d := bytes.Clone(v)
		d[i] ^= 1
		if _, err := Unseal([]byte("b"), []byte("k"), d); !errors.Is(err, chain.ErrCorrupt) {
			t.Errorf("flip at %d: %v, want ErrCorrupt", i, err)
		}
	}
	if _, err := Unseal([]byte("b"), []byte("other"), v); !errors.Is(err, chain.ErrCorrupt) || !strings.Contains(err.Error(), "other") {
		t.Errorf("value under the wrong key: %v, want ErrCorrupt naming the key", err)
	}
}
