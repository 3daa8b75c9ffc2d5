package pgkv

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Counts are the statements and round trips the DBs of this process sent
// to their databases since it started, as pgx reports them to a tracer:
// a query or exec is one statement and at least one round trip (pgx
// prepares a statement it has not cached on that connection, one more); a
// batch is one round trip carrying each of its statements. Connecting
// and pgx's statement preparation are not counted. Benchmarks read the
// difference across an operation; nothing else runs at the same time.
type Counts struct {
	Statements, RoundTrips int64
}

var counts struct{ statements, roundTrips atomic.Int64 }

// ProcessCounts returns the statements and round trips sent so far by
// every DB of this process.
func ProcessCounts() Counts {
	return Counts{Statements: counts.statements.Load(), RoundTrips: counts.roundTrips.Load()}
}

// counter is the pgx tracer of every pool Open makes: it counts, nothing
// more.
type counter struct{}

func (counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	counts.statements.Add(1)
	counts.roundTrips.Add(1)
	return ctx
}

func (counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	counts.roundTrips.Add(1)
	return ctx
}

func (counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	counts.statements.Add(1)
}

func (counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
