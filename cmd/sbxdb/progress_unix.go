//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// fileColumns returns the width in columns of the terminal f is, or 0 when
// f is not a terminal.
func fileColumns(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	cols := 0
	rc.Control(func(fd uintptr) {
		if ws, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ); err == nil {
			cols = int(ws.Col)
		}
	})
	return cols
}
