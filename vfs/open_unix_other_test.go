//go:build unix && !linux

package vfs

import "testing"

// forEachOpenMode runs fn: off Linux paths are opened one component at a
// time only.
func forEachOpenMode(t *testing.T, fn func(t *testing.T)) { fn(t) }
