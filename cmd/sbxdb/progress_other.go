//go:build !unix

package main

import "os"

// fileColumns returns 0: the width is only asked on Unix, and the progress
// line assumes fallbackColumns elsewhere.
func fileColumns(*os.File) int { return 0 }
