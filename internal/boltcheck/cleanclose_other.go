//go:build !linux

package boltcheck

import "os"

// StatOf reports false: elsewhere than on Linux no clean close is recorded
// or trusted, and every Open verifies every page.
func StatOf(os.FileInfo) (FileStat, bool) { return FileStat{}, false }
