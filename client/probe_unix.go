//go:build linux || darwin

package client

import (
	"net"
	"syscall"
)

// idleOpen reports whether the idle connection nc is open: a peek that
// does not wait finds nothing to read. End of file, data or an error mean
// that the connection is done with.
func idleOpen(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // done, whatever it found
	})
	return err == nil && open
}
