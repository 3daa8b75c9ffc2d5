package chain

import (
	"encoding/binary"
	"testing"
)

func TestUvarintSize(t *testing.T) {
	for shift := 0; shift < 64; shift++ {
		for _, v := range []uint64{1<<shift - 1, 1 << shift, 1<<shift + 1} {
			if got, want := uvarintSize(v), len(binary.AppendUvarint(nil, v)); got != want {
				t.Errorf("uvarintSize(%d) = %d, want %d", v, got, want)
			}
		}
	}
	if got := uvarintSize(^uint64(0)); got != binary.MaxVarintLen64 {
		t.Errorf("uvarintSize(max) = %d, want %d", got, binary.MaxVarintLen64)
	}
}
