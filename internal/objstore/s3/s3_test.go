package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/objstore"
	"github.com/sbxdb/sbxdb/internal/objstore/objstoretest"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/internal/testkit/s3test"
)

// testConfig is a Config for srv with small parts and list pages, so the
// multipart and pagination paths run on small data.
func testConfig(srv *s3test.Server, bucket string) Config {
	return Config{
		Endpoint:     srv.Endpoint,
		AccessKey:    srv.Access,
		SecretKey:    srv.Secret,
		Bucket:       bucket,
		Prefix:       "p/" + strings.ToLower(strings.TrimPrefix(s3test.Bucket(), "sbxdb-")),
		PartSize:     MinPartSize,
		ListPageSize: 50,
	}
}

func open(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	bucket := s3test.Bucket()
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		return open(t, testConfig(srv, bucket)) // a fresh prefix each
	}, objstoretest.Options{
		Multipart: MinPartSize,
		// Over two list pages of 50.
		Many: 120,
		// 1 GiB at SBXDB_LONG=1.
		Big: testkit.ScaleShort(t, int64(32<<20), 200<<20, 1<<30),
		// A 5 MiB part buffer and the garbage between collections.
		MaxHeap:        32 << 20,
		AtomicIfAbsent: true,
	})
}

func TestOpenCreatesBucket(t *testing.T) {
	srv := s3test.Start(t)
	bucket := s3test.Bucket()
	cfg := testConfig(srv, bucket)
	s := open(t, cfg)
	if fi, err := os.Stat(filepath.Join(srv.Dir, bucket)); err != nil || !fi.IsDir() {
		t.Fatalf("bucket directory after Open: %v", err)
	}
	put(t, s, "x", []byte("x"))
	open(t, cfg) // the bucket exists now: Open uses it
	// Keys are PREFIX/NAME.
	if b, err := os.ReadFile(filepath.Join(srv.Dir, bucket, cfg.Prefix, "x")); err != nil || string(b) != "x" {
		t.Errorf("object x stored as %q, %v; want the file PREFIX/x", b, err)
	}
}

// TestRequestCounts pins the requests each operation costs, the numbers
// the benchmark's "S3 requests per captured file" is made of.
func TestRequestCounts(t *testing.T) {
	srv := s3test.Start(t)
	s := open(t, testConfig(srv, s3test.Bucket()))
	ctx := context.Background()
	step := func(what string, want RequestCounts, f func()) {
		t.Helper()
		before := s.Requests()
		f()
		got := s.Requests().Sub(before)
		// A try the server did not answer, or answered with a retryable
		// status (a loaded machine), is tried again and counted twice:
		// the pinned cost is per request, the retries come on top.
		extra := got.Total() - want.Total()
		if got.Failed == 0 && got != want || got.Failed > 0 && (extra != got.Failed || !coversCounts(got, want)) {
			t.Errorf("%s made %+v requests, want %+v", what, got, want)
		}
	}
	small := bytes.Repeat([]byte{1}, 1000)
	step("a small Put", RequestCounts{Puts: 1}, func() { put(t, s, "small", small) })
	step("a ranged read", RequestCounts{Gets: 1}, func() {
		rc, err := s.Open(ctx, "small", 100, 10)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, rc)
		rc.Close()
	})
	step("a Stat", RequestCounts{Heads: 1}, func() {
		if _, err := s.Stat(ctx, "small"); err != nil {
			t.Fatal(err)
		}
	})
	big := bytes.Repeat([]byte{2}, 2*MinPartSize+1)
	step("a 3-part Put", RequestCounts{Multipart: 2, Parts: 3}, func() { put(t, s, "big", big) })
	step("a List of 2", RequestCounts{Lists: 1}, func() {
		s.List(ctx, "", func(objstore.Info) error { return nil })
	})
	step("a Delete", RequestCounts{Deletes: 1}, func() {
		if err := s.Delete(ctx, "small"); err != nil {
			t.Fatal(err)
		}
	})
	// The first IfAbsent Put probes the server: two conditional PUTs of a
	// probe key and its DELETE.
	step("the first IfAbsent Put", RequestCounts{Puts: 3, Deletes: 1}, func() {
		if err := s.Put(ctx, "c", bytes.NewReader(small), 1000, objstore.PutOptions{IfAbsent: true}); err != nil {
			t.Fatal(err)
		}
	})
	step("an IfAbsent Put", RequestCounts{Puts: 1}, func() {
		if err := s.Put(ctx, "d", bytes.NewReader(small), 1000, objstore.PutOptions{IfAbsent: true}); err != nil {
			t.Fatal(err)
		}
	})
	step("a multipart IfAbsent Put of an existing name", RequestCounts{Heads: 1}, func() {
		err := s.Put(ctx, "big", bytes.NewReader(big), int64(len(big)), objstore.PutOptions{IfAbsent: true})
		if !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("IfAbsent Put of an existing name: %v", err)
		}
	})
}

