//go:build !race

package engine_test

// raceEnabled reports a build with the race detector, which makes the
// full-size cases of limits_test.go take minutes instead of seconds.
const raceEnabled = false
