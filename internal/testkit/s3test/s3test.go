// Package s3test runs a real S3 server for tests: versitygw over a
// temporary directory, on a free loopback port, stopped when the test ends.
//
// The binary is found through $SBXDB_VERSITYGW, else $PATH, else
// $(go env GOPATH)/bin; install.sh in this directory builds it. Without it a
// test skips, saying why, unless $CI is set, where it fails: CI must never
// pass by skipping the S3 tests.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary is the server's executable name.
const Binary = "versitygw"

// EnvBinary names the environment variable that gives the binary's path.
const EnvBinary = "SBXDB_VERSITYGW"

// startTimeout bounds the wait for a started server to answer.
const startTimeout = 20 * time.Second

// Server is a running (or stopped) versitygw.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Access   string
	Secret   string
	Dir      string // the posix backend's root: one subdirectory per bucket

	t    testing.TB
	bin  string
	addr string
	log  logBuffer // the server's output, shown when a test fails

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Find returns the versitygw binary's path, or an error saying where it
// looked.
func Find() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s: %w", EnvBinary, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath(Binary); err == nil {
		return p, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		out, err := exec.Command("go", "env", "GOPATH").Output()
		if err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	if gopath != "" {
		p := filepath.Join(strings.Split(gopath, string(filepath.ListSeparator))[0], "bin", Binary)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in $%s, $PATH or $(go env GOPATH)/bin; build it with internal/testkit/s3test/install.sh", Binary, EnvBinary)
}

// Start starts a server on a free port over a fresh temporary directory
// and waits until it answers. It skips the test when the binary is
// missing and $CI is empty, and fails it when $CI is set. The server is
// killed when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Find()
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no S3 server to test against: %v", err)
		}
		t.Fatalf("CI is set, so the S3 tests must run: %v", err)
	}
	s := &Server{
		Access: "sbxdbtest" + randHex(4),
		Secret: randHex(20),
		Dir:    t.TempDir(),
		t:      t,
		bin:    bin,
	}
	t.Cleanup(func() {
		s.kill()
		if t.Failed() && s.log.Len() > 0 {
			t.Logf("%s output:\n%s", Binary, s.log.String())
		}
	})
	// A port found free can be taken before the server binds it; try again.
	for try := 0; ; try++ {
		s.addr = freeAddr(t)
		s.Endpoint = "http://" + s.addr
		err := s.start()
		if err == nil {
			return s
		}
		if try == 4 {
			t.Fatalf("starting %s: %v", Binary, err)
		}
	}
}

// Start starts a stopped server again, on the same port and directory.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting %s: %v", Binary, err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return errors.New("already running")
	}
	cmd := exec.Command(s.bin, "--access", s.Access, "--secret", s.Secret,
		"--port", s.addr, "--quiet", "posix", s.Dir)
	cmd.Stdout = &s.log
	cmd.Stderr = &s.log
	// Its own process group, so a signal to the test's group (a ^C) is not
	// what decides its end, and kill reaches it alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			if strings.Contains(resp.Header.Get("Server"), "VERSITYGW") {
				return nil
			}
			err = fmt.Errorf("%s answered, not %s", s.addr, Binary)
		}
		select {
		case <-done:
			s.kill()
			return fmt.Errorf("%s exited: %s", Binary, s.log.String())
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("no answer within %v: %v", startTimeout, err)
		}
	}
}

// Stop kills the server and waits for it to exit; its directory stays, for
// Start to serve again.
func (s *Server) Stop() {
	s.kill()
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// Env points the AWS_* environment variables at s for the rest of the test
// (t.Setenv: so not in parallel tests).
func Env(t testing.TB, s *Server) {
	t.Setenv("AWS_ENDPOINT_URL", s.Endpoint)
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", s.Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.Secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
}

// Bucket returns a fresh bucket name for a test to use.
func Bucket() string { return "sbxdb-" + randHex(6) }

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// logBuffer collects the server's output, written by os/exec's copying
// goroutine and read by the test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Ping reports whether the server answers now.
func (s *Server) Ping(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}
