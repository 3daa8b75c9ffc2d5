package pgkv

import (
	"context"
	"hash/fnv"
	"io"

	"github.com/jackc/pgx/v5"
)

// Lock holds the named lock, one holder at a time across every process
// sharing the schema, until release is called: for work longer than one
// transaction that must not run twice at once (a sweep). It waits until
// the lock is free or ctx ends.
//
// The lock is a session-level advisory lock on a connection of its own,
// outside the pool (so that the holder's transactions never wait for the
// pool's last connection, which it holds), and a holder that dies (its
// process killed, its connection lost) releases it: PostgreSQL ends the
// session. release closes that connection; calling it twice is harmless.
func (db *DB) Lock(ctx context.Context, name string) (release func(), err error) {
	h := fnv.New64a()
	io.WriteString(h, "sbxdb/pgkv lock\x00"+db.schema+"\x00"+name)
	key := int64(h.Sum64())
	conn, err := pgx.ConnectConfig(ctx, db.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, wrapErr(ctx, nil, "lock "+name, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		conn.Close(context.Background())
		return nil, wrapErr(ctx, nil, "lock "+name, err)
	}
	done := false
	return func() {
		if done {
			return
		}
		done = true
		// Closing the session releases the lock.
		ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
		defer cancel()
		conn.Close(ctx)
	}, nil
}
