package pgkv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
	"github.com/sbxdb/sbxdb/internal/kv/kvtest"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t testing.TB, url string, opts Options) *DB {
	t.Helper()
	db, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

func funcs(db *DB) (view, update kvtest.Func) {
	ctx := context.Background()
	return func(fn func(kv.Tx) error) error { return db.View(ctx, fn) },
		func(fn func(kv.Tx) error) error { return db.Update(ctx, fn) }
}

func TestConformance(t *testing.T) {
	url := pgtest.URL(t)
	n := 0
	kvtest.Run(t, func(t *testing.T) (view, update kvtest.Func) {
		// A schema per case: cheaper than a database per case.
		n++
		return funcs(open(t, url, Options{Schema: "case" + strconv.Itoa(n)}))
	})
}

// TestSchemas checks that schemas are independent stores and that
// concurrent Opens of a new schema create it once.
func TestSchemas(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			db, err := Open(ctx, url, Options{})
			if err == nil {
				db.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	a, b := open(t, url, Options{}), open(t, url, Options{Schema: "other schema"})
	_, updA := funcs(a)
	viewB, _ := funcs(b)
	if err := updA(func(tx kv.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	if err := viewB(func(tx kv.Tx) error {
		if tx.Bucket([]byte("b")) != nil {
			return errors.New("a bucket of one schema is visible in another")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestNoLostUpdate runs read-increment-write Updates of one key from two
// DBs, as two servers would: none may be lost.
func TestNoLostUpdate(t *testing.T) {
	url := pgtest.URL(t)
	dbs := []*DB{open(t, url, Options{MaxConns: 4}), open(t, url, Options{MaxConns: 4})}
	ctx := context.Background()
	if err := dbs[0].Update(ctx, func(tx kv.Tx) error {
		_, err := tx.CreateBucket([]byte("b"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = dbs[i%2].Update(ctx, func(tx kv.Tx) error {
				b := tx.Bucket([]byte("b"))
				v, _ := strconv.Atoi(string(b.Get([]byte("n"))))
				return b.Put([]byte("n"), []byte(strconv.Itoa(v+1)))
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := dbs[1].View(ctx, func(tx kv.Tx) error {
		if v := string(tx.Bucket([]byte("b")).Get([]byte("n"))); v != strconv.Itoa(n) {
			return fmt.Errorf("counter = %s after %d increments", v, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestNewerSchemaRefused checks that Open refuses tables of a later
// version of this package.
func TestNewerSchemaRefused(t *testing.T) {
	url := pgtest.URL(t)
	open(t, url, Options{}).Close()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "UPDATE sbxdb.version SET version = $1", SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	db, err := Open(ctx, url, Options{})
	if !errors.Is(err, ErrNewerSchema) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("Open of a newer schema: %v, want ErrNewerSchema", err)
	}
}

// TestRestart restarts the server between two Updates, by a fast
// shutdown and by a crash: the first Update after it may fail, once, with
// ErrUnavailable; later ones succeed, on the same DB. While the server is
// down, calls fail with ErrUnavailable.
func TestRestart(t *testing.T) {
	url := pgtest.URL(t)
	db := open(t, url, Options{MaxConns: 4})
	ctx := context.Background()
	done := uint64(0)
	incr := func() error {
		err := db.Update(ctx, func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			n, err := b.NextSequence()
			if err != nil {
				return err
			}
			return b.Put([]byte("n"), []byte(strconv.FormatUint(n, 10)))
		})
		if err == nil {
			done++
		}
		return err
	}
	for _, restart := range []struct {
		name string
		fn   func(testing.TB)
	}{
		{"fast", pgtest.Restart},
		{"crash", func(t testing.TB) { pgtest.Kill(t); pgtest.Start(t) }},
	} {
		// Fill the pool with idle connections that the restart will kill.
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { db.View(ctx, func(kv.Tx) error { return nil }) })
		}
		wg.Wait()
		if err := incr(); err != nil {
			t.Fatal(err)
		}
		restart.fn(t)
		for i := range 5 {
			err := incr()
			if err == nil {
				continue
			}
			if i > 0 || !errors.Is(err, sbxdb.ErrMetadataUnavailable) {
				t.Fatalf("%s restart: Update %d after it: %v", restart.name, i, err)
			}
			t.Logf("%s restart: first Update after it: %v", restart.name, err)
		}
	}
	pgtest.Stop(t)
	err := incr()
	pgtest.Start(t)
	if !errors.Is(err, sbxdb.ErrMetadataUnavailable) {
		t.Fatalf("Update while the server is down: %v, want ErrUnavailable", err)
	}
	if err := db.View(ctx, func(tx kv.Tx) error {
		if s := tx.Bucket([]byte("b")).Sequence(); s != done {
			return fmt.Errorf("sequence %d after %d successful Updates", s, done)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// backendPID returns the server process of tx's connection.
func backendPID(ktx kv.Tx) uint32 { return ktx.(*tx).conn.Conn().PgConn().PID() }

// terminate ends server process pid, waiting until it is gone.
func terminate(t *testing.T, url string, pid uint32) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend: %v, %v", ok, err)
	}
}

// TestLostConnection checks that a read failing mid-transaction makes the
// transaction fail with ErrUnavailable although fn returned nil, that a
// COMMIT on a lost connection says its outcome is unknown, and that the
// DB works afterwards.
func TestLostConnection(t *testing.T) {
	url := pgtest.URL(t)
	db := open(t, url, Options{})
	view, update := funcs(db)
	if err := update(func(tx kv.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	err := view(func(tx kv.Tx) error {
		terminate(t, url, backendPID(tx))
		b := tx.Bucket([]byte("b"))
		if v := b.Get([]byte("k")); v != nil {
			t.Errorf("Get on a lost connection = %q", v)
		}
		if k, _ := b.Cursor().First(); k != nil {
			t.Errorf("First on a lost connection = %q", k)
		}
		return nil
	})
	if !errors.Is(err, sbxdb.ErrMetadataUnavailable) {
		t.Fatalf("view with a lost connection: %v, want ErrUnavailable", err)
	}
	err = update(func(tx kv.Tx) error {
		if err := tx.Bucket([]byte("b")).Put([]byte("k"), []byte("w")); err != nil {
			return err
		}
		terminate(t, url, backendPID(tx))
		return nil
	})
	if !errors.Is(err, sbxdb.ErrCommitUnknown) || !errors.Is(err, sbxdb.ErrMetadataUnavailable) {
		t.Fatalf("commit on a lost connection: %v, want ErrCommitUnknown and ErrUnavailable", err)
	}
	// A queued write whose sending fails, with the read after it, fails
	// the transaction although fn returns nil; the outcome is known, as
	// COMMIT was never sent.
	err = update(func(tx kv.Tx) error {
		terminate(t, url, backendPID(tx))
		b := tx.Bucket([]byte("b"))
		if err := b.Put([]byte("k"), []byte("x")); err != nil {
			t.Errorf("queued Put: %v", err)
		}
		if v := b.Get([]byte("k")); v != nil {
			t.Errorf("Get after a failed write = %q", v)
		}
		if err := b.Put([]byte("k2"), []byte("x")); err == nil {
			t.Error("Put after the transaction failed returned nil")
		}
		return nil
	})
	if !errors.Is(err, sbxdb.ErrMetadataUnavailable) || errors.Is(err, sbxdb.ErrCommitUnknown) {
		t.Fatalf("update whose write failed: %v, want ErrUnavailable and not ErrCommitUnknown", err)
	}
	if err := view(func(tx kv.Tx) error {
		if v := tx.Bucket([]byte("b")).Get([]byte("k")); string(v) != "v" {
			return fmt.Errorf("Get = %q, want the value before the failed commits", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestCancel checks that ending ctx aborts the transaction, including one
// waiting for a row lock another process's transaction holds.
func TestCancel(t *testing.T) {
	url := pgtest.URL(t)
	a, b := open(t, url, Options{}), open(t, url, Options{})
	ctx := context.Background()
	if err := a.Update(ctx, func(tx kv.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	err := a.Update(cctx, func(tx kv.Tx) error {
		err := tx.Bucket([]byte("b")).Put([]byte("k"), []byte("v"))
		cancel()
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("update whose ctx ended: %v, want context.Canceled", err)
	}

	// b waits for the row a wrote, until its ctx ends.
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	err = a.Update(ctx, func(tx kv.Tx) error {
		if err := tx.Bucket([]byte("b")).Put([]byte("k"), []byte("a")); err != nil {
			return err
		}
		tx.Bucket([]byte("b")).Get([]byte("k")) // sends the Put: a holds the row
		done := make(chan error)
		go func() {
			done <- b.Update(bctx, func(tx kv.Tx) error {
				tx.Bucket([]byte("b")).Put([]byte("k"), []byte("b"))
				tx.Bucket([]byte("b")).Get([]byte("k")) // waits for a
				return nil
			})
		}()
		waitForLockWaiter(t, url)
		bcancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			return fmt.Errorf("update waiting for the lock: %v, want context.Canceled", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.View(ctx, func(tx kv.Tx) error {
		if v := tx.Bucket([]byte("b")).Get([]byte("k")); string(v) != "a" {
			return fmt.Errorf("k = %q, want a's write alone", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// waitForLockWaiter polls until a session waits for a lock.
func waitForLockWaiter(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for {
		var n int
		if err := conn.QueryRow(ctx,
			"SELECT count(*) FROM pg_locks WHERE NOT granted").Scan(&n); err != nil {
			t.Error(err)
			return
		}
		if n > 0 {
			return
		}
		if _, err := conn.Exec(ctx, "SELECT pg_sleep(0.01)"); err != nil {
			t.Error(err)
			return
		}
	}
}

// TestIterateWhileWriting writes keys ahead of and behind a cursor while
// it walks: it must return keys in increasing order, each once, and end.
func TestIterateWhileWriting(t *testing.T) {
	db := open(t, pgtest.URL(t), Options{})
	_, update := funcs(db)
	const n = 1000
	if err := update(func(tx kv.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		for i := 0; err == nil && i < n; i += 2 {
			err = b.Put(fmt.Appendf(nil, "k%06d", i), []byte("v"))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := update(func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		c := b.Cursor()
		var last []byte
		steps := 0
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if last != nil && string(k) <= string(last) {
				return fmt.Errorf("cursor went from %q to %q", last, k)
			}
			last = k
			if steps++; steps > 4*n {
				return errors.New("cursor does not end")
			}
			var i int
			fmt.Sscanf(string(k), "k%06d", &i)
			if i >= n {
				continue // keys written ahead; writing more would never end
			}
			// Fill the gap after k, add one far ahead, delete one ahead
			// and one behind.
			err := errors.Join(
				b.Put(fmt.Appendf(nil, "k%06d", i+1), []byte("w")),
				b.Put(fmt.Appendf(nil, "k%06d", i+501), []byte("w")),
				b.Delete(fmt.Appendf(nil, "k%06d", i+4)),
				b.Delete(fmt.Appendf(nil, "k%06d", i-2)),
			)
			if err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkTx compares one-Put Updates and one-Get Views on pgkv and on
// bbolt (syncing each commit).
func BenchmarkTx(b *testing.B) {
	pgDB := open(b, pgtest.URL(b), Options{})
	bdb, err := bolt.Open(filepath.Join(b.TempDir(), "kv.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bdb.Close()
	ctx := context.Background()
	stores := []struct {
		name         string
		view, update kvtest.Func
	}{
		{"bolt",
			func(fn func(kv.Tx) error) error { return bdb.View(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) }) },
			func(fn func(kv.Tx) error) error {
				return bdb.Update(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) })
			}},
		{"pg",
			func(fn func(kv.Tx) error) error { return pgDB.View(ctx, fn) },
			func(fn func(kv.Tx) error) error { return pgDB.Update(ctx, fn) }},
	}
	for _, s := range stores {
		if err := s.update(func(tx kv.Tx) error {
			bk, err := tx.CreateBucket([]byte("b"))
			if err != nil {
				return err
			}
			return bk.Put([]byte("key"), []byte("value"))
		}); err != nil {
			b.Fatal(err)
		}
	}
	for _, s := range stores {
		b.Run("Update1Put/"+s.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				if err := s.update(func(tx kv.Tx) error {
					return tx.Bucket([]byte("b")).Put([]byte("key"), strconv.AppendInt(nil, int64(i), 10))
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, s := range stores {
		b.Run("View1Get/"+s.name, func(b *testing.B) {
			for b.Loop() {
				if err := s.view(func(tx kv.Tx) error {
					if tx.Bucket([]byte("b")).Get([]byte("key")) == nil {
						return errors.New("key missing")
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
