//go:build !race

package crashtest

// defaultCycles is how many kill cycles go test runs; SBXDB_LONG=1 runs
// longCycles, SBXDB_LONG=2 exhaustiveCycles.
const defaultCycles = 50
