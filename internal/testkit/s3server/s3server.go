// Package s3server runs a throw-away S3 server from a program: versitygw
// over a directory, on a free loopback port, until Stop. It is the core
// of internal/testkit/s3test without the testing package, for commands
// such as bench/cmd/sbxbench.
//
// The binary is found through $SBXDB_VERSITYGW, else $PATH, else
// $(go env GOPATH)/bin; internal/testkit/s3test/install.sh builds it.
package s3server

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
	"time"
)

// Binary is the server's executable name.
const Binary = "versitygw"

// EnvBinary names the environment variable that gives the binary's path.
const EnvBinary = "SBXDB_VERSITYGW"

// StartTimeout bounds the wait for a started server to answer.
const StartTimeout = 20 * time.Second

// ErrRunning is Start's error on a server already running.
var ErrRunning = errors.New("s3server: already running")

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

// Server is one versitygw over Dir, running between Start and Stop.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT, set by the first Start
	Access   string
	Secret   string
	Dir      string // the posix backend's root: one subdirectory per bucket

	bin  string
	addr string
	log  logBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// New returns a stopped server over dir (created if absent) with fresh
// credentials, or an error when the binary is not found.
func New(dir string) (*Server, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Server{Access: "sbxdb" + randHex(4), Secret: randHex(20), Dir: dir, bin: bin}, nil
}

// Start starts the server and waits until it answers. The first Start
// picks a free loopback port (trying again if another process takes it
// first); a later one serves on the same port.
func (s *Server) Start() error {
	if s.addr != "" {
		return s.start()
	}
	var err error
	for range 5 {
		if s.addr, err = freeAddr(); err != nil {
			return err
		}
		s.Endpoint = "http://" + s.addr
		if err = s.start(); err == nil || errors.Is(err, ErrRunning) {
			return err
		}
	}
	s.addr, s.Endpoint = "", ""
	return fmt.Errorf("starting %s: %w", Binary, err)
}

func (s *Server) start() error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return ErrRunning
	}
	cmd := exec.Command(s.bin, "--access", s.Access, "--secret", s.Secret,
		"--port", s.addr, "--quiet", "posix", s.Dir)
	cmd.Stdout = &s.log
	cmd.Stderr = &s.log
	// Its own process group, so that a ^C to the caller's group is not
	// what ends it; killed with the caller (Pdeathsig) if Stop is missed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	deadline := time.Now().Add(StartTimeout)
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
			s.Stop()
			return fmt.Errorf("%s exited: %s", Binary, s.log.String())
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("no answer within %v: %v", StartTimeout, err)
		}
	}
}

// Stop kills the server and waits for it to exit; Dir stays, for Start to
// serve again. Stopping a stopped server does nothing.
func (s *Server) Stop() {
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

// Log returns what the server printed so far.
func (s *Server) Log() string { return s.log.String() }

// Env returns the AWS_* environment variables, as NAME=value, that point
// an S3 client (internal/objstore/s3.ConfigFromEnv) at s.
func (s *Server) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL=" + s.Endpoint,
		"AWS_ENDPOINT_URL_S3=",
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=" + s.Access,
		"AWS_SECRET_ACCESS_KEY=" + s.Secret,
		"AWS_SESSION_TOKEN=",
	}
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

// Bucket returns a fresh bucket name.
func Bucket() string { return "sbxdb-" + randHex(6) }

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// logBuffer collects the server's output, written by os/exec's copying
// goroutine and read by the caller.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
