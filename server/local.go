package server

import (
	"context"
	"path/filepath"
	"time"

	"github.com/sbxdb/sbxdb/engine"
)

// LocalGrace is how long stopping a ServeLocal lets the other processes'
// requests in flight finish before it cancels them.
const LocalGrace = 5 * time.Second

// ServeLocal serves db to the other processes of this machine on the
// store's own socket, DIR/sbxdb.sock (engine.SocketName), where sbxdb serve
// listens by default and the CLI looks for a server: a process that holds
// a store (an embedding host, a CLI capture) answers the others' reads and
// writes (to other threads: the lease of a thread it writes keeps them off
// that one) instead of leaving them to find the store busy. The socket is
// made as Listen makes one: mode 0600, in a directory only its owner may
// enter. opts are as for New; a zero Grace is LocalGrace.
//
// It returns once the socket listens, with stop, which stops serving (the
// requests in flight get opts.Grace, then are cancelled), removes the
// socket and returns once no request is running: call it before closing
// db. When the socket cannot be made (another server answers there:
// ErrSocketInUse) nothing is served and the error says why.
func ServeLocal(db *engine.DB, opts Options) (stop func(), err error) {
	l, err := Listen("unix:" + filepath.Join(db.Dir(), engine.SocketName))
	if err != nil {
		return nil, err
	}
	if opts.Grace == 0 {
		opts.Grace = LocalGrace
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := New(db, opts)
	go func() {
		defer close(done)
		s.Serve(ctx, l) // its error is the listener's, once stopped: nothing to report
	}()
	return func() { cancel(); <-done }, nil
}
