package pgkv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// TestWritersDoNotWait: while one process's write transaction is open
// (held inside its function, its write sent), another process's write
// transaction of another key commits. Under the global write lock of
// schema version 1 the second waited for the first to end, so this test
// would not return.
func TestWritersDoNotWait(t *testing.T) {
	url := pgtest.URL(t)
	a, b := open(t, url, Options{}), open(t, url, Options{})
	ctx := context.Background()
	mustUpdate(t, a, func(tx kv.Tx) error { _, err := tx.CreateBucket([]byte("heads")); return err })
	err := a.Update(ctx, func(tx kv.Tx) error {
		h := tx.Bucket([]byte("heads"))
		if err := h.Put([]byte("thread-a"), []byte("1")); err != nil {
			return err
		}
		h.Get([]byte("thread-a")) // sends the Put: the transaction holds its row
		// b's transaction commits while a's is open.
		return b.Update(ctx, func(tx kv.Tx) error {
			return tx.Bucket([]byte("heads")).Put([]byte("thread-b"), []byte("1"))
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Retries() != 0 || b.Retries() != 0 {
		t.Errorf("retries %d and %d, want none: the transactions do not conflict", a.Retries(), b.Retries())
	}
	mustView(t, b, func(tx kv.Tx) error {
		h := tx.Bucket([]byte("heads"))
		if string(h.Get([]byte("thread-a"))) != "1" || string(h.Get([]byte("thread-b"))) != "1" {
			return errors.New("a write is missing")
		}
		return nil
	})
}

// TestConflictRunsAgain: two read-increment-writes of one key, the second
// committing between the first's read and its write. PostgreSQL aborts
// the first (40001); Update runs its function again, which reads the
// committed value: no increment is lost.
func TestConflictRunsAgain(t *testing.T) {
	url := pgtest.URL(t)
	a, b := open(t, url, Options{}), open(t, url, Options{})
	ctx := context.Background()
	mustUpdate(t, a, func(tx kv.Tx) error { _, err := tx.CreateBucket([]byte("c")); return err })
	incr := func(tx kv.Tx) error {
		c := tx.Bucket([]byte("c"))
		n, _ := strconv.Atoi(string(c.Get([]byte("n"))))
		return c.Put([]byte("n"), []byte(strconv.Itoa(n+1)))
	}
	var retried []error
	a.onRetry = func(_ int, err error) { retried = append(retried, err) }
	runs := 0
	err := a.Update(ctx, func(tx kv.Tx) error {
		runs++
		c := tx.Bucket([]byte("c"))
		n, _ := strconv.Atoi(string(c.Get([]byte("n"))))
		if runs == 1 {
			if err := b.Update(ctx, incr); err != nil {
				return fmt.Errorf("the other increment: %w", err)
			}
		}
		return c.Put([]byte("n"), []byte(strconv.Itoa(n+1)))
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 || len(retried) != 1 || !Retryable(retried[0]) || a.Retries() != 1 {
		t.Fatalf("runs %d, retries %v (%d), want 2 runs after one serialization failure", runs, retried, a.Retries())
	}
	mustView(t, a, func(tx kv.Tx) error {
		if n := string(tx.Bucket([]byte("c")).Get([]byte("n"))); n != "2" {
			return fmt.Errorf("n = %s, want 2", n)
		}
		return nil
	})
}

// TestAddSequenceDoesNotConflict: transactions that add to one sequence
// commit at once, without a retry, and the sequence is the sum; a
// SetSequence replaces what its transaction saw and keeps an addition
// made concurrently.
func TestAddSequenceDoesNotConflict(t *testing.T) {
	url := pgtest.URL(t)
	a, b := open(t, url, Options{}), open(t, url, Options{})
	ctx := context.Background()
	mustUpdate(t, a, func(tx kv.Tx) error { _, err := tx.CreateBucket([]byte("p")); return err })
	add := func(d int64) func(kv.Tx) error {
		return func(tx kv.Tx) error { return kv.AddSequence(tx.Bucket([]byte("p")), d) }
	}
	err := a.Update(ctx, func(tx kv.Tx) error {
		p := tx.Bucket([]byte("p"))
		if err := kv.AddSequence(p, 5); err != nil {
			return err
		}
		if err := p.Put([]byte("k"), []byte("v")); err != nil {
			return err
		}
		p.Get([]byte("k"))
		return b.Update(ctx, add(3))
	})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, b, add(-1))
	if a.Retries()+b.Retries() != 0 {
		t.Errorf("%d retries, want none", a.Retries()+b.Retries())
	}
	seq := func() uint64 {
		var s uint64
		mustView(t, a, func(tx kv.Tx) error { s = tx.Bucket([]byte("p")).Sequence(); return nil })
		return s
	}
	if s := seq(); s != 7 {
		t.Fatalf("sequence %d, want 7", s)
	}
	err = a.Update(ctx, func(tx kv.Tx) error {
		p := tx.Bucket([]byte("p"))
		if s := p.Sequence(); s != 7 {
			return fmt.Errorf("sequence in the transaction %d, want 7", s)
		}
		if err := p.SetSequence(0); err != nil {
			return err
		}
		return b.Update(ctx, add(4)) // commits first; a serializes before it
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := seq(); s != 4 {
		t.Fatalf("sequence %d, want 4: the set replaces 7 and keeps the concurrent 4", s)
	}
}

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
