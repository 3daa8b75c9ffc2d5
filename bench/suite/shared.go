package suite

import (
	"fmt"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
)

// Shared metadata: the appends of AppendConcurrent with the store's
// metadata in PostgreSQL (engine.Options.Metadata) instead of sbx.db,
// through one engine.DB or through several, each with its own directory,
// as several servers sharing one database run. PostgreSQL's own
// durability is the server's (fsync on, synchronous_commit on, as the
// throw-away clusters of internal/testkit/pgserver run).

// NewMetadata returns the URL of a new, empty PostgreSQL database for one
// benchmark run.
type NewMetadata func(tb testing.TB) string

// AppendShared runs n goroutines, each appending durably to its own
// thread with its own lease, through servers engine.DB handles (each with
// its own directory) sharing one fresh database from newURL: writer i
// appends through handle i % servers. b.N appends are shared among the
// writers, so appends/s is the aggregate throughput of all the handles.
func AppendShared(b *testing.B, newURL NewMetadata, n, servers int) {
	url := newURL(b)
	dbs := make([]*engine.DB, servers)
	for i := range dbs {
		opts := Durable()
		opts.Metadata = url
		dbs[i] = openDB(b, opts)
	}
	ws := make([]*writer, n)
	for i := range ws {
		thread := fmt.Sprintf("w%02d", i)
		l, err := dbs[i%servers].AcquireWriter(ctx, thread)
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = &writer{w: l.Writer, g: newGen(thread, SmallFiles)}
	}
	ops := make([]func() error, n)
	for i, wr := range ws {
		db := dbs[i%servers]
		ops[i] = func() error { return wr.appendNext(db) }
	}
	b.ResetTimer()
	elapsed, err := concurrently(ops, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportRate(b, b.N, elapsed)
}
