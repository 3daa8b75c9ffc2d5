//go:build race

package crashtest

// defaultCycles is smaller under the race detector, which slows every
// child several times over; CI runs the full count without it.
const defaultCycles = 25
