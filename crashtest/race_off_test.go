//go:build !race

package crashtest

// defaultCycles is how many kill cycles go test runs (CI: ≥ 100).
const defaultCycles = 100
