package main

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// socketPeerPID returns the pid of the process listening on the unix
// socket at path (SO_PEERCRED of a connection to it), or 0 when it cannot
// be told.
func socketPeerPID(path string) int {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}
