package pgkv

import (
	"context"
	"testing"

	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// Every transaction sends statements, each counted with the round trips
// that carried them.
func TestProcessCounts(t *testing.T) {
	db := open(t, pgtest.URL(t), Options{})
	ctx := context.Background()
	before := ProcessCounts()
	err := db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	})
	if err != nil {
		t.Fatal(err)
	}
	afterUpdate := ProcessCounts()
	if d := afterUpdate.Statements - before.Statements; d < 2 {
		t.Fatalf("an Update that wrote counted %d statements, want at least a begin and a commit", d)
	}
	err = db.View(ctx, func(tx kv.Tx) error {
		if v := tx.Bucket([]byte("b")).Get([]byte("k")); string(v) != "v" {
			t.Errorf("read back %q", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after := ProcessCounts()
	if after.Statements <= afterUpdate.Statements || after.RoundTrips <= afterUpdate.RoundTrips {
		t.Fatalf("a View that read counted nothing: %+v then %+v", afterUpdate, after)
	}
	if after.RoundTrips > after.Statements {
		t.Fatalf("more round trips than statements: %+v", after)
	}
}
