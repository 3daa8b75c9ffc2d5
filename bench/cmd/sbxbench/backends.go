package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/sbxdb/sbxdb/internal/testkit/s3server"
)

// backends are the servers of the shared, s3 and network sections: a
// PostgreSQL server (--pg's, else a throw-away cluster of this process)
// and an S3 server (versitygw on loopback), each started on first use and
// stopped when the run ends. Where one could not start, its why says so
// and the rows that need it are missing, saying why (--smoke fails).
type backends struct {
	// newDB returns the URL of a new, empty database; nil without one.
	newDB func() (string, error)
	whyPG string
	// s3 is the running S3 server; nil without one.
	s3    *s3server.Server
	whyS3 string

	stop []func()
}

// backends starts the servers on the first call and returns them.
func (cfg *config) backends() *backends {
	if cfg.be != nil {
		return cfg.be
	}
	be := &backends{}
	cfg.be = be
	var cleanup func()
	be.newDB, be.whyPG, cleanup = metadataSource(cfg)
	be.stop = append(be.stop, cleanup)
	if be.newDB == nil {
		be.whyS3 = be.whyPG
		return be
	}
	srv, err := s3server.New(filepath.Join(cfg.work, "versitygw"))
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		be.whyS3 = fmt.Sprintf("not available: %v", err)
		return be
	}
	be.s3 = srv
	be.stop = append(be.stop, srv.Stop)
	progress("started versitygw at %s", srv.Endpoint)
	useS3(srv, srv.Endpoint)
	return be
}

// closeBackends stops what backends started.
func (cfg *config) closeBackends() {
	if cfg.be == nil {
		return
	}
	for i := len(cfg.be.stop) - 1; i >= 0; i-- {
		cfg.be.stop[i]()
	}
	cfg.be = nil
}

// useS3 points the AWS_* environment variables, which engine.Open reads
// for Options.Blobs, at srv's credentials and endpoint (srv.Endpoint, or
// a proxy in front of it). The process's environment: Open stores one
// handle at a time after setting it.
func useS3(srv *s3server.Server, endpoint string) {
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		if k == "AWS_ENDPOINT_URL" {
			v = endpoint
		}
		os.Setenv(k, v)
	}
}

// newBucket returns a fresh blob location on the S3 server: every server
// of one run names it (Options.Blobs), the bucket created at Open.
func newBucket() string { return "s3://" + s3server.Bucket() + "/blobs" }

// hostPort returns the host:port of a postgres:// or http:// URL.
func hostPort(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	if p.Port() == "" {
		return "", fmt.Errorf("%s names no port", p.Redacted())
	}
	return p.Host, nil
}

// withHost returns u with its host:port replaced by hostPort.
func withHost(u, hostPort string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	p.Host = hostPort
	return p.String(), nil
}
