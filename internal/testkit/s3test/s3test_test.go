package s3test_test

import (
	"context"
	"os"
	"testing"

	"github.com/sbxdb/sbxdb/internal/testkit/s3test"
)

func TestStartStop(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	if !srv.Ping(ctx) {
		t.Fatal("a started server does not answer")
	}
	if fi, err := os.Stat(srv.Dir); err != nil || !fi.IsDir() {
		t.Fatalf("server directory: %v", err)
	}
	srv.Stop()
	if srv.Ping(ctx) {
		t.Fatal("a stopped server answers")
	}
	srv.Stop() // stopping twice is harmless
	srv.Start()
	if !srv.Ping(ctx) {
		t.Fatal("a restarted server does not answer")
	}
}

func TestEnv(t *testing.T) {
	srv := &s3test.Server{Endpoint: "http://127.0.0.1:9", Access: "a", Secret: "s"}
	s3test.Env(t, srv)
	for k, want := range map[string]string{
		"AWS_ENDPOINT_URL":      srv.Endpoint,
		"AWS_ACCESS_KEY_ID":     "a",
		"AWS_SECRET_ACCESS_KEY": "s",
		"AWS_REGION":            "us-east-1",
	} {
		if got := os.Getenv(k); got != want {
			t.Errorf("$%s = %q, want %q", k, got, want)
		}
	}
}

// TestFindHonoursEnv checks that $SBXDB_VERSITYGW wins over $PATH and that
// a wrong path there is an error, not a silent fallback.
func TestFindHonoursEnv(t *testing.T) {
	t.Setenv(s3test.EnvBinary, "/nonexistent/versitygw")
	if _, err := s3test.Find(); err == nil {
		t.Error("Find accepted a missing $SBXDB_VERSITYGW")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(s3test.EnvBinary, self)
	if p, err := s3test.Find(); err != nil || p != self {
		t.Errorf("Find = %q, %v; want $SBXDB_VERSITYGW's %q", p, err, self)
	}
}
