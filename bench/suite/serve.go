package suite

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/client"
	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/server"
)

// Served opens a fresh durable store, serves it on a unix socket in its
// own directory, as sbxdb serve does, and returns the store and a client
// of the socket; all are closed when tb ends. The socket's path is kept
// short (sun_path holds 108 bytes) by placing it in a temporary directory.
func Served(tb testing.TB) (*engine.DB, *client.Client) {
	tb.Helper()
	db := openDB(tb, Durable())
	sockDir, err := os.MkdirTemp("", "sbxsock")
	if err != nil {
		tb.Fatal(err)
	}
	sock := filepath.Join(sockDir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	srv := server.New(db, server.Options{})
	hs := &http.Server{Handler: srv, ConnContext: srv.ConnContext}
	go hs.Serve(ln)
	c, err := client.New("unix:"+sock, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		hs.Close()
		os.RemoveAll(sockDir)
	})
	return db, c
}

// AppendServed is AppendConcurrent through the API: n goroutines of one
// client, each appending durably to its own thread over the unix socket.
// n = 1 is the serial append.
func AppendServed(b *testing.B, n int) {
	_, c := Served(b)
	ws := writers(b, c, n, SmallFiles)
	b.ResetTimer()
	elapsed, err := appendConcurrently(c, ws, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportRate(b, b.N, elapsed)
}

// blobBody is a size-byte body of compressible text whose first 8 bytes
// number it, so that every op stores new content.
type blobBody struct {
	base []byte
}

func newBlobBody(size int) *blobBody {
	r := rand.New(rand.NewPCG(1, 2))
	base := make([]byte, size)
	const alphabet = "func main() { return nil }\n\tif err != nil {\n"
	for i := range base {
		base[i] = alphabet[r.IntN(len(alphabet))]
	}
	return &blobBody{base: base}
}

// next numbers the body n and returns it with its content-addressed key.
func (bb *blobBody) next(n uint64) ([]byte, string) {
	binary.BigEndian.PutUint64(bb.base, n)
	sum := sha256.Sum256(bb.base)
	return bb.base, chain.ArtifactPrefix + hex.EncodeToString(sum[:])
}

// BlobPut stores a new size-byte blob per op, durably, in process
// (served false) or over the socket; MB/s counts the body bytes.
func BlobPut(b *testing.B, size int, served bool) {
	db, c := Served(b)
	put := func(key string, body []byte) error {
		if served {
			_, err := c.PutObject(ctx, key, bytes.NewReader(body), sbxdb.PutObjectOptions{Size: int64(len(body))})
			return err
		}
		_, err := db.PutObject(ctx, key, bytes.NewReader(body), sbxdb.PutObjectOptions{Size: int64(len(body))})
		return err
	}
	bb := newBlobBody(size)
	b.SetBytes(int64(size))
	n := uint64(0)
	for b.Loop() {
		n++
		body, key := bb.next(n)
		if err := put(key, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BlobGet reads one stored size-byte blob whole per op, verified, in
// process or over the socket.
func BlobGet(b *testing.B, size int, served bool) {
	db, c := Served(b)
	body, key := newBlobBody(size).next(1)
	if _, err := db.PutObject(ctx, key, bytes.NewReader(body), sbxdb.PutObjectOptions{Size: int64(len(body))}); err != nil {
		b.Fatal(err)
	}
	open := func() (io.ReadCloser, error) {
		if served {
			r, _, err := c.OpenObject(ctx, key, 0, -1)
			return r, err
		}
		r, _, err := db.OpenObject(ctx, key)
		return r, err
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		r, err := open()
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, r)
		r.Close()
		if err != nil || n != int64(size) {
			b.Fatalf("read %d of %d bytes: %v", n, size, err)
		}
	}
}
