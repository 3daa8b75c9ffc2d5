package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/lease"
)

// serveArgsEnv, set in a child run of this test binary, holds the JSON
// arguments of an `sbxdb serve` that TestServeChild runs in that process.
const serveArgsEnv = "SBXDB_TEST_SERVE_ARGS"

// TestServeChild is the server process of the serve tests: in a child run
// (serveArgsEnv set) it runs sbxdb serve as main does, and exits with its
// status. Otherwise it does nothing.
func TestServeChild(t *testing.T) {
	raw := os.Getenv(serveArgsEnv)
	if raw == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	if code := runContext(ctx, args, os.Stdout, os.Stderr); code != 0 {
		os.Exit(code)
	}
	// Exit 0 by returning: the test binary exits 0 once the test passes.
}

// serveProc is an `sbxdb serve` running in a child process.
type serveProc struct {
	cmd    *exec.Cmd
	addrs  []string // what it printed it listens on
	stderr *syncBuffer
	exited chan struct{} // closed once it exited; then code is set
	code   int
}

// startServe runs sbxdb serve with args in a child process and waits until
// it prints its n listeners. It is killed when the test ends if it still
// runs.
func startServe(t *testing.T, n int, args ...string) *serveProc {
	t.Helper()
	raw, _ := json.Marshal(append([]string{"serve"}, args...))
	p := &serveProc{stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestServeChild$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), serveArgsEnv+"="+string(raw))
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		for range lines {
		}
		<-p.exited
	})
	for len(p.addrs) < n {
		line, ok := <-lines
		addr, found := strings.CutPrefix(line, "listening on ")
		if !ok || !found {
			t.Fatalf("sbxdb serve %q printed %q (ended: %v); stderr:\n%s", args, line, !ok, p.stderr)
		}
		p.addrs = append(p.addrs, addr)
	}
	go func() {
		for range lines { // the child's last line, "PASS", and anything after
		}
	}()
	return p
}

// stop sends sig and returns the exit status.
func (p *serveProc) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	return p.code
}

