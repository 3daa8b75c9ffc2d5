package server_test

import (
	"net"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/server"
)

// TestIdleExit: stop is called once no connection has been open for the
// duration, never while one is, and only once.
func TestIdleExit(t *testing.T) {
	// Nobody connects: stop comes after the duration from Start.
	lonely := make(chan struct{})
	server.NewIdleExit(time.Millisecond, func() { close(lonely) }).Start()
	select {
	case <-lonely:
	case <-time.After(time.Minute):
		t.Fatal("not stopped a minute after Start with no connection")
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stopped := make(chan struct{}, 2)
	e := server.NewIdleExit(20*time.Millisecond, func() { stopped <- struct{}{} })
	il := e.Listener(l)
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := il.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// Two connections, one closed: one is still open, so no stop, however
	// long the wait.
	var clients []net.Conn
	var served []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		served = append(served, <-accepted)
	}
	if n := e.Open(); n != 2 {
		t.Errorf("Open = %d with two connections", n)
	}
	e.Start() // with connections open: no wait yet
	served[0].Close()
	served[0].Close() // counted once
	select {
	case <-stopped:
		t.Fatal("stopped with a connection open")
	case <-time.After(200 * time.Millisecond):
	}
	if n := e.Open(); n != 1 {
		t.Errorf("Open = %d with one connection", n)
	}
	served[1].Close()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("not stopped a minute after the last connection closed")
	}
	// Once: a connection and its close after the stop change nothing.
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	(<-accepted).Close()
	c.Close()
	for _, c := range clients {
		c.Close()
	}
	select {
	case <-stopped:
		t.Fatal("stopped twice")
	case <-time.After(100 * time.Millisecond):
	}
}
