// Package bench holds the engine-core benchmarks of sbxdb as go-test
// benchmarks, for profiling one of them or running one alone. The bodies
// are in package bench/suite, shared with the one benchmark command
// (bench/cmd/sbxbench); these are thin wrappers.
//
// No benchmark asserts a speed: every ratio is read from a baseline
// measured in the same run.
package bench

import (
	"fmt"
	"testing"

	"github.com/sbxdb/sbxdb/bench/suite"
)

// TestRawBaselineMatchesEngine checks that the raw bbolt baselines write
// exactly the bytes the engine writes for the same checkpoints (see
// suite.CheckRawBaseline).
func TestRawBaselineMatchesEngine(t *testing.T) { suite.CheckRawBaseline(t) }

// BenchmarkRawBoltUpdate is the baseline of the serial append: one plain
// bbolt Update (fsync on) per op, the engine's bytes minus reference counts.
func BenchmarkRawBoltUpdate(b *testing.B) { suite.RawBoltUpdate(b) }

// BenchmarkRawBoltUpdateRefs is the diagnostic baseline with eager
// reference counts.
func BenchmarkRawBoltUpdateRefs(b *testing.B) { suite.RawBoltUpdateRefs(b) }

// BenchmarkRawBoltConcurrent is the baseline at N writers: N goroutines
// each writing its own chain with one plain bbolt Update per checkpoint.
func BenchmarkRawBoltConcurrent(b *testing.B) {
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("writers=%d", n), func(b *testing.B) { suite.RawBoltConcurrent(b, n) })
	}
}

// BenchmarkAppendSerial is one goroutine appending durably on its own
// thread, each checkpoint on the previous head.
func BenchmarkAppendSerial(b *testing.B) { suite.AppendSerial(b) }

// BenchmarkAppendConcurrent runs N goroutines, each appending durably to its
// own thread with its own lease; ns/op is wall time per append and
// appends/s the aggregate throughput.
func BenchmarkAppendConcurrent(b *testing.B) {
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("writers=%d", n), func(b *testing.B) { suite.AppendConcurrent(b, n) })
	}
}

// BenchmarkAppend1000Files is the serial durable append of a 1,000-file
// checkpoint, one file changing per append.
func BenchmarkAppend1000Files(b *testing.B) { suite.Append1000Files(b) }

// BenchmarkPaired alternates the raw, serial, 8- and 64-writer paths
// within each round and reports their rates and ratios.
func BenchmarkPaired(b *testing.B) { suite.Paired(b) }

// BenchmarkGetHead1000Files is Get of a thread's head checkpoint that has
// 1,000 file entries (the chain holds 20 such checkpoints).
func BenchmarkGetHead1000Files(b *testing.B) {
	db, head := suite.FilledStore(b, 20, 1000)
	suite.Get(b, db, head, 1000)
}

// BenchmarkList1000 is List of a thread of 1,000 small checkpoints (10
// files, 2 messages each).
func BenchmarkList1000(b *testing.B) {
	db, _ := suite.FilledStore(b, 1000, suite.SmallFiles)
	suite.List(b, db, 1000)
}

// BenchmarkAppendServed is BenchmarkAppendConcurrent through sbxdb serve's
// API on a unix socket, N clients each appending to its own thread.
func BenchmarkAppendServed(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) { suite.AppendServed(b, n) })
	}
}

// BenchmarkBlob puts and gets 1 MiB and 64 MiB blobs in process and
// through the socket.
func BenchmarkBlob(b *testing.B) {
	for _, mib := range []int{1, 64} {
		for _, served := range []bool{false, true} {
			b.Run(fmt.Sprintf("put/MiB=%d/served=%v", mib, served), func(b *testing.B) { suite.BlobPut(b, mib<<20, served) })
			b.Run(fmt.Sprintf("get/MiB=%d/served=%v", mib, served), func(b *testing.B) { suite.BlobGet(b, mib<<20, served) })
		}
	}
}
