package meta

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
)

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
