package bench

import (
	"testing"

	"github.com/sbxdb/sbxdb/bench/suite"
)

// BenchmarkChunkedThread is the chunked-metadata scenario: a thread of 200
// checkpoints of a 20,000-file workspace, 1% of files changed and two 2 KB
// messages added by each (see suite.ChunkedThread for its metrics). Run it
// with -benchtime=1x: one iteration appends 200 checkpoints twice.
func BenchmarkChunkedThread(b *testing.B) { suite.ChunkedThread(b) }
