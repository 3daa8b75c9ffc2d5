package main

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb/engine"
)

// TestInterruptExit sends SIGINT to an sbxdb capture process waiting on
// its server: it exits 130, saying so (with --json as SBXDB_INTERRUPTED
// alone), having released the thread's writer lease and appended nothing.
func TestInterruptExit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	store, ws := captured(t, "cp1")
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := &gate{entered: make(chan struct{}, 1), released: make(chan struct{}, 2)}
	serveOnSocket(t, db, filepath.Join(store, socketName), func(h http.Handler) http.Handler { g.next = h; return g })

	for _, tc := range []struct {
		json           bool
		stdout, stderr string
	}{
		{false, "", "sbxdb: interrupted\n"},
		{true, `{"error":{"code":"SBXDB_INTERRUPTED","message":"interrupted"}}` + "\n", ""},
	} {
		args := []string{"capture", ws, "--db", store, "--thread", "main"}
		if tc.json {
			args = append(args, "--json")
		}
		cmd := sbxdbCmd(t, args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		<-g.entered // the capture is in the server, its lease held
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted || out.String() != tc.stdout || errOut.String() != tc.stderr {
			t.Errorf("interrupted capture (json %v): %v, stdout %q, stderr %q; want exit 130, %q, %q", tc.json, err, out.String(), errOut.String(), tc.stdout, tc.stderr)
		}
		writers, err := db.Writers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if w := writers["main"]; w.Held && w.Live(time.Now().UnixMilli()) {
			t.Errorf("the interrupted capture left its writer lease: %+v", w)
		}
		g.released <- struct{}{} // the server's half of the capture goes on, and fails
	}
	if head, err := db.Head(t.Context(), "main"); err != nil || head != "cp1" {
		t.Errorf("head after the interrupted captures: %q, %v; want cp1", head, err)
	}
}
