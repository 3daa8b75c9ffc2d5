package ui

import (
	"sync"
	"time"
)

// MaxGCRuns is how many gc and sweep runs GCRuns keeps.
const MaxGCRuns = 10

// GCRun is one gc or sweep the server performed.
type GCRun struct {
	At     time.Time // when it ended
	Kind   string    // "gc" or "sweep"
	DryRun bool
	// Err is why it failed; empty when it succeeded.
	Err string
	// Freed is the bytes it gave back (a dry run: would give back): the
	// gc's freed, the sweep's stored bytes of the blobs deleted.
	Freed int64
	// Checkpoints is how many checkpoints retention deleted (would
	// delete); always 0 for a sweep.
	Checkpoints int
}

// GCRuns keeps the last MaxGCRuns runs in memory, since the server
// started. The zero value is empty and ready; it is safe for concurrent
// use.
type GCRuns struct {
	mu   sync.Mutex
	runs [MaxGCRuns]GCRun
	n    int // runs added in all
}

// Add records r, forgetting the oldest run when MaxGCRuns are kept.
func (g *GCRuns) Add(r GCRun) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.runs[g.n%MaxGCRuns] = r
	g.n++
}

// Last returns the runs kept, the newest first.
func (g *GCRuns) Last() []GCRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]GCRun, 0, min(g.n, MaxGCRuns))
	for i := g.n - 1; i >= 0 && i >= g.n-MaxGCRuns; i-- {
		out = append(out, g.runs[i%MaxGCRuns])
	}
	return out
}
