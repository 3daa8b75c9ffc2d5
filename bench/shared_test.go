package bench

import (
	"fmt"
	"testing"

	"github.com/sbxdb/sbxdb/bench/suite"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
)

// TestMain stops the throw-away PostgreSQL cluster of the shared-metadata
// benchmarks, if one was started, when the binary ends.
func TestMain(m *testing.M) { pgtest.Main(m) }

// BenchmarkAppendShared is BenchmarkAppendConcurrent with the metadata in
// PostgreSQL (a fresh database of the package's throw-away cluster, fsync
// on) through one engine.DB and through two sharing the database (two
// servers), against the same appends on bbolt (fsync on); appends/s is the
// aggregate throughput. The PostgreSQL cases skip, saying why, when no
// cluster can run here.
func BenchmarkAppendShared(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("bolt/writers=%d", n), func(b *testing.B) { suite.AppendConcurrent(b, n) })
		for _, servers := range []int{1, 2} {
			if servers > n {
				continue
			}
			b.Run(fmt.Sprintf("pg/servers=%d/writers=%d", servers, n), func(b *testing.B) {
				suite.AppendShared(b, func(tb testing.TB) string { return pgtest.URL(tb) }, n, servers)
			})
		}
	}
}
