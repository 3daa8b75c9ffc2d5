//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The peer tests run a fake sbxdb server, a child process of the test
// binary (TestPeerFakeServerProcess) that answers GET /v1/health with the
// store the test names, as root or as nobody (uid 65534, through setpriv).
// It prints "READY" once it listens, then "REQ METHOD PATH" for each
// request before it answers: once a CLI run has returned, every request it
// sent is in the child's output.
const (
	fakeSockEnv  = "SBXDB_TEST_FAKE_SERVER_SOCKET"
	fakeStoreEnv = "SBXDB_TEST_FAKE_SERVER_STORE"
	nobodyUID    = 65534
	fakeSecret   = "hunter2-fake-server-secret"
)

// TestPeerFakeServerProcess is the fake server when the peer tests run the
// test binary as one; otherwise it has nothing to do.
func TestPeerFakeServerProcess(t *testing.T) {
	sock := os.Getenv(fakeSockEnv)
	if sock == "" {
		t.Skip("only runs as the fake server process of the peer tests")
	}
	store := os.Getenv(fakeStoreEnv)
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println("LISTEN", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	fmt.Println("READY")
	http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		fmt.Printf("REQ %s %s secret=%v\n", r.Method, r.URL.Path, strings.Contains(string(body), fakeSecret))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/health" {
			json.NewEncoder(w).Encode(map[string]any{"ok": true, "version": "fake", "format": 1, "store": store})
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"code":"SBXDB_INTERNAL","message":"a fake server"}}`)
	}))
}

// needRootAndSetpriv skips t where the peer tests cannot run (not root, no
// setpriv), and fails it instead when $CI is set.
func needRootAndSetpriv(t *testing.T) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root (to run a server as another user)"
	} else if _, err := exec.LookPath("setpriv"); err != nil {
		missing = "setpriv: " + err.Error()
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("the peer tests need %s, which CI must provide", missing)
	}
	t.Skipf("the peer tests need %s", missing)
}

// peerFixture is a directory tree others can reach: bin holds the test
// binary, nobody is a directory of uid 65534.
type peerFixture struct {
	exe    string // the test binary, executable by nobody
	nobody string // a directory owned by nobody, mode 0755
}

func newPeerFixture(t *testing.T) *peerFixture {
	t.Helper()
	base, err := os.MkdirTemp("", "sbxdb-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(base, 0o755))
	self, err := os.Executable()
	must(err)
	exe := filepath.Join(base, "sbxdb.test")
	if os.Link(self, exe) != nil {
		b, err := os.ReadFile(self)
		must(err)
		must(os.WriteFile(exe, b, 0o755))
	}
	must(os.Chmod(exe, 0o755))
	nobody := filepath.Join(base, "nobody")
	must(os.Mkdir(nobody, 0o755))
	must(os.Chown(nobody, nobodyUID, nobodyUID))
	return &peerFixture{exe: exe, nobody: nobody}
}

// fakeServer is a running fake server process.
type fakeServer struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

// startFake starts a fake server on sock answering that it serves store,
// run by nobody when asNobody, else by root.
func (f *peerFixture) startFake(t *testing.T, sock, store string, asNobody bool) *fakeServer {
	t.Helper()
	args := []string{f.exe, "-test.run=^TestPeerFakeServerProcess$"}
	if asNobody {
		args = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), fakeSockEnv+"="+sock, fakeStoreEnv+"="+store)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fs := &fakeServer{cmd: cmd, out: bufio.NewReader(stdout)}
	t.Cleanup(func() { fs.stop() })
	line, err := fs.out.ReadString('\n')
	if strings.TrimSpace(line) != "READY" {
		fs.stop()
		t.Fatalf("the fake server did not start: %q, %v", line, err)
	}
	return fs
}

func (fs *fakeServer) stop() {
	fs.cmd.Process.Kill()
	fs.cmd.Wait()
}

// requests stops the server and returns the requests it received.
func (fs *fakeServer) requests(t *testing.T) []string {
	t.Helper()
	fs.cmd.Process.Kill()
	rest, _ := io.ReadAll(fs.out)
	fs.cmd.Wait()
	var reqs []string
	for _, l := range strings.Split(string(rest), "\n") {
		if r, ok := strings.CutPrefix(l, "REQ "); ok {
			reqs = append(reqs, r)
		}
	}
	return reqs
}

// captureThrough runs sbxdb capture of a new workspace with --secret-env,
// with args added, and returns how it ended.
func captureThrough(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv(serverEnv, "")
	t.Setenv("SBXDB_TEST_SECRET", fakeSecret)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "env"), []byte("KEY="+fakeSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return runArgs(append([]string{"capture", ws, "--thread", "main", "--secret-env", "SBXDB_TEST_SECRET"}, args...))
}

// wantRefused checks that a capture was refused for reason, and that the
// fake server got no request: none carried the secret, and no checkpoint
// id was printed.
func wantRefused(t *testing.T, fs *fakeServer, code int, stdout, stderr, sock, reason string) {
	t.Helper()
	t.Logf("stderr: %s", stderr)
	reqs := fs.requests(t)
	if len(reqs) != 0 {
		t.Errorf("the untrusted server received %q", reqs)
	}
	if code != exitError || stdout != "" {
		t.Errorf("exit %d, stdout %q; want 1 and nothing", code, stdout)
	}
	if !strings.Contains(stderr, "refusing the server at unix:"+sock) || !strings.Contains(stderr, reason) ||
		!strings.Contains(stderr, "only a server run by root is used") || !strings.Contains(stderr, "nothing was sent to it") {
		t.Errorf("stderr %q: want the refusal of %s naming %q", stderr, sock, reason)
	}
}

// TestServerOfAnotherUserRefused: a server run by another user, found at
// DIR/sbxdb.sock or named with --server or $SBXDB_SERVER, gets no request
// from the CLI, not even one that root runs.
func TestServerOfAnotherUserRefused(t *testing.T) {
	needRootAndSetpriv(t)
	f := newPeerFixture(t)

	t.Run("store directory of another user", func(t *testing.T) {
		dir := f.nobody
		sock := filepath.Join(dir, socketName)
		fs := f.startFake(t, sock, dir, true)
		defer os.Remove(sock)
		code, stdout, stderr := captureThrough(t, "--db", dir)
		wantRefused(t, fs, code, stdout, stderr, sock, "the socket is owned by uid 65534 (nobody)")
	})

	// The socket and the directory pass every file check: only the
	// connection's peer credentials tell whose server it is.
	t.Run("socket moved into the user's directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "store")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		bound := filepath.Join(f.nobody, "moved.sock")
		fs := f.startFake(t, bound, dir, true)
		sock := filepath.Join(dir, socketName)
		if err := os.Rename(bound, sock); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(sock, 0, 0); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := captureThrough(t, "--db", dir)
		wantRefused(t, fs, code, stdout, stderr, sock, "runs as uid 65534 (nobody)")
	})

	for _, how := range []string{"--server", "$" + serverEnv} {
		t.Run("named with "+how, func(t *testing.T) {
			sock := filepath.Join(f.nobody, "named.sock")
			fs := f.startFake(t, sock, f.nobody, true)
			defer os.Remove(sock)
			var code int
			var stdout, stderr string
			if how == "--server" {
				code, stdout, stderr = captureThrough(t, "--server", "unix:"+sock)
			} else {
				t.Setenv(serverEnv, "unix:"+sock)
				t.Setenv("SBXDB_TEST_SECRET", fakeSecret)
				ws := t.TempDir()
				code, stdout, stderr = runArgs([]string{"capture", ws, "--thread", "main", "--secret-env", "SBXDB_TEST_SECRET"})
			}
			wantRefused(t, fs, code, stdout, stderr, sock, "runs as uid 65534 (nobody)")
		})
	}
}

// TestServerSocketFileChecks: DIR/sbxdb.sock of a server root runs is
// refused in a directory others can write to, and as a symbolic link; the
// same server in a directory of mode 0700 gets the capture request (which
// shows that the fake server records what the CLI sends).
func TestServerSocketFileChecks(t *testing.T) {
	needRootAndSetpriv(t)
	f := newPeerFixture(t)
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, socketName)

	for _, mode := range []os.FileMode{0o777, 0o770, 0o702} {
		t.Run(fmt.Sprintf("directory mode %o", mode), func(t *testing.T) {
			fs := f.startFake(t, sock, dir, false)
			defer os.Remove(sock)
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(dir, 0o700)
			code, stdout, stderr := captureThrough(t, "--db", dir)
			wantRefused(t, fs, code, stdout, stderr, sock, "its directory "+dir+" (owned by uid 0 (root)) is writable by its group or others")
		})
	}

	t.Run("symbolic link", func(t *testing.T) {
		target := filepath.Join(f.nobody, "target.sock")
		fs := f.startFake(t, target, dir, false)
		defer os.Remove(target)
		if err := os.Symlink(target, sock); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(sock)
		code, stdout, stderr := captureThrough(t, "--db", dir)
		wantRefused(t, fs, code, stdout, stderr, sock, "it is a symbolic link (to "+target+"), not a socket")
	})

	t.Run("trusted", func(t *testing.T) {
		fs := f.startFake(t, sock, dir, false)
		defer os.Remove(sock)
		code, _, stderr := captureThrough(t, "--db", dir)
		reqs := fs.requests(t)
		if code == exitOK || strings.Contains(stderr, "refusing") {
			t.Errorf("exit %d, stderr %q; want the fake server's failure", code, stderr)
		}
		if len(reqs) < 2 || reqs[0] != "GET /v1/health secret=false" {
			t.Fatalf("the trusted fake server received %q; want the health request, then the command's", reqs)
		}
	})
}
