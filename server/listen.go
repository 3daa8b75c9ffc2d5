package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrSocketInUse reports a unix socket path where another server answers.
var ErrSocketInUse = errors.New("sbxdb: another server is listening on the socket")

// ParseAddr splits a listener address, "unix:PATH" or "tcp:HOST:PORT",
// into its network and address.
func ParseAddr(addr string) (network, address string, err error) {
	switch {
	case strings.HasPrefix(addr, "unix:"):
		network, address = "unix", strings.TrimPrefix(addr, "unix:")
		if address == "" {
			return "", "", fmt.Errorf("server: %q names no socket path", addr)
		}
	case strings.HasPrefix(addr, "tcp:"):
		network, address = "tcp", strings.TrimPrefix(addr, "tcp:")
		if _, port, err := net.SplitHostPort(address); err != nil || port == "" {
			return "", "", fmt.Errorf("server: %q is not tcp:HOST:PORT", addr)
		}
	default:
		return "", "", fmt.Errorf("server: address %q is neither unix:PATH nor tcp:HOST:PORT", addr)
	}
	return network, address, nil
}

// IsLoopback reports whether the host of a TCP address ("HOST:PORT") is
// this machine's loopback: "localhost" or an address of 127.0.0.0/8 or
// ::1. An empty host (every interface) and any other name are not.
func IsLoopback(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen opens the listener of addr (see ParseAddr).
//
// A unix socket is made with mode 0600 and is never reachable with looser
// permissions: it is bound inside a new directory of mode 0700 beside PATH,
// given its mode there, and renamed onto PATH. A socket file already at
// PATH is replaced when nothing answers a connection to it (a server that
// died left it); when a server answers, Listen fails with ErrSocketInUse,
// and any other file at PATH is left alone and refused. Closing the
// listener removes the socket file, unless another has replaced it since.
func Listen(addr string) (net.Listener, error) {
	network, address, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if network == "tcp" {
		return net.Listen("tcp", address)
	}
	return listenUnix(address)
}

func listenUnix(path string) (net.Listener, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if err := checkStale(path); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".sbxdb-")
	if err != nil {
		return nil, fmt.Errorf("server: making the socket %s: %w", path, err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("server: making the socket %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false) // the file moves; unixListener.Close removes it
	if err := os.Chmod(bound, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("server: making the socket %s: %w", path, err)
	}
	if err := os.Rename(bound, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("server: making the socket %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("server: making the socket %s: %w", path, err)
	}
	return &unixListener{UnixListener: l, path: path, file: fi}, nil
}

// checkStale returns nil when path is free for a new socket: nothing is
// there, or a socket nothing answers on.
func checkStale(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("server: %w", err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("server: %s exists and is not a socket; not replacing it", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	switch {
	case err == nil:
		c.Close()
		return fmt.Errorf("%w: %s", ErrSocketInUse, path)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, fs.ErrNotExist):
		return nil // stale: the rename replaces it
	}
	return fmt.Errorf("server: probing the socket %s: %w", path, err)
}

// unixListener is a listener made by Listen, which removes its socket file
// when closed.
type unixListener struct {
	*net.UnixListener
	path string
	file os.FileInfo // the socket file, to tell it from a replacement
	once sync.Once
	err  error
}

func (l *unixListener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.file) {
			os.Remove(l.path)
		}
	})
	return l.err
}

// String names the listener as an address Listen takes.
func (l *unixListener) String() string { return "unix:" + l.path }

// Addr returns the socket's address, its final path.
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// AddrString names a listener as an address Listen takes: unix:PATH or
// tcp:HOST:PORT (with the port the system chose for port 0).
func AddrString(l net.Listener) string {
	a := l.Addr()
	if a.Network() == "unix" {
		return "unix:" + a.String()
	}
	return a.Network() + ":" + a.String()
}

// cancelWait is how long Serve waits, once it has cancelled the requests
// still running, for them to answer before it closes their connections.
const cancelWait = 5 * time.Second

// Serve serves s on every listener until ctx is done or a listener fails,
// then shuts down (docs/API.md, Transport): it stops accepting, answers a
// request that arrives meanwhile with 503 SBXDB_UNAVAILABLE, lets the
// requests in flight finish for up to Options.Grace, then cancels the
// contexts of the rest, gives them up to cancelWait to answer (a
// cancelled write fails whole, SBXDB_UNAVAILABLE), closes every
// connection, and returns once every handler has returned, so that the
// caller may close the store. Every listener is closed by then, and so is
// every test store, its directory removed (Close). The result is nil when
// ctx ended the serving, else the listener's error or Close's.
func (s *Server) Serve(ctx context.Context, ls ...net.Listener) error {
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    1 << 20,
		IdleTimeout:       120 * time.Second,
		ConnContext:       s.ConnContext,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	if s.opts.Logger != nil {
		hs.ErrorLog = slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn)
	}
	errc := make(chan error, len(ls))
	for _, l := range ls {
		go func() { errc <- hs.Serve(s.conns.listener(l)) }()
	}
	var err error
	running := len(ls)
	select {
	case <-ctx.Done():
	case err = <-errc:
		running--
	}
	s.stopping.Store(true)
	if s.tests != nil {
		s.tests.stopping()
	}
	grace := s.opts.Grace
	if grace < 0 {
		grace = 0
	}
	sctx, scancel := context.WithTimeout(context.Background(), grace)
	defer scancel()
	if hs.Shutdown(sctx) != nil {
		cancel() // the requests still running see their context end
		cctx, ccancel := context.WithTimeout(context.Background(), cancelWait)
		defer ccancel()
		if hs.Shutdown(cctx) != nil {
			hs.Close()
		}
	}
	for ; running > 0; running-- {
		if e := <-errc; err == nil {
			err = e
		}
	}
	s.requests.wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}