// client returns a client of the server's listener i.
func (p *serveProc) client(t *testing.T, i int, token string) *client.Client {
	t.Helper()
	c, err := client.New(p.addrs[i], &client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// syncBuffer is a bytes.Buffer for a child's output, read while written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// serveInProcess runs sbxdb serve in this process, for a command line that
// must fail before it serves: a server that starts anyway is stopped after
// a minute.
func serveInProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code = runContext(ctx, append([]string{"serve"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestServeUsage(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	empty := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// 31 bytes once trimmed: one short.
	short := filepath.Join(dir, "short-token")
	if err := os.WriteFile(short, []byte("0123456789abcdef0123456789abcde\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string // the first line of stderr
	}{
		{[]string{"--listen", "tcp:127.0.0.1:0"}, 2, "sbxdb serve: --listen tcp:127.0.0.1:0: a TCP listener requires --token-file"},
		{[]string{"--listen", "tcp:0.0.0.0:0", "--token-file", token}, 2, "sbxdb serve: --listen tcp:0.0.0.0:0: the host is not a loopback address; --allow-remote allows it"},
		{[]string{"--listen", "tcp::7070", "--token-file", token}, 2, "sbxdb serve: --listen tcp::7070: the host is not a loopback address; --allow-remote allows it"},
		{[]string{"--listen", "/tmp/s.sock"}, 2, `sbxdb serve: --listen /tmp/s.sock: address "/tmp/s.sock" is neither unix:PATH nor tcp:HOST:PORT`},
		{[]string{"--log-format", "xml"}, 2, `sbxdb serve: --log-format "xml": want text or json`},
		{[]string{"--max-requests", "0"}, 2, "sbxdb serve: --max-requests 0: must be at least 1"},
		{[]string{"--grace", "-1s"}, 2, "sbxdb serve: --grace -1s: must not be negative"},
		{[]string{"extra"}, 2, `sbxdb serve: unexpected argument "extra"`},
		{[]string{"--server", "unix:/tmp/s.sock"}, 2, "sbxdb serve: --server names a server to work through; serve is the server"},
		{[]string{"--lisen", "unix:/tmp/s.sock"}, 2, "sbxdb serve: unknown flag: --lisen; did you mean --listen?"},
		{[]string{"--listen", "tcp:127.0.0.1:0", "--token-file", empty}, 2, "sbxdb serve: --token-file " + empty + ": the file holds no token"},
		{[]string{"--listen", "tcp:127.0.0.1:0", "--token-file", short}, 2, "sbxdb serve: --token-file " + short + ": the token is 31 bytes, fewer than 32; --new-token FILE makes one"},
		{[]string{"--listen", "tcp:127.0.0.1:0", "--token-file", token, "--new-token", filepath.Join(dir, "new")}, 2, "sbxdb serve: --token-file and --new-token: give one token"},
		{[]string{"--listen", "tcp:127.0.0.1:0", "--new-token", token}, 1, "sbxdb: --new-token: open " + token + ": file exists"},
		{[]string{"--max-conns", "-1"}, 2, "sbxdb serve: --max-conns -1: must be at least 1"},
		{[]string{"--listen", "tcp:127.0.0.1:0", "--token-file", filepath.Join(dir, "none")}, 1, "sbxdb: --token-file: open " + filepath.Join(dir, "none") + ": no such file or directory"},
		{[]string{"--allow-dirs", filepath.Join(dir, "none")}, 1, "sbxdb: --allow-dirs: stat " + filepath.Join(dir, "none") + ": no such file or directory"},
		{[]string{"--allow-dirs", token}, 1, "sbxdb: --allow-dirs " + token + ": not a directory"},
	} {
		code, out, errOut := serveInProcess(t, append(tc.args, "--db", store)...)
		first, rest, _ := strings.Cut(errOut, "\n")
		if code != tc.code || out != "" || first != tc.err || (code == 2) != strings.HasPrefix(rest, "usage: sbxdb serve ") {
			t.Errorf("serve %q: exit %d, stdout %q, stderr %q; want exit %d, %q", tc.args, code, out, errOut, tc.code, tc.err)
		}
		if _, err := os.Stat(store); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("serve %q made the store: %v", tc.args, err)
		}
	}
	// --json is global, but serve's output is a log: refused, as JSON.
	code, out, errOut := serveInProcess(t, "--json", "--db", store)
	if want := `{"error":{"code":"SBXDB_USAGE","message":"serve: --json does not apply to serve: --log-format json logs as JSON"}}` + "\n"; code != exitUsage || out != want || errOut != "" {
		t.Errorf("serve --json: exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, want)
	}
	if _, err := os.Stat(store); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("serve --json made the store: %v", err)
	}
}

// sbxdb serve listens on DIR/sbxdb.sock (mode 0600) by default, refuses a
// store another process holds and a socket where a server answers, and
// stops on SIGTERM, removing its socket.
func TestServe(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	sock := filepath.Join(store, socketName)
	p := startServe(t, 1, "--db", store)
	if p.addrs[0] != "unix:"+sock {
		t.Errorf("listens on %q, want unix:%s", p.addrs[0], sock)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v (%v), want mode 0600", fi.Mode(), err)
	}
	h, err := p.client(t, 0, "").Health(context.Background())
	if err != nil || !h.OK || h.Store != store || h.Format != engine.FormatVersion {
		t.Errorf("health %+v, %v", h, err)
	}

	defer func(d time.Duration) { lockTimeout = d }(lockTimeout)
	lockTimeout = 100 * time.Millisecond
	code, _, errOut := serveInProcess(t, "--db", store)
	if want := fmt.Sprintf("sbxdb: store %s is busy: held by another process (pid %d ", store, p.cmd.Process.Pid); code != exitBusy || !strings.HasPrefix(errOut, want) {
		t.Errorf("a second server of the store: exit %d, %q; want %q", code, errOut, want)
	}
	other := filepath.Join(t.TempDir(), "other")
	code, _, errOut = serveInProcess(t, "--db", other, "--listen", "unix:"+sock)
	if want := "sbxdb: another server is listening on the socket: " + sock + "\n"; code != 1 || !strings.HasSuffix(errOut, want) {
		t.Errorf("a server on a live socket: exit %d, %q; want %q", code, errOut, want)
	}

	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, p.stderr)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the socket outlived the server: %v", err)
	}
	for _, want := range []string{"msg=serving", `msg=request id=`, `route="GET /v1/health" status=200`, "msg=stopped"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, p.stderr)
		}
	}
}

// A TCP listener serves only requests with the token, /v1/health excepted;
// the unix socket beside it needs none.
func TestServeTCP(t *testing.T) {
	dir := t.TempDir()
	store, sock, token := filepath.Join(dir, "store"), filepath.Join(dir, "s.sock"), filepath.Join(dir, "token")
	const secret = "s3cret-s3cret-s3cret-s3cret-s3cret"
	if err := os.WriteFile(token, []byte("  "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, 2, "--db", store, "--listen", "tcp:127.0.0.1:0", "--listen", "unix:"+sock, "--token-file", token, "--log-format", "json")
	if !strings.HasPrefix(p.addrs[0], "tcp:127.0.0.1:") || p.addrs[1] != "unix:"+sock {
		t.Fatalf("listens on %q", p.addrs)
	}
	ctx := context.Background()
	if _, err := p.client(t, 0, "").Stats(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("stats on TCP without the token: %v", err)
	}
	if _, err := p.client(t, 0, secret).Stats(ctx); err != nil {
		t.Errorf("stats on TCP with the token: %v", err)
	}
	if _, err := p.client(t, 0, "").Health(ctx); err != nil {
		t.Errorf("health on TCP without the token: %v", err)
	}
	if _, err := p.client(t, 1, "").Stats(ctx); err != nil {
		t.Errorf("stats on the unix socket: %v", err)
	}
	if code := p.stop(t, os.Interrupt); code != 0 {
		t.Errorf("exit %d after SIGINT; stderr:\n%s", code, p.stderr)
	}
	var n int
	for _, line := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if m["msg"] == "request" {
			n++
		}
	}
	if n != 4 {
		t.Errorf("%d request lines, want 4:\n%s", n, p.stderr)
	}
}

// A socket a dead server left is replaced.
func TestServeReplacesAStaleSocket(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	p := startServe(t, 1, "--db", store)
	p.stop(t, syscall.SIGKILL)
	sock := filepath.Join(store, socketName)
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("the killed server left no socket: %v", err)
	}
	p = startServe(t, 1, "--db", store)
	if _, err := p.client(t, 0, "").Health(context.Background()); err != nil {
		t.Errorf("health after replacing the stale socket: %v", err)
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, p.stderr)
	}
}

