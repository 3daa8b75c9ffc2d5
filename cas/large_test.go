package cas

import (
	"bytes"
	"context"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// A large blob's first trialSize bytes decide, in the stream itself,
// whether it is stored compressed; a blob whose start does not shrink is
// rewritten raw from its first byte, whatever follows. Every shape reads
// back intact.
func TestAddReaderDecidesOnTheFirstMiB(t *testing.T) {
	f := open(t)
	ctx := context.Background()
	cases := []struct {
		name string
		data []byte
		zstd bool
	}{
		{"empty", nil, false},
		{"short text", text(100<<10, 1), true},
		{"short noise", noise(100<<10, 2), false},
		{"exactly the trial, text", text(trialSize, 3), true},
		{"exactly the trial, noise", noise(trialSize, 4), false},
		{"text", text(3*trialSize+12345, 5), true},
		{"noise", noise(3*trialSize+12345, 6), false},
		{"noise, then text", append(noise(trialSize, 7), text(4*trialSize, 8)...), false},
		{"text, then noise", append(text(trialSize, 9), noise(trialSize/4, 10)...), true},
	}
	b := f.s.NewBatch()
	defer b.Close()
	keys := make([]string, len(cases))
	for i, c := range cases {
		res, err := b.AddReader(ctx, Files, bytes.NewReader(c.data))
		if err != nil || !res.New || res.Key != keyOf(Files, c.data) || res.Size != int64(len(c.data)) {
			t.Fatalf("%s: %+v %v", c.name, res, err)
		}
		keys[i] = res.Key
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	entries := f.entries(t, keys)
	for i, c := range cases {
		e := entries[keys[i]]
		if e.where != whereLarge || (e.codec == codecZstd) != c.zstd {
			t.Errorf("%s: entry %+v, want compressed %v", c.name, e, c.zstd)
		}
		if e.codec == codecRaw && e.stored != e.raw {
			t.Errorf("%s: raw, but %d bytes stored for %d", c.name, e.stored, e.raw)
		}
		got, err := f.s.Get(ctx, keys[i])
		if err != nil || !bytes.Equal(got, c.data) {
			t.Errorf("%s: read back %d bytes, %v", c.name, len(got), err)
		}
	}
}

// Packed frames are compressed at CaptureLevel: the store's encoder gives
// what a fresh encoder at that level gives.
func TestPackEncoderLevel(t *testing.T) {
	enc, err := newPackEncoder()
	if err != nil {
		t.Fatal(err)
	}
	want, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(CaptureLevel), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithZeroFrames(true))
	if err != nil {
		t.Fatal(err)
	}
	other, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithZeroFrames(true))
	if err != nil {
		t.Fatal(err)
	}
	data := text(blockTarget, 11)
	got := enc.EncodeAll(data, nil)
	if !bytes.Equal(got, want.EncodeAll(data, nil)) {
		t.Fatalf("packed frames are not compressed at CaptureLevel")
	}
	if bytes.Equal(got, other.EncodeAll(data, nil)) {
		t.Fatalf("the test's data does not tell the levels apart")
	}
}
