package pgkv

import (
	"context"
	"time"
)

// Now returns the database server's clock (clock_timestamp(): the time
// the statement read it, not its transaction's start), for servers
// sharing the database to agree on one time whatever their own clocks
// say. It runs one statement on a pooled connection, outside any
// transaction of the caller's.
func (db *DB) Now(ctx context.Context) (time.Time, error) {
	var us int64
	err := db.pool.QueryRow(ctx, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint").Scan(&us)
	if err != nil {
		return time.Time{}, wrapErr(ctx, nil, "now", err)
	}
	return time.UnixMicro(us), nil
}
