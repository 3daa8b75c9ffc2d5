package engine_test

import (
	"errors"
	"testing"

	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/kv/pgkv"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// A bucket missing from the shared metadata (damage) is ErrCorrupt on the
// bbolt file (db.tx recovers internal/meta's panic); on the shared
// database the panic reaches the caller.
func TestSharedMissingBucketIsCorrupt(t *testing.T) {
	ctx := t.Context()
	url := pgtest.URL(t)
	db, err := engine.Open(t.TempDir(), &engine.Options{Metadata: url, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := pgkv.Open(ctx, url, pgkv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Update(ctx, func(tx kv.Tx) error { return tx.DeleteBucket([]byte("heads")) }); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Head on damaged shared metadata panicked: %v", r)
		}
	}()
	_, err = db.Head(ctx, "t")
	if !errors.Is(err, chain.ErrCorrupt) {
		t.Fatalf("Head: %v, want ErrCorrupt", err)
	}
}
