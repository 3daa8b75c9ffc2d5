package server

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerPID returns the pid of the process at the other end of unix socket
// c (SO_PEERCRED: the process that connected, in this process's pid
// namespace), or 0 when it cannot be known.
func peerPID(c net.Conn) int {
	sc, ok := rawConn(c).(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil || err != nil || cred == nil || cred.Pid <= 0 {
		return 0
	}
	return int(cred.Pid)
}
