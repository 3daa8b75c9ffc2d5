package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/wire"
	"github.com/sbxdb/sbxdb/server"
)

// How a command finds a running sbxdb serve of its store.
const (
	// serverEnv names the environment variable that gives the server's
	// address when --server is not given.
	serverEnv = "SBXDB_SERVER"
	// tokenEnv names the environment variable holding the bearer token
	// sent to a TCP server.
	tokenEnv = "SBXDB_TOKEN"
)

// probeTimeout bounds the health request to DIR/sbxdb.sock: a socket that
// does not answer within it is taken for a stale one, and the command
// opens the store's files. serverTimeout bounds the one to an address the
// user named, which must answer. Tests change them.
var (
	probeTimeout  = time.Second
	serverTimeout = 5 * time.Second
)

// foundServer is a running sbxdb serve that answered the health request.
type foundServer struct {
	addr   string // unix:PATH, tcp:HOST:PORT or http://HOST:PORT
	client *client.Client
	health client.Health
}

// findServer returns the server the command works through, or nil when
// there is none and the command opens the store's files itself.
//
// The server is --server ADDR, else $SBXDB_SERVER: it must answer, and
// when --db or $SBXDB_DIR names a store it must be the one the server
// reports (its health names its store directory); without either, the
// server's store is the command's. Without an address, the server is the
// one listening on DIR/sbxdb.sock when it answers GET /v1/health within
// probeTimeout; a socket file nobody answers on is a server that died
// without removing it.
//
// A server on a unix socket is used only when the invoking user or root
// runs it, and DIR/sbxdb.sock only when it and DIR are safe from other
// users (peer_trust.go); any other is refused with an
// *untrustedServerError before a request is sent, even when the command
// could have opened the store's files instead.
func (inv *invocation) findServer() (*foundServer, error) {
	addr, named := inv.server, true
	if addr == "" {
		addr = os.Getenv(serverEnv)
	}
	if addr == "" {
		named = false
		sock := filepath.Join(inv.dir, socketName)
		if found, err := checkSocketFile(sock); !found {
			return nil, err
		}
		addr = "unix:" + sock
	}
	opts := &client.Options{}
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		opts.CheckPeer = checkPeer(path)
	} else {
		opts.Token = os.Getenv(tokenEnv)
	}
	c, err := client.New(addr, opts)
	if err != nil { // addr is no server address: a usage error
		from := "--server"
		if inv.server == "" {
			from = "$" + serverEnv
		}
		return nil, &usageError{err: reword(err, "%s: %s", from, strings.TrimPrefix(err.Error(), "client: "))}
	}
	timeout := probeTimeout
	if named {
		timeout = serverTimeout
	}
	ctx, cancel := context.WithTimeout(inv.ctx, timeout)
	h, err := c.Health(ctx)
	cancel()
	if errors.Is(err, sbxdb.ErrPoisoned) && h.Store != "" {
		// The server is there and serves reads: a write through it
		// says the store is poisoned.
		err = nil
	} else if err == nil && !h.OK {
		err = errors.New("its health is not ok")
	}
	if err != nil {
		c.Close()
		var refused *client.PeerError
		switch {
		case inv.ctx.Err() != nil:
			return nil, inv.ctx.Err()
		case errors.As(err, &refused):
			return nil, refused.Err // an untrusted server: never stale
		case !named:
			return nil, nil // a stale socket: no server
		}
		return nil, fmt.Errorf("server %s does not answer: %v", addr, err)
	}
	// A server is the store's only if its health names the store: one
	// that serves another store on DIR/sbxdb.sock (--listen) must never
	// take a command meant for DIR.
	if named && !inv.dirGiven {
		inv.dir = h.Store
	} else if !sameDir(inv.dir, h.Store) {
		c.Close()
		return nil, fmt.Errorf("server %s serves store %s, not %s", addr, h.Store, inv.dir)
	}
	return &foundServer{addr: addr, client: c, health: h}, nil
}

