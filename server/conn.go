package server

import (
	"context"
	"net"

	"github.com/sbxdb/sbxdb/internal/proc"
)

// connInfo is what the server knows of the connection a request came on.
type connInfo struct {
	// Unix is a unix-socket connection: a local user who could open the
	// socket (mode 0600), trusted with directories on this machine.
	Unix bool
	// PeerPID is the connecting process's pid (SO_PEERCRED) on a unix
	// socket, 0 where unknown.
	PeerPID int
	// Peer is the connecting process as a lease records its holder
	// (proc.Of(PeerPID), read when the connection was accepted, while the
	// process certainly ran); zero where PeerPID is unknown.
	Peer proc.Identity
	// Conn is the connection's socket, unwrapped (rawConn).
	Conn net.Conn
}

type connKey struct{}

// ConnContext records what the server knows of c in ctx; an http.Server
// serving this Server must set it as its ConnContext. A connection whose
// local address is a unix socket counts as one, wrapped or not; its peer
// is known where the platform tells (Linux: SO_PEERCRED).
func (s *Server) ConnContext(ctx context.Context, c net.Conn) context.Context {
	info := connInfo{Conn: rawConn(c)}
	if c.LocalAddr() != nil && c.LocalAddr().Network() == "unix" {
		info.Unix = true
		info.PeerPID = peerPID(c)
		info.Peer = proc.Of(info.PeerPID)
	}
	return context.WithValue(ctx, connKey{}, info)
}

// connOf returns the connection information of a request's context; a
// request served without ConnContext (httptest) counts as TCP.
func connOf(ctx context.Context) connInfo {
	info, _ := ctx.Value(connKey{}).(connInfo)
	return info
}

// rawConn unwraps c to the connection that holds the socket: c itself, or
// what a wrapper (tls.Conn, a limiting listener's conn) returns from
// NetConn.
func rawConn(c net.Conn) net.Conn {
	for range 8 {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	return c
}
