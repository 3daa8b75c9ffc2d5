//go:build !unix

package server

// openFileLimit has no limit to read here.
func openFileLimit() uint64 { return DefaultMaxConns * 2 }
