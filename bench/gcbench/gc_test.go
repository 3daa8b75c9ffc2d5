// Package gcbench measures garbage collection at full scale: a
// store whose checkpoints hold 1,000,000 blob references, with 10,000 or
// 100,000 more blobs that nothing references. Run it with
//
//	go test ./bench/gcbench -run '^$' -bench . -benchtime 1x -count 3 -timeout 60m
//
// Each benchmark builds its store outside the timer (about a minute). The
// bodies are in package bench/suite, shared with bench/cmd/sbxbench.
package gcbench

import (
	"fmt"
	"testing"

	"github.com/sbxdb/sbxdb/bench/suite"
)

var scale = suite.FullGC

// BenchmarkMark reads the marks: every referenced key with its count, from
// a store whose references are all folded, and from one where 36
// checkpoints of 10,000 keys each are pending (the costliest case).
func BenchmarkMark(b *testing.B) {
	for _, pending := range []bool{false, true} {
		name := "folded"
		if pending {
			name = "pending"
		}
		b.Run(name, func(b *testing.B) {
			suite.Mark(b, suite.NewGCStore(b, scale, scale.Churns()[0], pending, false))
		})
	}
}

// BenchmarkSweep is one sweep of the whole store: list every blob, read 1M
// references, check none is missing, delete the unreferenced ones. It
// reports keys examined per second and how long the sweep held the store's
// write lock, per million references.
func BenchmarkSweep(b *testing.B) {
	for _, churn := range scale.Churns() {
		b.Run(fmt.Sprintf("delete-%d", churn), func(b *testing.B) {
			suite.Sweep(b, func(b *testing.B) *suite.GCStore { return suite.NewGCStore(b, scale, churn, true, false) })
		})
	}
}

// BenchmarkCaptureDuringSweep captures a small workspace again and again
// (one file changed each time) into the same store, first alone and then
// while a sweep deleting 100,000 blobs runs, and reports the capture
// latencies of both.
func BenchmarkCaptureDuringSweep(b *testing.B) {
	churn := scale.Churns()[1]
	suite.CaptureDuringSweep(b, func(b *testing.B) *suite.GCStore { return suite.NewGCStore(b, scale, churn, false, true) })
}
