package server

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func sendBuffer(t *testing.T, c net.Conn) int {
	t.Helper()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if cerr := raw.Control(func(fd uintptr) { n, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF) }); cerr != nil || err != nil {
		t.Fatal(cerr, err)
	}
	return n
}

// A GET body of up to maxFitted bytes gets a send buffer that holds it
// whole; a larger one gets the default back; a small one leaves it be.
func TestFitSendBuffer(t *testing.T) {
	if defaultSendBuffer() == 0 {
		t.Skip("net.core.wmem_default is not readable")
	}
	dir, err := os.MkdirTemp("", "sbxs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	def := sendBuffer(t, c)
	fitSendBuffer(c, 100<<10)
	if got := sendBuffer(t, c); got != def {
		t.Errorf("after a 100 KiB body: %d, want the default %d", got, def)
	}
	fitSendBuffer(c, maxFitted)
	if got := sendBuffer(t, c); got < maxFitted {
		t.Errorf("after a %d-byte body: %d, want at least that", maxFitted, got)
	}
	fitSendBuffer(c, 100<<10)
	if got := sendBuffer(t, c); got < maxFitted {
		t.Errorf("a small body changed the buffer to %d", got)
	}
	fitSendBuffer(c, 64<<20)
	if got := sendBuffer(t, c); got != def {
		t.Errorf("after a 64 MiB body: %d, want the default %d", got, def)
	}
}