func TestConditionalPuts(t *testing.T) {
	srv := s3test.Start(t)
	s := open(t, testConfig(srv, s3test.Bucket()))
	ok, err := s.ConditionalPuts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Error("versitygw honours If-None-Match: *, but the probe says it does not")
	}
	if names := listAll(t, s); len(names) != 0 {
		t.Errorf("the probe left %q", names)
	}
}

// TestFailedMultipartLeavesNoUpload checks that the parts of a failed Put
// are not left on the server, where S3 would keep (and bill) them.
func TestFailedMultipartLeavesNoUpload(t *testing.T) {
	srv := s3test.Start(t)
	cfg := testConfig(srv, s3test.Bucket())
	s := open(t, cfg)
	ctx := context.Background()
	boom := errors.New("boom")
	r := io.MultiReader(bytes.NewReader(make([]byte, 2*MinPartSize)), errReader{boom})
	if err := s.Put(ctx, "f", r, 3*MinPartSize, objstore.PutOptions{}); !errors.Is(err, boom) {
		t.Fatalf("Put: %v, want the reader's error", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	r = io.MultiReader(bytes.NewReader(make([]byte, MinPartSize+1)), cancelReader{cancel}, bytes.NewReader(make([]byte, MinPartSize)))
	if err := s.Put(cctx, "g", r, 2*MinPartSize+1, objstore.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put: %v, want context.Canceled", err)
	}
	ups, err := s.core.ListMultipartUploads(ctx, cfg.Bucket, cfg.Prefix, "", "", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("failed Puts left %d multipart uploads: %+v", len(ups.Uploads), ups.Uploads)
	}
}

// TestServerStopped checks that a stopped server fails every operation
// with ErrUnavailable after a bounded number of tries, and that the Store
// works again once the server is back.
func TestServerStopped(t *testing.T) {
	srv := s3test.Start(t)
	cfg := testConfig(srv, s3test.Bucket())
	s := open(t, cfg)
	ctx := context.Background()
	put(t, s, "x", []byte("before"))

	srv.Stop()
	ops := map[string]func() error{
		"Put": func() error {
			return s.Put(ctx, "y", bytes.NewReader([]byte("y")), 1, objstore.PutOptions{})
		},
		"multipart Put": func() error {
			return s.Put(ctx, "z", bytes.NewReader(make([]byte, MinPartSize+1)), MinPartSize+1, objstore.PutOptions{})
		},
		"Open":   func() error { _, err := s.Open(ctx, "x", 0, -1); return err },
		"Stat":   func() error { _, err := s.Stat(ctx, "x"); return err },
		"Delete": func() error { return s.Delete(ctx, "x") },
		"List": func() error {
			return s.List(ctx, "", func(objstore.Info) error { return nil })
		},
	}
	for name, op := range ops {
		before := s.Requests()
		start := time.Now()
		err := op()
		took := time.Since(start)
		tries := s.Requests().Sub(before).Total()
		t.Logf("%s with the server stopped: %v after %d tries in %v", name, err, tries, took.Round(time.Millisecond))
		if !errors.Is(err, sbxdb.ErrBlobsUnavailable) {
			t.Errorf("%s with the server stopped: %v, want ErrUnavailable", name, err)
		}
		if tries != int64(DefaultMaxRetries) {
			t.Errorf("%s with the server stopped made %d tries, want DefaultMaxRetries = %d", name, tries, DefaultMaxRetries)
		}
	}
	if _, err := Open(ctx, cfg); !errors.Is(err, sbxdb.ErrBlobsUnavailable) {
		t.Errorf("Open with the server stopped: %v, want ErrUnavailable", err)
	}

	srv.Start()
	put(t, s, "y", []byte("after"))
	if got := readAll(t, s, "x"); string(got) != "before" {
		t.Errorf("after the restart x is %q", got)
	}
}

// TestReadInterrupted checks that a server dying mid-read fails the read
// with ErrUnavailable rather than ending it as if the object were short.
func TestReadInterrupted(t *testing.T) {
	srv := s3test.Start(t)
	s := open(t, testConfig(srv, s3test.Bucket()))
	ctx := context.Background()
	data := make([]byte, 64<<20)
	put(t, s, "big", data)
	rc, err := s.Open(ctx, "big", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err = io.Copy(io.Discard, rc)
	if err == nil {
		t.Skip("the whole body was buffered before the server stopped")
	}
	if !errors.Is(err, sbxdb.ErrBlobsUnavailable) {
		t.Errorf("read with the server gone: %v, want ErrUnavailable", err)
	}
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct{ url, bucket, prefix string }{
		{"s3://bucket", "bucket", ""},
		{"s3://bucket/", "bucket", ""},
		{"s3://my-bucket/a/b/", "my-bucket", "a/b"},
	} {
		b, p, err := ParseURL(c.url)
		if err != nil || b != c.bucket || p != c.prefix {
			t.Errorf("ParseURL(%q) = %q, %q, %v; want %q, %q", c.url, b, p, err, c.bucket, c.prefix)
		}
	}
	for _, bad := range []string{"", "bucket/x", "http://bucket/x", "s3:///x", "s3://Bad_Bucket/x", "s3://b/../x", "s3://bucket/a//b", "s3://u@bucket/x", "s3://bucket/x?y"} {
		if _, _, err := ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) accepted", bad)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	srv := &s3test.Server{Endpoint: "http://127.0.0.1:1", Access: "ak", Secret: "sk"}
	s3test.Env(t, srv)
	t.Setenv("AWS_SESSION_TOKEN", "tok")
	c, err := ConfigFromEnv("s3://bkt/pre")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", AccessKey: "ak", SecretKey: "sk", SessionToken: "tok", Bucket: "bkt", Prefix: "pre"}
	if c != want {
		t.Errorf("ConfigFromEnv = %+v, want %+v", c, want)
	}
	t.Setenv("AWS_ENDPOINT_URL_S3", "https://s3.example:9000")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "eu-west-1")
	if c, _ := ConfigFromEnv("s3://bkt"); c.Endpoint != "https://s3.example:9000" || c.Region != "eu-west-1" {
		t.Errorf("AWS_ENDPOINT_URL_S3 and AWS_DEFAULT_REGION: got %q, %q", c.Endpoint, c.Region)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := ConfigFromEnv("s3://bkt"); err == nil {
		t.Error("ConfigFromEnv without a secret key succeeded")
	}
	for _, ep := range []string{"ftp://x", "http://", "http://h:1/path"} {
		if _, err := Open(context.Background(), Config{Endpoint: ep, Bucket: "bkt", AccessKey: "a", SecretKey: "s"}); err == nil {
			t.Errorf("Open with endpoint %q succeeded", ep)
		}
	}
}

func put(t *testing.T, s *Store, name string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), name, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatalf("Put(%q): %v", name, err)
	}
}

func readAll(t *testing.T, s *Store, name string) []byte {
	t.Helper()
	rc, err := s.Open(context.Background(), name, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func listAll(t *testing.T, s *Store) []string {
	t.Helper()
	var names []string
	if err := s.List(context.Background(), "", func(i objstore.Info) error {
		names = append(names, i.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return names
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type cancelReader struct{ cancel context.CancelFunc }

func (c cancelReader) Read([]byte) (int, error) { c.cancel(); return 0, io.EOF }

// TestIfAbsentMultipartRace checks the If-None-Match: * sent with
// CompleteMultipartUpload: an object created after the HEAD that opens a
// multipart IfAbsent Put is not overwritten by it.
func TestIfAbsentMultipartRace(t *testing.T) {
	srv := s3test.Start(t)
	s := open(t, testConfig(srv, s3test.Bucket()))
	ctx := context.Background()
	if ok, err := s.ConditionalPuts(ctx); err != nil || !ok {
		t.Fatalf("the server does not honour If-None-Match: %v", err)
	}
	// Midway through the upload, another writer puts the object.
	r := io.MultiReader(bytes.NewReader(make([]byte, MinPartSize+1)), funcReader(func() { put(t, s, "race", []byte("other")) }), bytes.NewReader(make([]byte, MinPartSize)))
	err := s.Put(ctx, "race", r, 2*MinPartSize+1, objstore.PutOptions{IfAbsent: true})
	if !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("IfAbsent multipart Put that lost the race: %v, want ErrExists", err)
	}
	if got := readAll(t, s, "race"); string(got) != "other" {
		t.Errorf("the losing IfAbsent Put replaced the object (%d bytes)", len(got))
	}
}

// funcReader calls f when first read and yields nothing.
type funcReader func()

func (f funcReader) Read([]byte) (int, error) { f(); return 0, io.EOF }

// TestServerHangs checks that a server that takes connections but never
// answers fails requests with ErrUnavailable once ResponseHeaderTimeout has
// passed on each try, rather than leaving them waiting.
func TestServerHangs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-accepted
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	_, err = Open(context.Background(), Config{
		Endpoint:              "http://" + l.Addr().String(),
		AccessKey:             "a",
		SecretKey:             "s",
		Bucket:                "bkt",
		MaxRetries:            2,
		ResponseHeaderTimeout: 100 * time.Millisecond,
	})
	if !errors.Is(err, sbxdb.ErrBlobsUnavailable) {
		t.Errorf("Open against a server that never answers: %v, want ErrUnavailable", err)
	}
}

// TestWrongCredentials checks that a refusal is reported as the server's
// answer, not as an outage or a missing object.
func TestWrongCredentials(t *testing.T) {
	srv := s3test.Start(t)
	cfg := testConfig(srv, s3test.Bucket())
	cfg.SecretKey = "wrong" + cfg.SecretKey
	before := time.Now()
	_, err := Open(context.Background(), cfg)
	if err == nil || errors.Is(err, sbxdb.ErrBlobsUnavailable) || errors.Is(err, objstore.ErrNotExist) {
		t.Errorf("Open with a wrong secret key: %v, want the server's refusal", err)
	}
	t.Logf("Open with a wrong secret key: %v (%v)", err, time.Since(before).Round(time.Millisecond))
}

// coversCounts reports whether got has at least want's requests of every
// operation.
func coversCounts(got, want RequestCounts) bool {
	return got.Puts >= want.Puts && got.Parts >= want.Parts && got.Multipart >= want.Multipart && got.Gets >= want.Gets &&
		got.Heads >= want.Heads && got.Lists >= want.Lists && got.Deletes >= want.Deletes && got.Other >= want.Other
}
