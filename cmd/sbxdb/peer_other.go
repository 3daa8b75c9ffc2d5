//go:build !linux

package main

// socketPeerPID returns 0: the listener's pid is only read on Linux.
func socketPeerPID(string) int { return 0 }
