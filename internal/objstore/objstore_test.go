package objstore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/internal/objstore"
)

// TestContextReader: reads pass through until ctx is done, then fail with
// ctx's error without reading the source.
func TestContextReader(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	src := strings.NewReader("abcdef")
	r := objstore.ContextReader(ctx, src)
	buf := make([]byte, 3)
	if n, err := r.Read(buf); n != 3 || err != nil || string(buf) != "abc" {
		t.Fatalf("Read = %d %q %v, want 3 \"abc\" nil", n, buf[:n], err)
	}
	cancel()
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("Read after cancel = %d, %v; want 0, context.Canceled", n, err)
	}
	if src.Len() != 3 {
		t.Errorf("the source was read after cancel: %d bytes left, want 3", src.Len())
	}
	if b, err := io.ReadAll(objstore.ContextReader(t.Context(), src)); string(b) != "def" || err != nil {
		t.Errorf("ReadAll = %q, %v; want \"def\", nil", b, err)
	}
}
