package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/internal/testkit"
	"github.com/sbxdb/sbxdb/server"
)

// served is a store behind a server on a loopback port, and a client of
// it. The store's clock is the test's.
type served struct {
	t     *testing.T
	db    *engine.DB
	ts    *httptest.Server
	c     *client.Client
	clock atomic.Int64 // Unix ms

	// Connections opened and closed: quiet waits until they match, so
	// that every handler has returned (a connection is closed only after
	// its handler).
	mu             sync.Mutex
	cond           sync.Cond
	opened, closed int
}

func newServed(t *testing.T) *served {
	t.Helper()
	s := &served{t: t}
	s.cond.L = &s.mu
	s.clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	db, err := engine.Open(filepath.Join(t.TempDir(), "store"), &engine.Options{
		NoSync: true,
		Now:    func() time.Time { return time.UnixMilli(s.clock.Load()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	s.db = db
	s.ts = httptest.NewUnstartedServer(server.New(db, server.Options{}))
	s.ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch st {
		case http.StateNew:
			s.opened++
		case http.StateClosed, http.StateHijacked:
			s.closed++
			s.cond.Broadcast()
		}
	}
	s.ts.Start()
	if s.c, err = client.New(s.ts.URL, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.c.Close()
		s.ts.Close()
		db.Close()
	})
	return s
}

// quiet closes the client's idle connections and waits until the server
// has closed every connection, so that no handler is still running.
func (s *served) quiet() {
	s.c.Close()
	s.ts.Client().CloseIdleConnections()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.opened != s.closed {
		s.cond.Wait()
	}
}

func (s *served) advance(d time.Duration) { s.clock.Add(d.Milliseconds()) }

// state is everything a failed request must leave as it was: the objects
// listed, the blobs with their upload times, the files of the blob store.
type state struct {
	Objects []sbxdb.ObjectInfo
	Blobs   []cas.Info
	Files   []string
}

func (s *served) state() state {
	s.t.Helper()
	s.quiet()
	var st state
	objs, next, err := s.db.ListObjects(context.Background(), "", "", sbxdb.MaxListObjects)
	if err != nil || next != "" {
		s.t.Fatal(err, next)
	}
	st.Objects = objs
	if st.Blobs, err = s.db.Blobs().List(context.Background(), ""); err != nil {
		s.t.Fatal(err)
	}
	root := filepath.Join(s.db.Dir(), engine.BlobDir)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			st.Files = append(st.Files, rel)
		}
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

func (s *served) unchanged(before state, when string) {
	s.t.Helper()
	if diff := cmp.Diff(before, s.state()); diff != "" {
		s.t.Errorf("%s changed the store (-before +after):\n%s", when, diff)
	}
}

// raw sends a request with no client in between and returns the status,
// headers and body.
func (s *served) raw(method, path string, body io.Reader, header map[string]string) (int, http.Header, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.ts.URL+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.ts.Client().Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// wantError requires an error body of code with status.
func wantError(t *testing.T, what string, status int, body []byte, wantStatus int, code string) {
	t.Helper()
	var eb server.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || status != wantStatus || eb.Code != code {
		t.Errorf("%s: %d %s; want %d %s", what, status, body, wantStatus, code)
	}
}

// large is a body stored in a blob file of its own.
func large(seed byte) []byte {
	b := make([]byte, cas.MaxPacked+10_000)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func (s *served) put(key string, data []byte, opts sbxdb.PutObjectOptions) sbxdb.ObjectInfo {
	s.t.Helper()
	if opts.Size == 0 {
		opts.Size = int64(len(data))
	}
	info, err := s.c.PutObject(context.Background(), key, bytes.NewReader(data), opts)
	if err != nil {
		s.t.Fatalf("PutObject(%q): %v", key, err)
	}
	return info
}

func (s *served) read(key string, off, n int64) ([]byte, sbxdb.ObjectInfo) {
	s.t.Helper()
	r, info, err := s.c.OpenObject(context.Background(), key, off, n)
	if err != nil {
		s.t.Fatalf("OpenObject(%q, %d, %d): %v", key, off, n, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		s.t.Fatalf("reading %q: %v", key, err)
	}
	return b, info
}

func TestBlobRoundTrip(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	for _, data := range [][]byte{[]byte("packed bytes"), large(1), {}} {
		key := testkit.FileKeyOf(data)
		info := s.put(key, data, sbxdb.PutObjectOptions{Size: int64(len(data))})
		sum := sha256.Sum256(data)
		want := sbxdb.ObjectInfo{Key: key, Size: int64(len(data)), Uploaded: s.clock.Load(), SHA256: fmt.Sprintf("%x", sum)}
		if !cmp.Equal(info, want) {
			t.Errorf("PUT = %+v, want %+v", info, want)
		}
		got, rinfo := s.read(key, 0, -1)
		if !bytes.Equal(got, data) || !cmp.Equal(rinfo, want) {
			t.Errorf("GET = %d bytes, %+v; want %d, %+v", len(got), rinfo, len(data), want)
		}
		if sinfo, err := s.c.StatObject(ctx, key); err != nil || !cmp.Equal(sinfo, want) {
			t.Errorf("HEAD = %+v, %v", sinfo, err)
		}
		// Chunked, the same bytes again.
		if _, err := s.c.PutObject(ctx, key, bytes.NewReader(data), sbxdb.PutObjectOptions{Size: -1}); err != nil {
			t.Errorf("chunked PUT: %v", err)
		}
	}
	// Headers of a blob, seen raw.
	data := []byte("headers")
	s.put(testkit.FileKeyOf(data), data, sbxdb.PutObjectOptions{})
	status, h, body := s.raw("GET", "/v1/blobs/"+testkit.FileKeyOf(data), nil, nil)
	sum := sha256.Sum256(data)
	if status != 200 || string(body) != "headers" || h.Get("Content-Length") != "7" || h.Get("ETag") != fmt.Sprintf(`"%x"`, sum) ||
		h.Get("Content-Type") != "application/octet-stream" || h.Get("X-Sbxdb-Uploaded") != fmt.Sprint(s.clock.Load()) {
		t.Errorf("GET: %d %v %q", status, h, body)
	}
	status, h, body = s.raw("HEAD", "/v1/blobs/"+testkit.FileKeyOf(data), nil, nil)
	if status != 200 || len(body) != 0 || h.Get("Content-Length") != "7" || h.Get("ETag") != fmt.Sprintf(`"%x"`, sum) {
		t.Errorf("HEAD: %d %v %q", status, h, body)
	}
	// Missing: 404 from GET, HEAD (in its headers) and a nil DELETE.
	missing := testkit.FileKeyOf([]byte("missing"))
	if _, _, err := s.c.OpenObject(ctx, missing, 0, -1); !errors.Is(err, sbxdb.ErrBlobNotFound) {
		t.Errorf("GET of a missing blob: %v", err)
	}
	if _, err := s.c.StatObject(ctx, missing); !errors.Is(err, sbxdb.ErrBlobNotFound) || err.(*client.Error).Status != 404 {
		t.Errorf("HEAD of a missing blob: %v", err)
	}
	if err := s.c.DeleteObject(ctx, missing); err != nil {
		t.Errorf("DELETE of a missing blob: %v", err)
	}
}

func TestBlobPutRefused(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	s.put("kept", []byte("kept"), sbxdb.PutObjectOptions{})
	before := s.state()
	for _, data := range [][]byte{[]byte("small"), large(2)} {
		key := testkit.FileKeyOf(data)
		other := append(slices.Clone(data), 'x')
		// Another body under the key, raw and through the client.
		status, _, body := s.raw("PUT", "/v1/blobs/"+key, bytes.NewReader(other), nil)
		wantError(t, "PUT of other bytes", status, body, 400, "SBXDB_BLOB_MISMATCH")
		_, err := s.c.PutObject(ctx, key, bytes.NewReader(other), sbxdb.PutObjectOptions{Size: -1})
		if ce, ok := errors.AsType[*client.Error](err); !ok || !errors.Is(err, sbxdb.ErrBlobKeyMismatch) || ce.Code != "SBXDB_BLOB_MISMATCH" || ce.Status != 400 {
			t.Errorf("client PUT of other bytes: %v", err)
		}
		// The right bytes with a wrong size: cut off by the client before
		// the server could take them for complete.
		for _, size := range []int64{int64(len(data)) - 1, int64(len(data)) + 1, 0} {
			_, err := s.c.PutObject(ctx, key, bytes.NewReader(data), sbxdb.PutObjectOptions{Size: size})
			if !errors.Is(err, sbxdb.ErrBlobKeyMismatch) {
				t.Errorf("PUT of %d bytes declared %d: %v; want ErrKeyMismatch", len(data), size, err)
			}
		}
		// Attributes and keys the engine refuses.
		_, err = s.c.PutObject(ctx, "plain", bytes.NewReader(data), sbxdb.PutObjectOptions{Size: -1, ContentType: " bad"})
		if !errors.Is(err, sbxdb.ErrInvalidObject) {
			t.Errorf("PUT with a bad content type: %v", err)
		}
		status, _, body = s.raw("PUT", "/v1/blobs/plain", bytes.NewReader(data), map[string]string{"X-Sbxdb-Meta-": "v"})
		wantError(t, "PUT with a nameless metadata header", status, body, 400, "SBXDB_BAD_REQUEST")
		status, _, body = s.raw("PUT", "/v1/blobs/sandbox-files/sha256/abc", bytes.NewReader(data), nil)
		wantError(t, "PUT under a bad blob key", status, body, 400, "SBXDB_BAD_REQUEST")
	}
	for _, key := range []string{"", "a//b", "a/./b", "../x", "/lead", "trail/", "\xff"} {
		if _, err := s.c.PutObject(ctx, key, strings.NewReader("x"), sbxdb.PutObjectOptions{Size: 1}); !errors.Is(err, sbxdb.ErrInvalidObject) {
			t.Errorf("PUT %q: %v; want ErrInvalidObject", key, err)
		}
	}
	s.unchanged(before, "refused PUTs")
}

// cutReader gives n bytes and then fails.
type cutReader struct{ n int }

var errCut = errors.New("the host's reader failed")

func (r *cutReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errCut
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = byte(i)
	}
	r.n -= k
	return k, nil
}

// TestBlobPutCutShort: a body that ends early, through the client (its
// reader fails) or on a raw connection (closed before Content-Length
// bytes), stores nothing.
func TestBlobPutCutShort(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	s.put("kept", []byte("kept"), sbxdb.PutObjectOptions{})
	before := s.state()
	for _, n := range []int{100_000, cas.MaxPacked + 100_000} {
		for _, size := range []int64{-1, int64(n) + 10} {
			for _, key := range []string{"kept", "new", testkit.FileKeyOf([]byte("x"))} {
				_, err := s.c.PutObject(ctx, key, &cutReader{n: n}, sbxdb.PutObjectOptions{Size: size})
				if !errors.Is(err, errCut) {
					t.Errorf("PUT %q of a body cut at %d (size %d): %v; want the reader's error", key, n, size, err)
				}
			}
		}
	}
	s.unchanged(before, "bodies cut short by the client")

	for _, n := range []int{1000, cas.MaxPacked + 100_000} {
		for _, key := range []string{"new", testkit.FileKeyOf([]byte("y"))} {
			conn, err := net.Dial("tcp", s.ts.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			w := bufio.NewWriter(conn)
			fmt.Fprintf(w, "PUT /v1/blobs/%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", key, n+1)
			w.Write(bytes.Repeat([]byte{'z'}, n))
			w.Flush()
			conn.Close()
		}
	}
	s.unchanged(before, "bodies cut short on the connection")
}

func TestBlobRange(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	for _, data := range [][]byte{[]byte("0123456789"), large(3)} {
		key := testkit.FileKeyOf(data)
		s.put(key, data, sbxdb.PutObjectOptions{})
		size := int64(len(data))
		for _, c := range []struct {
			spec     string
			from, to int64 // want data[from:to]
		}{
			{"bytes=2-5", 2, 6}, {"bytes=0-0", 0, 1}, {"bytes=3-", 3, size}, {"bytes=-4", size - 4, size},
			{"bytes=4-999999999", 4, size}, {"bytes=-999999999", 0, size}, {fmt.Sprintf("bytes=%d-", size-1), size - 1, size},
		} {
			status, h, body := s.raw("GET", "/v1/blobs/"+key, nil, map[string]string{"Range": c.spec})
			wantRange := fmt.Sprintf("bytes %d-%d/%d", c.from, c.to-1, size)
			if status != 206 || !bytes.Equal(body, data[c.from:c.to]) || h.Get("Content-Range") != wantRange {
				t.Errorf("%s of %d bytes: %d %q, %d bytes; want 206 %q", c.spec, size, status, h.Get("Content-Range"), len(body), wantRange)
			}
		}
		for _, spec := range []string{fmt.Sprintf("bytes=%d-", size), "bytes=-0", "bytes=5-2", "bytes=0-1,3-4", "bytes=x-y", "items=0-1", "bytes=+1-2", "bytes=1"} {
			status, h, body := s.raw("GET", "/v1/blobs/"+key, nil, map[string]string{"Range": spec})
			wantError(t, spec, status, body, 416, "SBXDB_RANGE")
			if h.Get("Content-Range") != fmt.Sprintf("bytes */%d", size) {
				t.Errorf("%s: Content-Range %q", spec, h.Get("Content-Range"))
			}
		}
		// Through the client.
		if got, info := s.read(key, 3, 4); !bytes.Equal(got, data[3:7]) || info.Size != size {
			t.Errorf("OpenObject(3, 4) = %q, %+v", got, info)
		}
		if got, _ := s.read(key, 5, -1); !bytes.Equal(got, data[5:]) {
			t.Errorf("OpenObject(5, -1) = %d bytes", len(got))
		}
		if got, _ := s.read(key, size, 10); len(got) != 0 {
			t.Errorf("OpenObject at the end = %d bytes", len(got))
		}
		if _, _, err := s.c.OpenObject(ctx, key, size+1, -1); !errors.Is(err, client.ErrRange) {
			t.Errorf("OpenObject past the end: %v", err)
		}
	}
	empty := []byte{}
	s.put(testkit.FileKeyOf(empty), empty, sbxdb.PutObjectOptions{Size: 0})
	if got, info := s.read(testkit.FileKeyOf(empty), 0, 10); len(got) != 0 || info.Size != 0 {
		t.Errorf("OpenObject(0, 10) of an empty blob = %q, %+v", got, info)
	}
}

// TestBlobDamaged: damage known before the body is a 422; damage found at
// the end of a streamed body cuts the body off, which the client's Read
// reports.
func TestBlobDamaged(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	small, big := []byte(strings.Repeat("packed ", 50)), large(4)
	s.put(testkit.FileKeyOf(small), small, sbxdb.PutObjectOptions{})
	s.put(testkit.FileKeyOf(big), big, sbxdb.PutObjectOptions{})
	root := filepath.Join(s.db.Dir(), engine.BlobDir)
	packs, _ := filepath.Glob(filepath.Join(root, "packs", "*.pack"))
	larges, _ := filepath.Glob(filepath.Join(root, "large", "*", "*", "*"))
	if len(packs) != 1 || len(larges) != 1 {
		t.Fatalf("packs %v, large files %v", packs, larges)
	}
	for _, p := range append(packs, larges...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-1] ^= 0xff
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	status, _, body := s.raw("GET", "/v1/blobs/"+testkit.FileKeyOf(small), nil, nil)
	wantError(t, "GET of damaged packed bytes", status, body, 422, chain.CodeInvalidBlob)
	if _, _, err := s.c.OpenObject(ctx, testkit.FileKeyOf(small), 0, -1); !errors.Is(err, chain.ErrInvalidBlob) {
		t.Errorf("client GET of damaged packed bytes: %v", err)
	}
	// The last byte: the damage shows while the bytes before it are
	// skipped, before the status is sent.
	if _, _, err := s.c.OpenObject(ctx, testkit.FileKeyOf(big), int64(len(big))-1, 1); !errors.Is(err, chain.ErrInvalidBlob) {
		t.Errorf("client GET of the last byte of a damaged large blob: %v", err)
	}
	for _, rng := range [][2]int64{{0, -1}, {0, 100}, {1000, 1}} {
		r, info, err := s.c.OpenObject(ctx, testkit.FileKeyOf(big), rng[0], rng[1])
		if err != nil {
			t.Fatalf("OpenObject of a damaged large blob: %v (its damage shows at the end)", err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("reading %v of a damaged large blob (%d bytes): %d bytes, %v; want io.ErrUnexpectedEOF", rng, info.Size, len(got), err)
		}
	}
}

func TestBlobHeadRefreshes(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	data := []byte("the host heads it and skips the upload")
	key := testkit.FileKeyOf(data)
	s.put(key, data, sbxdb.PutObjectOptions{})
	s.advance(3 * time.Hour)
	info, err := s.c.StatObject(ctx, key)
	if err != nil || info.Uploaded != s.clock.Load() {
		t.Fatalf("HEAD = %+v, %v; want uploaded now", info, err)
	}
	s.advance(50 * time.Minute)
	if res, err := s.db.Sweep(ctx, sbxdb.SweepOptions{OlderThan: time.Hour}); err != nil || len(res.Deleted) != 0 {
		t.Fatalf("sweep within an hour of the HEAD deleted %v (%v)", res.Deleted, err)
	}
	// A GET reads; it does not refresh.
	s.read(key, 0, -1)
	s.advance(20 * time.Minute)
	if res, err := s.db.Sweep(ctx, sbxdb.SweepOptions{OlderThan: time.Hour}); err != nil || !slices.Equal(res.Deleted, []string{key}) {
		t.Fatalf("sweep past the window deleted %v (%v)", res.Deleted, err)
	}
}

func TestBlobDeleteInUse(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	byCp, byObj, byRec, free := []byte("cp"), []byte("obj"), []byte("rec"), []byte("free")
	for _, b := range [][]byte{byCp, byRec, free} {
		s.put(testkit.ArtifactKeyOf(b), b, sbxdb.PutObjectOptions{})
	}
	s.put("o", byObj, sbxdb.PutObjectOptions{})
	l, err := s.db.AcquireWriter(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	cp := &chain.Checkpoint{ID: "c1", ThreadID: "t", CreatedAt: 1, Reason: chain.ReasonAutomatic,
		Artifacts: []chain.Artifact{{ArtifactID: "a", Name: "a", MimeType: "m", BlobKey: testkit.ArtifactKeyOf(byCp), CreatedAt: 1}}}
	if _, err := s.db.Append(ctx, chain.AppendInput{Checkpoint: cp, Writer: l.Writer}); err != nil {
		t.Fatal(err)
	}
	if err := s.c.ArtifactRecords().Save(ctx, sbxdb.ArtifactRecord{ArtifactID: "r", RunID: "run", ThreadID: "t", BlobKey: testkit.ArtifactKeyOf(byRec), Name: "n", MimeType: "m"}); err != nil {
		t.Fatal(err)
	}
	before := s.state()
	for _, b := range [][]byte{byCp, byObj, byRec} {
		status, _, body := s.raw("DELETE", "/v1/blobs/"+testkit.ArtifactKeyOf(b), nil, nil)
		wantError(t, "DELETE of a blob in use", status, body, 409, "SBXDB_BLOB_IN_USE")
		if err := s.c.DeleteObject(ctx, testkit.ArtifactKeyOf(b)); !errors.Is(err, sbxdb.ErrBlobInUse) {
			t.Errorf("client DELETE of a blob in use: %v", err)
		}
	}
	s.unchanged(before, "refused DELETEs")
	status, _, body := s.raw("DELETE", "/v1/blobs/"+testkit.ArtifactKeyOf(free), nil, nil)
	if status != 204 || len(body) != 0 {
		t.Errorf("DELETE of a free blob: %d %q", status, body)
	}
	if err := s.c.DeleteObject(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.c.OpenObject(ctx, "o", 0, -1); !errors.Is(err, sbxdb.ErrBlobNotFound) {
		t.Errorf("GET of a deleted object: %v", err)
	}
	if err := s.c.DeleteObject(ctx, testkit.ArtifactKeyOf(byObj)); err != nil {
		t.Errorf("DELETE of the bytes of a deleted object: %v", err)
	}
}

func TestPlainObjectMetadata(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	key := "reports/2030 Q1/résumé?#%+.md"
	// Any strings: camelCase names (TanStack's runId, threadId), blanks,
	// control characters, quotes, characters past the BMP, an empty name.
	md := map[string]string{"owner": "agent 7", "note": "ünïcode ✓", "x-y.z_w": "1", "runId": "run-1",
		"threadId": "t", "a b\tc": " spaced \r\n", `q"\`: "\x00\x7f", "emoji 😀": "😀", "": "nameless"}
	data := []byte("# report\n")
	info := s.put(key, data, sbxdb.PutObjectOptions{ContentType: "text/markdown", CustomMetadata: md})
	sum := sha256.Sum256(data)
	want := sbxdb.ObjectInfo{Key: key, Size: int64(len(data)), Uploaded: s.clock.Load(), SHA256: fmt.Sprintf("%x", sum),
		ContentType: "text/markdown", CustomMetadata: md}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("PUT (-want +got):\n%s", diff)
	}
	got, rinfo := s.read(key, 0, -1)
	if diff := cmp.Diff(want, rinfo); diff != "" || !bytes.Equal(got, data) {
		t.Errorf("GET %q (-want +got):\n%s", got, diff)
	}
	if sinfo, err := s.c.StatObject(ctx, key); err != nil || !cmp.Equal(sinfo, want) {
		t.Errorf("HEAD = %+v, %v", sinfo, err)
	}
	objs, _, err := s.c.ListObjects(ctx, "reports/", "", 10)
	if err != nil || len(objs) != 1 || !cmp.Equal(objs[0], want) {
		t.Errorf("LIST = %+v, %v", objs, err)
	}
	// On the wire: one X-Sbxdb-Metadata header of ASCII JSON.
	segs := strings.Split(key, "/")
	for i := range segs {
		segs[i] = url.PathEscape(segs[i])
	}
	status, h, _ := s.raw("HEAD", "/v1/blobs/"+strings.Join(segs, "/"), nil, nil)
	enc := h.Get(server.HeaderMetadata)
	var back map[string]string
	if status != 200 || json.Unmarshal([]byte(enc), &back) != nil || !maps.Equal(back, md) ||
		strings.ContainsFunc(enc, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
		t.Errorf("HEAD: %d, %s %q", status, server.HeaderMetadata, enc)
	}
	// Raw: the JSON header, or the entry headers of earlier clients (names
	// arrive whatever their case); no type, no Content-Type header.
	for _, hdr := range []map[string]string{
		{"X-SBXDB-META-Color": "blue"},
		{"x-sbxdb-metadata": `{"color":"blue"}`},
		{"X-Sbxdb-Metadata": ` {"color":"\u0062lue"} `},
	} {
		status, _, body := s.raw("PUT", "/v1/blobs/plain", strings.NewReader("p"), hdr)
		var pinfo sbxdb.ObjectInfo
		if json.Unmarshal(body, &pinfo); status != 200 || !maps.Equal(pinfo.CustomMetadata, map[string]string{"color": "blue"}) {
			t.Errorf("raw PUT with %v: %d %s", hdr, status, body)
		}
	}
	if status, h, _ := s.raw("GET", "/v1/blobs/plain", nil, nil); status != 200 || h.Get("Content-Type") != "" || h.Get(server.HeaderMetadata) != `{"color":"blue"}` {
		t.Errorf("GET of an object without a type: %d, %v", status, h)
	}
	before := s.state()
	for _, hdr := range []map[string]string{
		{"X-Sbxdb-Metadata": `{"a":"b"}`, "X-Sbxdb-Meta-C": "d"},
		{"X-Sbxdb-Metadata": `["a"]`},
		{"X-Sbxdb-Metadata": `null`},
		{"X-Sbxdb-Metadata": `{"a":1}`},
		{"X-Sbxdb-Metadata": `{"a":"b"} {}`},
		{"X-Sbxdb-Metadata": `{"a":"b"`},
		{"X-Sbxdb-Metadata": `{"a":"\ud800"}`},
		{"X-Sbxdb-Metadata": `{"\udc00":"b"}`},
		{"X-Sbxdb-Metadata": `{"a":"\ud83d\u0041"}`},
		{"X-Sbxdb-Metadata": `{"a":"` + strings.Repeat("v", sbxdb.MaxObjectMetaBytes) + `"}`},
	} {
		status, _, body := s.raw("PUT", "/v1/blobs/refused", strings.NewReader("p"), hdr)
		wantError(t, fmt.Sprintf("PUT with %.60v", hdr), status, body, 400, "SBXDB_BAD_REQUEST")
	}
	s.unchanged(before, "refused metadata")
	// A well-formed surrogate pair is one character.
	status, _, body := s.raw("PUT", "/v1/blobs/pair", strings.NewReader("p"), map[string]string{"X-Sbxdb-Metadata": `{"e":"\ud83d\ude00"}`})
	var pinfo sbxdb.ObjectInfo
	if json.Unmarshal(body, &pinfo); status != 200 || pinfo.CustomMetadata["e"] != "😀" {
		t.Errorf("PUT with a surrogate pair: %d %s", status, body)
	}
}

func TestBlobList(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	var want []string
	for i := range 5 {
		b := []byte{byte(i)}
		s.put(testkit.FileKeyOf(b), b, sbxdb.PutObjectOptions{})
		want = append(want, testkit.FileKeyOf(b))
	}
	for _, key := range []string{"a", "b/1", "b/2", "é", "zz"} {
		s.put(key, []byte("v "+key), sbxdb.PutObjectOptions{})
		want = append(want, key, testkit.ArtifactKeyOf([]byte("v "+key)))
	}
	slices.Sort(want)
	for _, limit := range []int{1, 3, 4, len(want), sbxdb.MaxListObjects} {
		var got []string
		cursor := ""
		for range len(want) + 1 {
			page, next, err := s.c.ListObjects(ctx, "", cursor, limit)
			if err != nil || len(page) > limit {
				t.Fatalf("limit %d: %d, %v", limit, len(page), err)
			}
			for _, o := range page {
				got = append(got, o.Key)
			}
			if cursor = next; next == "" {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: %v\nwant %v", limit, got, want)
		}
	}
	if page, next, err := s.c.ListObjects(ctx, "b/", "b/1", 10); err != nil || next != "" || len(page) != 1 || page[0].Key != "b/2" {
		t.Errorf("prefix b/ after b/1: %v %q %v", page, next, err)
	}
	// Raw: the cursor is null on the last page; a limit the engine
	// refuses, or that is not a number, is a bad request.
	status, _, body := s.raw("GET", "/v1/blobs?prefix=zz", nil, nil)
	if status != 200 || !strings.Contains(string(body), `"cursor":null`) {
		t.Errorf("last page: %d %s", status, body)
	}
	status, _, body = s.raw("GET", "/v1/blobs?limit=2", nil, nil)
	if status != 200 || !strings.Contains(string(body), fmt.Sprintf(`"cursor":%q`, want[1])) {
		t.Errorf("first page of 2: %d %s", status, body)
	}
	for _, q := range []string{"limit=-1", "limit=1001", "limit=x", "limit=", "prefix=%zz"} {
		status, _, body := s.raw("GET", "/v1/blobs?"+q, nil, nil)
		wantError(t, q, status, body, 400, "SBXDB_BAD_REQUEST")
	}
	// Limit 0: an empty page without a cursor, however many keys match.
	status, _, body = s.raw("GET", "/v1/blobs?limit=0", nil, nil)
	if status != 200 || string(body) != `{"objects":[],"cursor":null}`+"\n" {
		t.Errorf("limit 0: %d %q", status, body)
	}
	if page, next, err := s.c.ListObjects(ctx, "", "", 0); err != nil || len(page) != 0 || next != "" {
		t.Errorf("client list with limit 0: %v %q %v", page, next, err)
	}
}

func TestArtifactRecordsServed(t *testing.T) {
	s := newServed(t)
	ctx := context.Background()
	recs := s.c.ArtifactRecords()
	art := []byte("artifact bytes")
	s.put(testkit.ArtifactKeyOf(art), art, sbxdb.PutObjectOptions{})
	for _, id := range []string{"😀", "é", "a", "B"} {
		r := sbxdb.ArtifactRecord{ArtifactID: id, RunID: "run", ThreadID: "t", Name: "n " + id, MimeType: "text/plain", Size: 1, CreatedAt: 10}
		if id == "a" {
			r.BlobKey, r.SourceURL = testkit.ArtifactKeyOf(art), "https://example.com/a"
		}
		if err := recs.Save(ctx, r); err != nil {
			t.Fatalf("Save %q: %v", id, err)
		}
	}
	if err := recs.Save(ctx, sbxdb.ArtifactRecord{ArtifactID: "first", RunID: "run", ThreadID: "t2", Name: "n", MimeType: "m", CreatedAt: -5}); err != nil {
		t.Fatal(err)
	}
	ids := func(l []sbxdb.ArtifactRecord) []string {
		var out []string
		for _, r := range l {
			out = append(out, r.ArtifactID)
		}
		return out
	}
	byRun, err := recs.ListForRun(ctx, "run")
	if err != nil || !slices.Equal(ids(byRun), []string{"first", "B", "a", "é", "😀"}) {
		t.Errorf("ListForRun = %v, %v", ids(byRun), err)
	}
	byThread, err := recs.ListForThread(ctx, "t")
	if err != nil || !slices.Equal(ids(byThread), []string{"B", "a", "é", "😀"}) {
		t.Errorf("ListForThread = %v, %v", ids(byThread), err)
	}
	if l, err := recs.ListForRun(ctx, "none"); err != nil || l == nil || len(l) != 0 {
		t.Errorf("ListForRun of an unknown run = %#v, %v", l, err)
	}
	got, err := recs.Get(ctx, "a")
	if want := (sbxdb.ArtifactRecord{ArtifactID: "a", RunID: "run", ThreadID: "t", BlobKey: testkit.ArtifactKeyOf(art), Name: "n a", MimeType: "text/plain",
		Size: 1, SourceURL: "https://example.com/a", CreatedAt: 10}); err != nil || got == nil || *got != want {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if got, err := recs.Get(ctx, "none"); got != nil || err != nil {
		t.Errorf("Get of an unknown id = %+v, %v", got, err)
	}

	// Refused: codes as the engine gives them, nothing changed.
	for _, c := range []struct {
		rec  sbxdb.ArtifactRecord
		code error
	}{
		{sbxdb.ArtifactRecord{ArtifactID: "", RunID: "", ThreadID: "t", Name: "n", MimeType: "m"}, chain.ErrInvalidID},
		{sbxdb.ArtifactRecord{ArtifactID: "a", RunID: "run", ThreadID: "t", Name: "", MimeType: "m"}, chain.ErrInvalidEntry},
		{sbxdb.ArtifactRecord{ArtifactID: "a", RunID: "run", ThreadID: "t", Name: "n", MimeType: "m", BlobKey: "docs//x"}, chain.ErrInvalidEntry},
		{sbxdb.ArtifactRecord{ArtifactID: "a", RunID: "run", ThreadID: "t", Name: "n", MimeType: "m", Size: -1}, chain.ErrInvalidEntry},
	} {
		if err := recs.Save(ctx, c.rec); !errors.Is(err, c.code) {
			t.Errorf("Save %+v: %v; want %v", c.rec, err, c.code)
		}
	}
	for _, c := range []struct{ body, code string }{
		{`{"artifactId":"\ud800","runId":"r","threadId":"t","name":"n","mimeType":"m","size":1,"createdAt":1}`, chain.CodeInvalidID},
		{`{"artifactId":"x","runId":"r","threadId":"t","name":"n","mimeType":"m","size":1}`, chain.CodeInvalidEntry},
		{`{"artifactId":"x","runId":"r","threadId":"t","name":"n","mimeType":"m","size":1.5,"createdAt":1}`, chain.CodeInvalidEntry},
		{`{"artifactId":"x","runId":"r","threadId":"t","name":"n","mimeType":"m","size":1,"createdAt":1,"sourceUrl":7}`, chain.CodeInvalidEntry},
		{`{"artifactId":"x","runId":5,"threadId":"t","name":"n","mimeType":"m","size":1,"createdAt":"1"}`, chain.CodeInvalidID},
		{`[1]`, "SBXDB_BAD_REQUEST"},
	} {
		status, _, body := s.raw("POST", "/v1/artifacts/save", strings.NewReader(c.body), nil)
		wantError(t, c.body, status, body, 400, c.code)
	}
	for _, body := range []string{`{"runId":"run","threadId":"t"}`, `{}`} {
		status, _, resp := s.raw("POST", "/v1/artifacts/list", strings.NewReader(body), nil)
		wantError(t, "list "+body, status, resp, 400, "SBXDB_BAD_REQUEST")
	}
	if after, _ := recs.ListForRun(ctx, "run"); !cmp.Equal(after, byRun) {
		t.Errorf("refused saves changed the run: %v", ids(after))
	}
	// null optional members are absent.
	status, _, body := s.raw("POST", "/v1/artifacts/save", strings.NewReader(
		`{"artifactId":"nulls","runId":"r2","threadId":"t","name":"n","mimeType":"m","size":0,"createdAt":0,"blobKey":null,"sourceUrl":null}`), nil)
	if status != 200 || string(bytes.TrimSpace(body)) != "{}" {
		t.Errorf("save with null optionals: %d %s", status, body)
	}

	// The record holds its blob against a sweep until it is deleted.
	s.advance(time.Hour)
	if res, err := s.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil || len(res.Deleted) != 0 {
		t.Errorf("sweep while the record holds the blob deleted %v (%v)", res.Deleted, err)
	}
	if err := recs.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if n, err := recs.DeleteForRun(ctx, "run"); n != 4 || err != nil {
		t.Errorf("DeleteForRun = %d, %v; want 4", n, err)
	}
	if res, err := s.db.Sweep(ctx, sbxdb.SweepOptions{Immediate: true}); err != nil || !slices.Equal(res.Deleted, []string{testkit.ArtifactKeyOf(art)}) {
		t.Errorf("sweep once the record is gone deleted %v (%v)", res.Deleted, err)
	}
}
