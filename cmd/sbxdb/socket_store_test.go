package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxdb/sbxdb/engine"
)

// TestDefaultSocketServingAnotherStore: a server answering on
// DIR/sbxdb.sock is the store's only if its health names DIR. One that
// serves another store there (sbxdb serve --db B --listen
// unix:A/sbxdb.sock) must not take the command: it works on DIR's files,
// or refuses naming both stores, as for a named server; it never reads or
// changes the other store.
func TestDefaultSocketServingAnotherStore(t *testing.T) {
	store := newStore(t)
	code, want, errOut := runArgs([]string{"threads", "--db", store})
	if code != 0 {
		t.Fatalf("threads: exit %d, %s", code, errOut)
	}
	other := filepath.Join(t.TempDir(), "other") // empty: no threads
	db, err := engine.Open(other, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	serveOnSocket(t, db, filepath.Join(store, socketName), nil)

	code, out, errOut := runArgs([]string{"threads", "--db", store})
	switch {
	case code == 0 && out == want:
	case code == 1 && strings.Contains(errOut, other):
	default:
		t.Errorf("threads --db %s with %s's server on its socket: exit %d, stdout:\n%s\nstderr %q\nwant its own threads:\n%s",
			store, other, code, out, errOut, want)
	}
}
