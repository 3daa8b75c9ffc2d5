package pgkv

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// TestUpgradeFromVersion1: Open moves version 1's sequences into seqs.
func TestUpgradeFromVersion1(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	db := open(t, url, Options{})
	mustUpdate(t, db, func(tx kv.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err })
	db.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Version 1's tables: the sequence in buckets.seq, no seqs.
	if _, err := conn.Exec(ctx, "DROP TABLE sbxdb.seqs; UPDATE sbxdb.buckets SET seq = -2; UPDATE sbxdb.version SET version = 1"); err != nil {
		t.Fatal(err)
	}
	db = open(t, url, Options{})
	mustView(t, db, func(tx kv.Tx) error {
		if s := tx.Bucket([]byte("b")).Sequence(); s != ^uint64(0)-1 {
			return fmt.Errorf("sequence %d after the upgrade, want %d", s, ^uint64(0)-1)
		}
		return nil
	})
}

func mustUpdate(t *testing.T, db *DB, fn func(kv.Tx) error) {
	t.Helper()
	if err := db.Update(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

func mustView(t *testing.T, db *DB, fn func(kv.Tx) error) {
	t.Helper()
	if err := db.View(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}
