package memstore_test

import (
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/server"
)

// serveEngine serves db with sbxdb serve's handler on a unix socket and
// returns the Go client of it, and a function that stops the server and
// closes the client (db stays open). The socket is in a directory of its
// own under os.TempDir(), whose path is short enough for sun_path.
func serveEngine(db *engine.DB) (sbxdb.Store, func(), error) {
	dir, err := os.MkdirTemp("", "sbxd")
	if err != nil {
		return nil, nil, err
	}
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	srv := server.New(db, server.Options{})
	hs := &http.Server{Handler: srv, ConnContext: srv.ConnContext}
	done := make(chan struct{})
	go func() { hs.Serve(ln); close(done) }() // ErrServerClosed once stopped
	c, err := client.New("unix:"+sock, nil)
	if err != nil {
		hs.Close()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() {
		hs.Close()
		<-done
		c.Close()
		os.RemoveAll(dir)
	}
	return c, stop, nil
}
