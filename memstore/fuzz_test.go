package memstore_test

import (
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
)

// FuzzOperations is the differential test (differential_test.go) with the
// fuzzer choosing the operations: every random choice of the runner comes
// from the input bytes instead of a seeded PCG, so coverage guidance steers
// the sequences of AcquireWriter, Renew, Release, Append, DeleteHead,
// DeleteCheckpoints, Fork, SaveThread, instance writes and clock jumps that
// both stores run side by side.
//
// It proves that for every such sequence the bbolt engine and the in-memory
// reference store return the same results and the same error codes, never
// return an error without a contract code, never panic, and expose the same
// state (heads, lists, transcripts, Get of every pool id, blob references,
// instance records) after every step.
//
// Input layout: the first byte is the runner's seed (it only picks the
// engine's RefFoldAfter, 1 + seed%4, and names the run); the rest is read
// as little-endian uint64 words, one per random draw. The run has
// min(len(rest)/8, 60)+1 steps; once the words are used up the draws
// continue from a fixed SplitMix64 stream (not zeros: math/rand/v2's
// rejection sampling would loop forever on a source stuck at 0).
func FuzzOperations(f *testing.F) {
	// Seeds: a seed byte i and the first 480 bytes of the PCG stream that
	// TestDifferential's sequence i uses, so the first steps of each seed
	// replay that sequence.
	for seed := range uint64(5) {
		data := []byte{byte(seed)}
		pcg := rand.NewPCG(seed, 0x5eedbeef)
		for range 60 {
			data = binary.LittleEndian.AppendUint64(data, pcg.Uint64())
		}
		f.Add(data)
	}
	dir := f.TempDir()
	var execs int
	f.Fuzz(func(t *testing.T, data []byte) {
		execs++
		var seed int64
		if len(data) > 0 {
			seed, data = int64(data[0]), data[1:]
		}
		r := &runner{
			seed: seed,
			dir:  filepath.Join(dir, strconv.Itoa(execs)),
			src:  &opsSource{data: data},
		}
		if report := r.run(min(len(data)/8, 60) + 1); report != "" {
			t.Fatal(report)
		}
	})
}

// opsSource is a rand.Source over fuzz bytes: each Uint64 is the next 8
// bytes (little-endian, a short tail zero-padded), then a SplitMix64 stream
// from a fixed state once the bytes are used up.
type opsSource struct {
	data []byte
	mix  uint64
}

func (s *opsSource) Uint64() uint64 {
	if len(s.data) > 0 {
		var w [8]byte
		n := copy(w[:], s.data)
		s.data = s.data[n:]
		return binary.LittleEndian.Uint64(w[:])
	}
	s.mix += 0x9e3779b97f4a7c15
	z := s.mix
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
