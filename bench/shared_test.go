package bench

import (
	"fmt"
	"testing"

	"github.com/sbxdb/sbxdb/bench/suite"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
	"github.com/sbxdb/sbxdb/internal/testkit/s3test"
)

// TestMain stops the throw-away PostgreSQL cluster of the shared-metadata
// benchmarks, if one was started, when the binary ends.
func TestMain(m *testing.M) { pgtest.Main(m) }

// BenchmarkAppendShared is BenchmarkAppendConcurrent with the metadata in
// PostgreSQL (a fresh database of the package's throw-away cluster, fsync
// on) through one engine.DB and through two sharing the database and a
// bucket (two servers, as the README's "Scaling out" runs them; versitygw
// on loopback), against the same appends on bbolt (fsync on); appends/s is
// the aggregate throughput. The PostgreSQL cases skip, saying why, when no
// cluster can run here, and the two-server cases when no S3 server can.
func BenchmarkAppendShared(b *testing.B) {
	one := suite.Shared{Metadata: pgtest.URL}
	two := one
	if _, err := s3test.Find(); err == nil {
		srv := s3test.Start(b)
		s3test.Env(b, srv)
		two.Blobs = func(testing.TB) string { return "s3://" + s3test.Bucket() + "/blobs" }
	}
	shared := map[int]suite.Shared{1: one, 2: two}
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("bolt/writers=%d", n), func(b *testing.B) { suite.AppendConcurrent(b, n) })
		for _, servers := range []int{1, 2} {
			if servers > n {
				continue
			}
			b.Run(fmt.Sprintf("pg/servers=%d/writers=%d", servers, n), func(b *testing.B) {
				suite.AppendShared(b, shared[servers], n, servers)
			})
		}
	}
}
