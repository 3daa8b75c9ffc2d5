package server

import (
	"context"
	"net"
)

// connInfo is what the server knows of the connection a request came on.
type connInfo struct {
	// Unix is a unix-socket connection: a local user who could open the
	// socket (mode 0600), trusted with directories on this machine.
	Unix bool
	// PeerPID is the connecting process's pid (SO_PEERCRED) on a unix
	// socket, 0 where unknown.
	PeerPID int
}

type connKey struct{}

// ConnContext records what the server knows of c in ctx; an http.Server
// serving this Server must set it as its ConnContext.
func (s *Server) ConnContext(ctx context.Context, c net.Conn) context.Context {
	info := connInfo{}
	if _, ok := c.(*net.UnixConn); ok {
		info.Unix = true
	}
	return context.WithValue(ctx, connKey{}, info)
}

// connOf returns the connection information of a request's context; a
// request served without ConnContext (httptest) counts as TCP.
func connOf(ctx context.Context) connInfo {
	info, _ := ctx.Value(connKey{}).(connInfo)
	return info
}
