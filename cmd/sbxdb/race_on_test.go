//go:build race

package main

// raceEnabled reports a build with the race detector, whose shadow memory
// multiplies a process's resident size: memory bounds are checked without
// it.
const raceEnabled = true
