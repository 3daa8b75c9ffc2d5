package server

import (
	"net"
	"sync"
	"time"
)

// IdleExit watches the connections of a set of listeners and calls stop
// once none has been open for idle: at the start if no client connects,
// and after the last connection closes. A connection that opens before
// the time is up starts the wait over when it closes. sbxdb serve
// --idle-exit stops serving (gracefully, as on SIGTERM) with it, so that a
// server started for the processes that open a store exits once they have
// all gone.
type IdleExit struct {
	idle time.Duration
	stop func()

	mu      sync.Mutex
	open    int         // connections accepted and not yet closed
	timer   *time.Timer // running while open == 0 and not stopped
	stopped bool
}

// NewIdleExit returns a watch that calls stop (once) after idle without
// a connection, counting from Start.
func NewIdleExit(idle time.Duration, stop func()) *IdleExit {
	return &IdleExit{idle: idle, stop: stop}
}

// Start begins the wait, unless a connection is open already.
func (e *IdleExit) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.open == 0 && e.timer == nil && !e.stopped {
		e.timer = time.AfterFunc(e.idle, e.fire)
	}
}

// Listener returns l with its accepted connections counted.
func (e *IdleExit) Listener(l net.Listener) net.Listener { return &idleListener{Listener: l, e: e} }

// Open is the number of connections open now.
func (e *IdleExit) Open() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.open
}

func (e *IdleExit) fire() {
	e.mu.Lock()
	if e.open > 0 || e.stopped {
		e.mu.Unlock()
		return
	}
	e.stopped = true
	e.mu.Unlock()
	e.stop()
}

func (e *IdleExit) opened() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.open++
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
}

func (e *IdleExit) closed() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.open--; e.open == 0 && !e.stopped {
		e.timer = time.AfterFunc(e.idle, e.fire)
	}
}

type idleListener struct {
	net.Listener
	e *IdleExit
}

func (l *idleListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.e.opened()
	return &idleConn{Conn: c, e: l.e}, nil
}

// idleConn counts itself closed once, however often Close is called.
type idleConn struct {
	net.Conn
	e    *IdleExit
	once sync.Once
}

func (c *idleConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.e.closed)
	return err
}

// NetConn is the connection underneath, for ConnContext (rawConn).
func (c *idleConn) NetConn() net.Conn { return c.Conn }