// sameDir reports whether a and b name the same directory: the same file
// when both exist, else the same absolute path.
func sameDir(a, b string) bool {
	if fa, err := os.Stat(a); err == nil {
		if fb, err := os.Stat(b); err == nil {
			return os.SameFile(fa, fb)
		}
	}
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ab
}

// refuseServer is the error of a command that needs the store's files to
// itself (command.exclusive) while a server holds them; nil when none
// does.
func (inv *invocation) refuseServer() error {
	srv, err := inv.findServer()
	if err != nil || srv == nil {
		return err
	}
	defer srv.client.Close()
	pid := ""
	if path, ok := strings.CutPrefix(srv.addr, "unix:"); ok {
		if n := socketPeerPID(path); n > 0 {
			pid = fmt.Sprintf(" (pid %d)", n)
		}
	}
	return reword(sbxdb.ErrLocked, "store %s is served by sbxdb serve%s at %s; stop it first", inv.dir, pid, srv.addr)
}

// open returns the store the command works on: the running server of the
// store when there is one (findServer), else the store's files
// (openStore).
func (inv *invocation) open() (store, error) {
	srv, err := inv.findServer()
	if err != nil {
		return nil, err
	}
	if srv != nil {
		inv.served = srv.addr
		return wrapStore(remoteStore{srv.client}), nil
	}
	db, err := inv.openStore()
	if err != nil {
		return nil, err
	}
	ls := localStore{DB: db}
	if inv.writes {
		// While this command holds the store for writing, the others
		// reach it through this process, as through sbxdb serve, rather
		// than finding it busy. Best effort: a socket that cannot be
		// made (another server answers there) serves nothing.
		ls.stopServing, _ = server.ServeLocal(db, server.Options{Version: version(), NoRecover: true})
	}
	return wrapStore(ls), nil
}

// wrapStore wraps every store a command opens: tests make it report what
// no real store does on demand.
var wrapStore = func(s store) store { return s }

// openStore opens the store's files, read-only unless the command writes
// (then creating the store if the command creates), and words the failures
// an operator meets: no store, or another process holding it. Only one
// process at a time can hold a store's files for writing, and none can
// read them meanwhile; the second one is told the store is busy, naming
// the holder, after lockTimeout.
func (inv *invocation) openStore() (*engine.DB, error) {
	if inv.writes && !inv.creates {
		// Only capture creates a store: gc or check --repair on a
		// mistyped path must say so, not make an empty store there.
		if err := needStore(inv); err != nil {
			return nil, err
		}
	}
	opts := engine.Options{ReadOnly: !inv.writes, LockTimeout: lockTimeout, Metadata: inv.metadata, Blobs: inv.blobs}
	if f, ok := inv.ctx.Value(serveFlagsKey{}).(*serveFlags); ok {
		opts.CacheSize = int64(f.cacheSize) // serve --cache-size
	}
	db, err := engine.Open(inv.dir, &opts)
	if err != nil {
		return nil, openError(inv, err)
	}
	if q := db.Blobs().QuarantinedAtOpen(); len(q) > 0 {
		fmt.Fprintf(inv.errOut, "warning: the database may be older than its blob files (see sbxdb check): moved %s it does not index into %s instead of deleting them: %s; sbxdb check --repair indexes them again\n",
			count(len(q), "file"), filepath.Join(inv.dir, engine.BlobDir, "quarantine"), strings.Join(q, ", "))
	}
	return db, nil
}

// serverError names the server in an error of its own, one the command
// cannot meet without a server: it was unreachable, refused the token or
// the directory, or was unavailable. Every other error reads as it does
// without a server.
func (inv *invocation) serverError(err error) error {
	if inv.served == "" {
		return err
	}
	if errors.Is(err, client.ErrUnreachable) {
		return fmt.Errorf("server %s: %w", inv.served, err)
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		switch ce.Code {
		case wire.CodeUnauthorized, wire.CodeForbidden, wire.CodeUnavailable:
			return fmt.Errorf("server %s: %w (%s)", inv.served, err, ce.Code)
		}
	}
	return err
}
