package pgkv

import (
	"context"
	"hash/fnv"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Lock holds the named lock, one holder at a time across every process
// sharing the schema, until release is called: for work longer than one
// transaction that must not run twice at once (a sweep). It waits until
// the lock is free or ctx ends.
//
// The lock is a session-level advisory lock on a connection held for the
// purpose, so a holder that dies (its process killed, its connection
// lost) releases it: PostgreSQL ends the session. release returns the
// connection to the pool; calling it twice is harmless.
func (db *DB) Lock(ctx context.Context, name string) (release func(), err error) {
	h := fnv.New64a()
	io.WriteString(h, "sbxdb/pgkv lock\x00"+db.schema+"\x00"+name)
	key := int64(h.Sum64())
	conn, err := db.acquire(ctx, "lock "+name, func(c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", key)
		return err
	})
	if err != nil {
		return nil, err
	}
	done := false
	return func() {
		if done {
			return
		}
		done = true
		// A failed unlock leaves the session holding the lock: destroy
		// the connection rather than return it to the pool.
		if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", key); err != nil {
			conn.Conn().Close(context.Background())
		}
		conn.Release()
	}, nil
}