// serveWorkspace writes the first n files of the tree under dir, each of
// size random bytes drawn from seed, so that a capture reads and stores
// them.
func serveWorkspace(t *testing.T, dir string, seed, n, size int) {
	t.Helper()
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	rng := rand.NewChaCha8(key)
	buf := make([]byte, size)
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%16), fmt.Sprintf("f%04d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		rng.Read(buf)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// serveLease takes the writer lease of thread "main" of store (creating
// the store) before a server opens it: the lease lives for the default
// 120 s, longer than a test runs.
func serveLease(t *testing.T, store string) lease.Writer {
	t.Helper()
	db, err := engine.Open(store, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := db.AcquireWriter(context.Background(), "main")
	if err != nil {
		t.Fatal(err)
	}
	return l.Writer
}

// serveCheck runs sbxdb check --verify-blobs on store, which must be
// clean, and returns the ids of thread main's checkpoints and its head.
func serveCheck(t *testing.T, store string) (ids map[string]bool, head string) {
	t.Helper()
	if code, out, errOut := cli(t, "check", "--verify-blobs", "--db", store); code != 0 {
		t.Fatalf("sbxdb check --verify-blobs: exit %d\n%s%s", code, out, errOut)
	}
	db, err := engine.Open(store, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cps, err := db.List(context.Background(), "main")
	if err != nil {
		t.Fatal(err)
	}
	ids = map[string]bool{}
	for _, cp := range cps {
		ids[cp.ID] = true
	}
	head, err = db.Head(context.Background(), "main")
	if err != nil {
		t.Fatal(err)
	}
	return ids, head
}

// A server killed with SIGKILL while it captures loses nothing it
// acknowledged and leaves a clean store; a new server replaces its socket.
// Each round captures new trees through a new server; every round but the
// first kills it during its third capture, after a random delay or at the
// first progress report, whichever comes first: while the tree is walked
// or read, during the commit, or between the commit and the result.
func TestServeKilledDuringCapture(t *testing.T) {
	rounds, files, size := 3, 400, 8<<10
	if testkit.Long(t) {
		rounds, files, size = 16, 1500, 16<<10
	}
	dir := t.TempDir()
	store, ws := filepath.Join(dir, "store"), filepath.Join(dir, "ws")
	w := serveLease(t, store)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	var acked []string
	lost := 0 // captures the kill stopped before they committed
	for round := range rounds {
		p := startServe(t, 1, "--db", store)
		c := p.client(t, 0, "")
		inFlight := ""
		for i := range 3 {
			id := fmt.Sprintf("r%d-%d", round, i)
			kill := func() {}
			// The capture to kill reads a whole new tree; the others a
			// few new files.
			if round == 0 && i == 0 || round > 0 && i == 2 {
				serveWorkspace(t, ws, round*10+i, files, size)
			} else {
				serveWorkspace(t, ws, round*10+i, 10, size)
			}
			if round > 0 && i == 2 {
				inFlight = id
				var once sync.Once
				kill = func() { once.Do(func() { p.cmd.Process.Signal(syscall.SIGKILL) }) }
				time.AfterFunc(time.Duration(rng.IntN(80))*time.Millisecond, kill)
			}
			_, err := c.Capture(context.Background(), client.CaptureRequest{Writer: w, Dir: ws, ID: id,
				Progress: func(sbxdb.Progress) { kill() }})
			switch {
			case err == nil:
				acked = append(acked, id)
			case inFlight != id:
				t.Fatalf("round %d: capture %s: %v", round, id, err)
			case !errors.Is(err, client.ErrUnreachable):
				t.Fatalf("round %d: capture %s when the server was killed: %v, want ErrUnreachable", round, id, err)
			}
		}
		if round == 0 {
			if code := p.stop(t, syscall.SIGTERM); code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
			}
		} else {
			<-p.exited
		}
		ids, head := serveCheck(t, store)
		for _, id := range acked {
			if !ids[id] {
				t.Fatalf("round %d (seed %d): acknowledged checkpoint %s is gone after the kill", round, seed, id)
			}
		}
		switch last := acked[len(acked)-1]; {
		case head == inFlight && inFlight != last:
			acked = append(acked, inFlight) // it committed before the kill
		case head != last:
			t.Fatalf("round %d (seed %d): head %q, want the last acknowledged %s or the one in flight %q", round, seed, head, last, inFlight)
		case inFlight != "" && inFlight != last:
			lost++
			if ids[inFlight] {
				t.Fatalf("round %d (seed %d): %s is stored but not the head", round, seed, inFlight)
			}
		}
	}
	t.Logf("%d kills, %d of them before the capture committed (seed %d)", rounds-1, lost, seed)
	// The last round killed its server: a new one replaces the stale socket.
	p := startServe(t, 1, "--db", store)
	if _, err := p.client(t, 0, "").Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
}

// SIGTERM during a capture (at its first progress report) lets it finish
// within --grace; with --grace 0 it is cancelled (the signal also comes
// after a random delay, which may fall before the request is accepted,
// while files are read or while the capture commits). Either way the
// server exits 0 and the store is clean, holding the checkpoint when it
// was acknowledged, and otherwise only when it committed before the
// cancellation reached it.
func TestServeTerminatedDuringCapture(t *testing.T) {
	for _, grace := range []string{"30s", "0"} {
		t.Run("grace="+grace, func(t *testing.T) {
			dir := t.TempDir()
			store, ws := filepath.Join(dir, "store"), filepath.Join(dir, "ws")
			w := serveLease(t, store)
			serveWorkspace(t, ws, 1, 600, 8<<10)
			p := startServe(t, 1, "--db", store, "--grace", grace)
			var once sync.Once
			term := func() { once.Do(func() { p.cmd.Process.Signal(syscall.SIGTERM) }) }
			if grace == "0" {
				time.AfterFunc(time.Duration(rand.IntN(60))*time.Millisecond, term)
			}
			var at *sbxdb.Progress // the first report
			res, err := p.client(t, 0, "").Capture(context.Background(), client.CaptureRequest{Writer: w, Dir: ws, ID: "cp1",
				Progress: func(pr sbxdb.Progress) {
					if at == nil {
						at = &pr
					}
					term()
				}})
			term()
			<-p.exited
			if p.code != 0 {
				t.Fatalf("exit %d after SIGTERM; stderr:\n%s", p.code, p.stderr)
			}
			if at == nil && grace != "0" {
				t.Fatalf("no progress report came, so no SIGTERM was sent during the capture: %+v, %v", res, err)
			}
			ids, head := serveCheck(t, store)
			switch {
			case err == nil && (res.Checkpoint.ID != "cp1" || head != "cp1"):
				t.Fatalf("capture acknowledged %+v, head %q", res.Checkpoint, head)
			case err != nil && grace != "0":
				t.Fatalf("capture within the grace: %v", err)
			case err != nil && !errors.Is(err, client.ErrUnreachable) && !errors.Is(err, client.ErrUnavailable):
				t.Fatalf("cancelled capture: %v, want ErrUnreachable or ErrUnavailable", err)
			case err != nil && (len(ids) == 1) != (head == "cp1"):
				t.Fatalf("after a failed capture: checkpoints %v, head %q", ids, head)
			}
			t.Logf("first progress report %+v; capture error %v", at, err)
		})
	}
}

// --new-token FILE makes FILE, mode 0600, holding 64 hex digits, and the
// server takes that token on TCP and no other.
func TestServeNewToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	p := startServe(t, 1, "--db", filepath.Join(dir, "store"), "--listen", "tcp:127.0.0.1:0", "--new-token", tokenFile)
	fi, err := os.Stat(tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token file: %v, %v; want mode 0600", fi, err)
	}
	b, err := os.ReadFile(tokenFile)
	token, found := strings.CutSuffix(string(b), "\n")
	if err != nil || !found || len(token) != 64 || strings.Trim(token, "0123456789abcdef") != "" {
		t.Fatalf("the token file holds %q (%v), want 64 hex digits and a newline", b, err)
	}
	ctx := context.Background()
	if _, err := p.client(t, 0, token).Stats(ctx); err != nil {
		t.Errorf("stats with the new token: %v", err)
	}
	if _, err := p.client(t, 0, token[:63]+"x").Stats(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("stats with another token: %v", err)
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, p.stderr)
	}
}
