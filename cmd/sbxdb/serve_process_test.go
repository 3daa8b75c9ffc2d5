package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/proc"
	"github.com/sbxdb/sbxdb/internal/testkit/pgtest"
	"github.com/sbxdb/sbxdb/server"
)

// childEnv makes the test binary run as the sbxdb command (TestMain), so
// that the process-level tests run sbxdb serve and the CLI as processes
// of their own without building them.
const childEnv = "SBXDB_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		main()
	}
	pgtest.Main(m)
}

// sbxdbCmd returns the command sbxdb args, run by the test binary.
func sbxdbCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1", serverEnv+"=", dirEnv+"=")
	return cmd
}

// result is how a child sbxdb ended.
type result struct {
	code           int
	stdout, stderr string
}

// runChild runs sbxdb args in a child process and returns how it ended.
func runChild(t *testing.T, args ...string) result {
	t.Helper()
	cmd := sbxdbCmd(t, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, isExit := err.(*exec.ExitError); isExit {
		code = ee.ExitCode()
	} else if err != nil {
		t.Errorf("sbxdb %s: %v", strings.Join(args, " "), err) // not Fatal: runChild runs in goroutines too
		code = -1
	}
	return result{code, out.String(), errOut.String()}
}

// TestServeProcesses runs sbxdb serve and sbxdb commands as processes:
// captures into different threads run at once, threads answers while a
// capture runs, a thread whose lease another client holds is
// WRITER_CONFLICT as without a server, and compact refuses to run, naming
// the server's pid.
func TestServeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	store, _ := captured(t, "cp1")
	serve := startServe(t, 1, "--db", store)

	// Two captures into different threads at once, and threads polled
	// meanwhile: all succeed (without a server, the second writer and
	// every reader would wait for the store and may fail as busy).
	wsA, wsB := t.TempDir(), t.TempDir()
	serveWorkspace(t, wsA, 1, 400, 32<<10)
	serveWorkspace(t, wsB, 2, 400, 32<<10)
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i, ws := range []string{wsA, wsB} {
		wg.Go(func() {
			results[i] = runChild(t, "capture", ws, "--db", store, "--thread", fmt.Sprintf("t%d", i), "--id", fmt.Sprintf("big%d", i))
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	polls, sawLive := 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		r := runChild(t, "threads", "--db", store, "--json")
		polls++
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("threads during the captures: exit %d, stderr %q", r.code, r.stderr)
		}
		for _, row := range decode[[]threadRow](t, r.stdout) {
			if strings.HasPrefix(row.ThreadID, "t") && row.Writer.State == "live" {
				sawLive++
			}
		}
	}
	t.Logf("threads answered %d times during the captures, %d times showing a capture's live lease", polls, sawLive)
	for i, r := range results {
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, fmt.Sprintf("captured big%d on thread t%d: 400 files", i, i)) {
			t.Errorf("capture %d: exit %d, stdout %q, stderr %q", i, r.code, r.stdout, r.stderr)
		}
	}
	th := decode[[]threadRow](t, runChild(t, "threads", "--db", store, "--json").stdout)
	if len(th) != 3 || th[1].ThreadID != "t0" || deref(th[1].HeadID) != "big0" || th[2].ThreadID != "t1" || deref(th[2].HeadID) != "big1" {
		t.Errorf("threads after the captures: %+v", th)
	}

	// Another client holds the lease of thread held.
	c, err := client.New("unix:"+filepath.Join(store, socketName), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.AcquireWriter(t.Context(), "held")
	if err != nil {
		t.Fatal(err)
	}
	r := runChild(t, "capture", wsA, "--db", store, "--thread", "held")
	want := `sbxdb: SANDBOX_SNAPSHOT_WRITER_CONFLICT: thread "held" has a live writer (fence 1) held by ` + proc.Self().String() + " until "
	if r.code != exitBusy || r.stdout != "" || !strings.HasPrefix(r.stderr, want) || !strings.HasSuffix(r.stderr, "; if that writer is gone, `sbxdb unlock held` frees the thread\n") {
		t.Errorf("capture into a held thread: exit %d, stdout %q, stderr %q; want exit 11 and %q…", r.code, r.stdout, r.stderr, want)
	}
	if head, err := c.Head(t.Context(), "held"); err != nil || head != "" {
		t.Errorf("the refused capture appended: head %q, %v", head, err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	// compact and migrate need the store to themselves.
	for _, cmd := range []string{"compact", "migrate"} {
		r := runChild(t, cmd, "--db", store)
		want := fmt.Sprintf("sbxdb: store %s is served by sbxdb serve (pid %d) at unix:%s; stop it first\n", store, serve.cmd.Process.Pid, filepath.Join(store, socketName))
		if r.code != exitBusy || r.stdout != "" || r.stderr != want {
			t.Errorf("%s while served: exit %d, stdout %q, stderr %q; want exit 11 and %q", cmd, r.code, r.stdout, r.stderr, want)
		}
	}
}

// gate is a handler that holds every POST /v1/capture until released, so
// that a test can act while a capture is under way.
type gate struct {
	next     http.Handler
	entered  chan struct{}
	released chan struct{}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/capture" {
		g.entered <- struct{}{}
		<-g.released
	}
	g.next.ServeHTTP(w, r)
}

// serveOnSocket serves db on a unix socket at sock through h (nil: the
// server itself) until the test ends.
func serveOnSocket(t *testing.T, db *engine.DB, sock string, wrap func(http.Handler) http.Handler) {
	t.Helper()
	srv := server.New(db, server.Options{})
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ConnContext: srv.ConnContext}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
}

// TestThreadsDuringACapture: while a capture through the server is under
// way (its lease held, its request in the server), the other commands
// answer at once and see its live lease.
func TestThreadsDuringACapture(t *testing.T) {
	store, ws := captured(t, "cp1")
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := &gate{entered: make(chan struct{}, 1), released: make(chan struct{})}
	serveOnSocket(t, db, filepath.Join(store, socketName), func(h http.Handler) http.Handler { g.next = h; return g })

	captureDone := make(chan result, 1)
	go func() {
		code, out, errOut := runArgs([]string{"capture", ws, "--db", store, "--thread", "main", "--id", "cp2"})
		captureDone <- result{code, out, errOut}
	}()
	<-g.entered
	th := decode[[]threadRow](t, ok(t, "threads", "--db", store, "--json"))
	if len(th) != 1 || th[0].ThreadID != "main" || th[0].Writer.State != "live" || deref(th[0].HeadID) != "cp1" {
		t.Errorf("threads during the capture: %+v", th)
	}
	if out := ok(t, "show", "cp1", "--db", store); !strings.HasPrefix(out, "checkpoint  cp1\n") {
		t.Errorf("show during the capture:\n%s", out)
	}
	// The thread is the capture's: another capture into it is refused.
	msg := failWith(t, exitBusy, "capture", ws, "--db", store, "--thread", "main", "--id", "cp3")
	if want := `sbxdb: SANDBOX_SNAPSHOT_WRITER_CONFLICT: thread "main" has a live writer (fence 2) held by ` + proc.Self().String(); !strings.HasPrefix(msg, want) {
		t.Errorf("a second capture into the thread: %q, want %q…", msg, want)
	}
	close(g.released)
	r := <-captureDone
	if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "captured cp2 on thread main: ") {
		t.Errorf("the capture: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if cp, err := db.Get(t.Context(), "cp2"); err != nil || cp == nil || cp.ParentID != "cp1" {
		t.Errorf("cp2: %+v, %v", cp, err)
	}
}

// TestNamedServerStore: a server named by --server serves the store --db
// names, or the command fails; without --db the server's store is the
// command's.
func TestNamedServerStore(t *testing.T) {
	store := newStore(t)
	other := newStore(t)
	want := ok(t, "threads", "--db", store)
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sock := filepath.Join(t.TempDir(), "s.sock")
	serveOnSocket(t, db, sock, nil)
	addr := "unix:" + sock

	if out := ok(t, "threads", "--server", addr); out != want {
		t.Errorf("threads --server without --db:\n%s\nwant:\n%s", out, want)
	}
	if out := ok(t, "threads", "--server", addr, "--db", store); out != want {
		t.Errorf("threads --server --db of its store:\n%s\nwant:\n%s", out, want)
	}
	before := ok(t, "threads", "--db", other)
	t.Setenv(serverEnv, addr)
	if out := ok(t, "threads"); out != want {
		t.Errorf("threads with $%s:\n%s\nwant:\n%s", serverEnv, out, want)
	}
	for _, args := range [][]string{{"threads"}, {"unlock", "main"}} {
		msg := fail(t, append(args, "--db", other)...)
		if want := fmt.Sprintf("sbxdb: server %s serves store %s, not %s\n", addr, store, other); msg != want {
			t.Errorf("%s --db of another store: %q, want %q", args[0], msg, want)
		}
	}
	t.Setenv(serverEnv, "")
	if after := ok(t, "threads", "--db", other); after != before {
		t.Errorf("refused commands changed the other store:\n%s\nwas:\n%s", after, before)
	}
	if cps, err := db.List(t.Context(), "main"); err != nil || len(cps) != len(fixture) {
		t.Errorf("the served store: %d checkpoints, %v", len(cps), err)
	}
}

// TestServerOverTCP: a TCP server is sent $SBXDB_TOKEN, and the commands
// work through it as through a socket; without the right token every
// command fails, naming the server; capture of a directory the listener
// may not touch is SBXDB_FORBIDDEN and leaves the thread as it was.
func TestServerOverTCP(t *testing.T) {
	store, ws := captured(t, "cp1")
	want := ok(t, "threads", "--db", store)
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv := server.New(db, server.Options{Token: "s3cret"}) // not through serve: no length to meet
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, ConnContext: srv.ConnContext}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	addr := "tcp:" + l.Addr().String()

	t.Setenv(tokenEnv, "s3cret")
	if out := ok(t, "threads", "--server", addr, "--db", store); out != want {
		t.Errorf("threads over TCP:\n%s\nwant:\n%s", out, want)
	}
	msg := fail(t, "capture", ws, "--server", addr, "--thread", "main", "--id", "cp2")
	if want := "sbxdb: server " + addr + ": capture of " + ws + ": this listener may touch no directory (SBXDB_FORBIDDEN)\n"; msg != want {
		t.Errorf("capture over TCP without --allow-dirs: %q, want %q", msg, want)
	}
	if out := ok(t, "threads", "--server", addr); out != want {
		t.Errorf("threads after the refused capture:\n%s\nwant:\n%s", out, want)
	}
	for _, token := range []string{"", "wrong"} {
		t.Setenv(tokenEnv, token)
		msg := fail(t, "threads", "--server", addr)
		if want := "sbxdb: server " + addr + ": a valid bearer token is required (SBXDB_UNAUTHORIZED)\n"; msg != want {
			t.Errorf("token %q: %q, want %q", token, msg, want)
		}
	}
}
