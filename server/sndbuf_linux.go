package server

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// fitSendBuffer sizes the send buffer of unix socket c for a response
// body of n bytes. The kernel's default holds about 200 KiB, so a larger
// body goes out in turns with the client's reads, each turn a wake-up on
// both sides: a body of at most maxFitted bytes gets a buffer that holds
// it whole and is written in one go. A larger one streams through the
// default, which keeps what is in flight small enough for the caches. A
// body that fits the default leaves the buffer as it is; a failure too.
func fitSendBuffer(c net.Conn, n int64) {
	uc, ok := c.(*net.UnixConn)
	if !ok || n <= 256<<10 {
		return
	}
	// The kernel keeps twice the size set (the other half for its own
	// accounting), and gives a new socket the default as it is.
	size := int(n)
	if n > maxFitted {
		if size = defaultSendBuffer() / 2; size == 0 {
			return
		}
	}
	if raw, err := uc.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, size) })
	}
}

// defaultSendBuffer is the send buffer a new socket gets
// (net.core.wmem_default), or 0 when it cannot be read.
var defaultSendBuffer = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/net/core/wmem_default")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 0
	}
	return n
})
