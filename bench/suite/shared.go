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

// Shared says where the servers of one benchmark run keep what they
// share.
type Shared struct {
	// Metadata returns the URL of a new, empty PostgreSQL database for
	// one run.
	Metadata func(tb testing.TB) string
	// Blobs returns a new bucket location, s3://BUCKET/PREFIX, that every
	// server of one run names (engine.Options.Blobs), as the README's
	// "Scaling out" has them do: servers sharing a database must keep
	// their blobs in one place (engine.ErrBlobsElsewhere refuses a second
	// server with a blob directory of its own). Nil: each server keeps
	// its blobs in its directory, which only one server per database may.
	Blobs func(tb testing.TB) string
}

// AppendShared runs n goroutines, each appending durably to its own
// thread with its own lease, through servers engine.DB handles (each with
// its own directory) sharing one fresh database, and the bucket of
// sh.Blobs when set: writer i appends through handle i % servers. b.N
// appends are shared among the writers, so appends/s is the aggregate
// throughput of all the handles. More than one server without sh.Blobs
// skips the benchmark, saying why. Besides appends/s it reports this
// process's CPU time per append (cpu-µs/append: the engine's handles and
// their writers, not the database's or the bucket's processes). (The appends' checkpoints name blobs
// but store none: the bucket holds nothing, only the location is shared.)
func AppendShared(b *testing.B, sh Shared, n, servers int) {
	blobs := ""
	switch {
	case sh.Blobs != nil:
		blobs = sh.Blobs(b)
	case servers > 1:
		b.Skip("servers sharing a database need a bucket to share (Shared.Blobs)")
	}
	url := sh.Metadata(b)
	dbs := make([]*engine.DB, servers)
	for i := range dbs {
		opts := Durable()
		opts.Metadata, opts.Blobs = url, blobs
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
	cpu0 := processCPU()
	elapsed, err := concurrently(ops, b.N)
	cpu := processCPU() - cpu0
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportRate(b, b.N, elapsed)
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/append")
	}
}
