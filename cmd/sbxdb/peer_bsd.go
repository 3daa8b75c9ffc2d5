//go:build darwin || freebsd

package main

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerCred returns the uid of the process at the other end of conn
// (LOCAL_PEERCRED: the credentials the server had when it called listen,
// which it cannot forge). The pid is not told here: it is 0.
func peerCred(conn *net.UnixConn) (uid, pid int, err error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Xucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, cerr
	}
	return int(cred.Uid), 0, nil
}
