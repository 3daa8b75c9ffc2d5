package s3server_test

import (
	"context"
	"os"
	"testing"

	"github.com/sbxdb/sbxdb/internal/testkit/s3server"
)

func TestStartStopRestart(t *testing.T) {
	srv, err := s3server.New(t.TempDir())
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no S3 server: %v", err)
		}
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx := context.Background()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if !srv.Ping(ctx) {
		t.Fatal("a started server does not answer")
	}
	if err := srv.Start(); err != s3server.ErrRunning {
		t.Fatalf("Start of a running server: %v, want ErrRunning", err)
	}
	endpoint := srv.Endpoint
	srv.Stop()
	if srv.Ping(ctx) {
		t.Fatal("a stopped server answers")
	}
	srv.Stop()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if srv.Endpoint != endpoint || !srv.Ping(ctx) {
		t.Fatalf("restarted at %s (was %s), answering %v", srv.Endpoint, endpoint, srv.Ping(ctx))
	}
}
