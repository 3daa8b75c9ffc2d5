// Package s3test runs a real S3 server for tests: versitygw over a
// temporary directory, on a free loopback port, stopped when the test ends.
//
// The binary is found through $SBXDB_VERSITYGW, else $PATH, else
// $(go env GOPATH)/bin; install.sh in this directory builds it. Without it a
// test skips, saying why, unless $CI is set, where it fails: CI must never
// pass by skipping the S3 tests. The server itself is
// internal/testkit/s3server's, which programs use directly.
package s3test

import (
	"context"
	"os"
	"testing"

	"github.com/sbxdb/sbxdb/internal/testkit/s3server"
)

// Binary is the server's executable name.
const Binary = s3server.Binary

// EnvBinary names the environment variable that gives the binary's path.
const EnvBinary = s3server.EnvBinary

// Server is a running (or stopped) versitygw.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Access   string
	Secret   string
	Dir      string // the posix backend's root: one subdirectory per bucket

	t   testing.TB
	srv *s3server.Server
}

// Find returns the versitygw binary's path, or an error saying where it
// looked.
func Find() (string, error) { return s3server.Find() }

// Start starts a server on a free port over a fresh temporary directory
// and waits until it answers. It skips the test when the binary is
// missing and $CI is empty, and fails it when $CI is set. The server is
// killed when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	srv, err := s3server.New(t.TempDir())
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no S3 server to test against: %v", err)
		}
		t.Fatalf("CI is set, so the S3 tests must run: %v", err)
	}
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() && srv.Log() != "" {
			t.Logf("%s output:\n%s", Binary, srv.Log())
		}
	})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	return &Server{Endpoint: srv.Endpoint, Access: srv.Access, Secret: srv.Secret, Dir: srv.Dir, t: t, srv: srv}
}

// Start starts a stopped server again, on the same port and directory.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.srv.Start(); err != nil {
		s.t.Fatalf("restarting %s: %v", Binary, err)
	}
}

// Stop kills the server and waits for it to exit; its directory stays, for
// Start to serve again.
func (s *Server) Stop() {
	s.srv.Stop()
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
func Bucket() string { return s3server.Bucket() }

// Ping reports whether the server answers now.
func (s *Server) Ping(ctx context.Context) bool { return s.srv.Ping(ctx) }
