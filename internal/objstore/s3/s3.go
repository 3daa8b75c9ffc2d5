// Package s3 is the objstore.Store of a bucket on an S3-compatible server
// (AWS S3, versitygw, MinIO, ...), spoken to through minio-go.
//
// Object name N is the key PREFIX/N of the bucket. A Put of up to
// Config.PartSize bytes is one PUT request; a larger one is a multipart
// upload streamed part by part through one part-sized buffer, so memory
// stays bounded whatever the object's size, and a Put that fails or is
// cancelled aborts its upload, leaving no object and no stored parts.
//
// Put with IfAbsent sends If-None-Match: * on the PUT (or on the
// CompleteMultipartUpload), which AWS S3 and versitygw evaluate atomically.
// The first IfAbsent Put of a Store probes whether the server honours the
// header; one that ignores it gets a HEAD before the PUT instead, which is
// best effort: two writers racing between HEAD and PUT may both write.
// A multipart IfAbsent Put always HEADs first, so as not to upload an
// object that exists.
//
// Errors wrap objstore.ErrNotExist, objstore.ErrExists and, for a refused
// connection, a timeout or an HTTP 5xx after Config.MaxRetries attempts,
// sbxdb.ErrBlobsUnavailable. A refusal the server states (wrong credentials,
// access denied) is none of these: trying again will not help.
//
// Over http a request's body is signed chunk by chunk (SigV4 streaming), so
// the server rejects altered bytes; over https, TLS protects it and the
// payload goes unsigned. Store.Requests counts the requests sent, by S3
// operation.
package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/sbxdb/sbxdb/internal/objstore"
)

// Defaults of Config's zero fields.
const (
	DefaultRegion                = "us-east-1"
	DefaultPartSize              = 16 << 20
	DefaultMaxRetries            = 3
	DefaultListPageSize          = 1000
	DefaultDialTimeout           = 5 * time.Second
	DefaultResponseHeaderTimeout = time.Minute
)

// Limits S3 puts on multipart uploads.
const (
	MinPartSize = 5 << 20
	maxParts    = 10_000
)

// Config says where the bucket is and how to talk to it.
type Config struct {
	// Endpoint is the server's URL, http:// or https://, addressed
	// path-style (http://host:port/BUCKET/KEY). Empty means AWS S3,
	// addressed as AWS prefers.
	Endpoint string
	Region   string // DefaultRegion when empty

	AccessKey, SecretKey, SessionToken string

	Bucket string
	Prefix string // keys are Prefix/NAME; no leading or trailing slash

	// PartSize is the size of a multipart upload's parts, and so the size
	// above which a Put is multipart and the buffer each Put holds.
	// At least MinPartSize; DefaultPartSize when zero.
	PartSize int64
	// MaxRetries is how many times a request is sent before its failure is
	// returned (1: no retries); DefaultMaxRetries when zero. minio-go waits
	// 200 ms doubling to at most 1 s between tries, so a server that is
	// down fails a request within about MaxRetries seconds.
	MaxRetries int
	// ListPageSize is the keys asked for per list request;
	// DefaultListPageSize (S3's maximum) when zero.
	ListPageSize int
	// DialTimeout bounds connecting; ResponseHeaderTimeout bounds the wait
	// for a response's headers once its request is sent.
	DialTimeout, ResponseHeaderTimeout time.Duration
}

// ParseURL splits "s3://BUCKET/PREFIX" into bucket and prefix (the prefix
// may be empty; slashes around it are dropped).
func ParseURL(s string) (bucket, prefix string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("objstore/s3: %w", err)
	}
	if u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("objstore/s3: %q is not s3://BUCKET[/PREFIX]", s)
	}
	if err := s3utils.CheckValidBucketNameStrict(u.Host); err != nil {
		return "", "", fmt.Errorf("objstore/s3: bucket %q: %w", u.Host, err)
	}
	prefix = strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := objstore.ValidName(prefix); err != nil {
			return "", "", fmt.Errorf("objstore/s3: prefix %q: %w", prefix, err)
		}
	}
	return u.Host, prefix, nil
}

// ConfigFromEnv returns the Config of rawURL ("s3://BUCKET/PREFIX") with the
// server and credentials from the environment variables AWS tools read:
// AWS_ENDPOINT_URL_S3 or else AWS_ENDPOINT_URL (empty: AWS itself),
// AWS_REGION or else AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
func ConfigFromEnv(rawURL string) (Config, error) {
	bucket, prefix, err := ParseURL(rawURL)
	if err != nil {
		return Config{}, err
	}
	c := Config{
		Bucket:       bucket,
		Prefix:       prefix,
		Endpoint:     firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
		Region:       firstEnv("AWS_REGION", "AWS_DEFAULT_REGION"),
		AccessKey:    os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretKey:    os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: os.Getenv("AWS_SESSION_TOKEN"),
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return Config{}, errors.New("objstore/s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set")
	}
	return c, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// Store is the objstore.Store of one bucket and prefix.
type Store struct {
	client *minio.Client
	core   minio.Core // the same client, for the multipart calls
	bucket string
	prefix string // "" or ending in "/"
	cfg    Config
	count  *counter
	tr     *http.Transport
	bufs   sync.Pool // *[]byte of cfg.PartSize

	condMu sync.Mutex
	cond   conditional // settled by the first IfAbsent Put
}

var _ objstore.Store = (*Store)(nil)

// conditional is what the server does with If-None-Match: * on a PUT.
type conditional int

const (
	condUnknown conditional = iota
	condHonoured
	condIgnored
)

// Open returns the Store cfg describes, creating the bucket if it is
// missing. It makes one or two requests, so an unreachable server fails
// here with sbxdb.ErrBlobsUnavailable.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.PartSize < MinPartSize {
		return nil, fmt.Errorf("objstore/s3: part size %d is below S3's minimum of %d", cfg.PartSize, MinPartSize)
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = DefaultMaxRetries
	}
	if cfg.ListPageSize <= 0 || cfg.ListPageSize > DefaultListPageSize {
		cfg.ListPageSize = DefaultListPageSize
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.ResponseHeaderTimeout <= 0 {
		cfg.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	cfg.Prefix = strings.Trim(cfg.Prefix, "/")
	if cfg.Prefix != "" {
		if err := objstore.ValidName(cfg.Prefix); err != nil {
			return nil, fmt.Errorf("objstore/s3: prefix %q: %w", cfg.Prefix, err)
		}
	}
	if err := s3utils.CheckValidBucketNameStrict(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("objstore/s3: bucket %q: %w", cfg.Bucket, err)
	}

	host, secure, lookup := "s3.amazonaws.com", true, minio.BucketLookupAuto
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
			return nil, fmt.Errorf("objstore/s3: endpoint %q is not http(s)://HOST[:PORT]", cfg.Endpoint)
		}
		host, secure, lookup = u.Host, u.Scheme == "https", minio.BucketLookupPath
	}
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("objstore/s3: %w", err)
	}
	tr.DialContext = (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.ResponseHeaderTimeout = cfg.ResponseHeaderTimeout
	count := &counter{}
	client, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		Secure:       secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    &countingTransport{next: tr, count: count, bucket: cfg.Bucket},
		MaxRetries:   cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("objstore/s3: %w", err)
	}
	s := &Store{client: client, core: minio.Core{Client: client}, bucket: cfg.Bucket, cfg: cfg, count: count, tr: tr}
	if cfg.Prefix != "" {
		s.prefix = cfg.Prefix + "/"
	}
	s.bufs.New = func() any { b := make([]byte, cfg.PartSize); return &b }
	if err := s.ensureBucket(ctx); err != nil {
		return nil, &objstore.Error{Op: "open", Name: "s3://" + cfg.Bucket + "/" + cfg.Prefix, Err: err}
	}
	return s, nil
}

func (s *Store) ensureBucket(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return s.mapErr(ctx, err)
	}
	if ok {
		return nil
	}
	err = s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: s.cfg.Region})
	if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
		return nil // made meanwhile, by us or another process
	}
	return s.mapErr(ctx, err)
}

// Close implements objstore.Store; it closes idle connections.
func (s *Store) Close() error {
	s.tr.CloseIdleConnections()
	return nil
}

// Requests returns the requests the Store has sent so far, retries included.
func (s *Store) Requests() RequestCounts { return s.count.load() }

func (s *Store) key(name string) string { return s.prefix + name }

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) error {
	if err := s.put(ctx, name, r, size, opts); err != nil {
		return &objstore.Error{Op: "put", Name: name, Err: s.mapErr(ctx, err)}
	}
	return nil
}

func (s *Store) put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) error {
	if err := objstore.ValidName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	key := s.key(name)
	partSize := s.cfg.PartSize
	if size > partSize*maxParts {
		partSize = (size + maxParts - 1) / maxParts
	}
	multipart := size < 0 || size > partSize

	ifNoneMatch := false
	if opts.IfAbsent {
		c, err := s.conditional(ctx)
		if err != nil {
			return err
		}
		ifNoneMatch = c == condHonoured
		if !ifNoneMatch || multipart {
			if _, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err == nil {
				return objstore.ErrExists
			} else if !isNotFound(err) {
				return err
			}
		}
	}

	// A cancelled ctx stops the copy with ctx's error, which is no sourceError.
	from := &sourceReader{r}
	src := objstore.ContextReader(ctx, from)
	if !multipart {
		// A buffer of the object's size, not a part: most Puts are small.
		buf := make([]byte, size)
		if n, err := io.ReadFull(src, buf); err != nil {
			return shortRead(err, int64(n), size)
		}
		return s.putOne(ctx, key, buf, ifNoneMatch)
	}

	var buf []byte
	if partSize == s.cfg.PartSize {
		bp := s.bufs.Get().(*[]byte)
		defer s.bufs.Put(bp)
		buf = *bp
	} else {
		buf = make([]byte, partSize) // an object over maxParts*PartSize: rare, not pooled
	}
	limit := size
	if size >= 0 {
		from.r = io.LimitReader(r, size)
	}
	n, err := io.ReadFull(src, buf)
	if size < 0 && (err == io.EOF || err == io.ErrUnexpectedEOF) {
		return s.putOne(ctx, key, buf[:n], ifNoneMatch) // a stream that fits one part
	}
	if err != nil {
		return shortRead(err, int64(n), limit)
	}
	return s.putMultipart(ctx, key, src, buf, limit, ifNoneMatch)
}

// shortRead reports a reader that ended after n of want bytes (want < 0:
// an unknown size, so only a read error counts).
func shortRead(err error, n, want int64) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("reader ended after %d of %d bytes: %w", n, want, io.ErrUnexpectedEOF)
	}
	return err
}

func (s *Store) putOne(ctx context.Context, key string, data []byte, ifNoneMatch bool) error {
	opts := minio.PutObjectOptions{}
	if ifNoneMatch {
		opts.SetMatchETagExcept("*")
	}
	_, err := s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), "", "", opts)
	return err
}

// putMultipart uploads the object whose first part is buf, reading the
// rest from src (which stops at size when size >= 0). On any error the
// upload is aborted under a context of its own, since ctx may be the
// reason for the error.
func (s *Store) putMultipart(ctx context.Context, key string, src io.Reader, buf []byte, size int64, ifNoneMatch bool) (err error) {
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, key, minio.PutObjectOptions{})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			s.core.AbortMultipartUpload(actx, s.bucket, key, id)
		}
	}()
	var parts []minio.CompletePart
	total := int64(0)
	chunk := buf
	for {
		p, err := s.core.PutObjectPart(ctx, s.bucket, key, id, len(parts)+1, bytes.NewReader(chunk), int64(len(chunk)), minio.PutObjectPartOptions{})
		if err != nil {
			return err
		}
		parts = append(parts, minio.CompletePart{PartNumber: len(parts) + 1, ETag: p.ETag})
		total += int64(len(chunk))
		if size >= 0 && total == size {
			break
		}
		want := int64(len(buf))
		if size >= 0 {
			want = min(want, size-total)
		}
		n, rerr := io.ReadFull(src, buf[:want])
		chunk = buf[:n]
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			if size >= 0 {
				return shortRead(rerr, total+int64(n), size)
			}
			if n == 0 {
				break
			}
		} else if rerr != nil {
			return rerr
		}
		if len(parts) == maxParts {
			return fmt.Errorf("object exceeds %d parts of %d bytes", maxParts, len(buf))
		}
	}
	opts := minio.PutObjectOptions{}
	if ifNoneMatch {
		opts.SetMatchETagExcept("*")
	}
	_, err = s.core.CompleteMultipartUpload(ctx, s.bucket, key, id, parts, opts)
	return err
}

// conditional returns what the server does with If-None-Match: *, probing
// it on first use: a PUT of a fresh key with the header must succeed and a
// second one must fail with 412. The probe key, under the prefix and
// outside the names objstore allows, is deleted after.
func (s *Store) conditional(ctx context.Context) (conditional, error) {
	s.condMu.Lock()
	defer s.condMu.Unlock()
	if s.cond != condUnknown {
		return s.cond, nil
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	key := s.prefix + objstore.ReservedPrefix + "probe-" + hex.EncodeToString(rnd[:])
	if err := s.putOne(ctx, key, nil, true); err != nil {
		if isNotImplemented(err) {
			s.cond = condIgnored
			return s.cond, nil
		}
		return condUnknown, err
	}
	err := s.putOne(ctx, key, nil, true)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	s.client.RemoveObject(dctx, s.bucket, key, minio.RemoveObjectOptions{})
	switch {
	case err == nil || isNotImplemented(err):
		s.cond = condIgnored
	case minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed:
		s.cond = condHonoured
	default:
		return condUnknown, err
	}
	return s.cond, nil
}

// ConditionalPuts reports whether the server honours If-None-Match: * on a
// PUT, probing it if no IfAbsent Put has yet.
func (s *Store) ConditionalPuts(ctx context.Context) (bool, error) {
	c, err := s.conditional(ctx)
	return c == condHonoured, s.mapErr(ctx, err)
}

// Open implements objstore.Store.
func (s *Store) Open(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	rc, err := s.open(ctx, name, off, length)
	if err != nil {
		return nil, &objstore.Error{Op: "open", Name: name, Err: s.mapErr(ctx, err)}
	}
	return rc, nil
}

func (s *Store) open(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if err := objstore.ValidName(name); err != nil {
		return nil, err
	}
	if off < 0 || length > math.MaxInt64-off {
		return nil, fmt.Errorf("range of %d bytes at %d: %w", length, off, errInvalid)
	}
	if length == 0 {
		// No range names zero bytes; a HEAD still tells a missing object.
		if _, err := s.client.StatObject(ctx, s.bucket, s.key(name), minio.StatObjectOptions{}); err != nil {
			return nil, err
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	var opts minio.GetObjectOptions
	switch {
	case length > 0:
		opts.SetRange(off, off+length-1)
	case off > 0:
		opts.SetRange(off, 0)
	}
	body, _, h, err := s.core.GetObject(ctx, s.bucket, s.key(name), opts)
	if err != nil {
		if minio.ToErrorResponse(err).StatusCode == http.StatusRequestedRangeNotSatisfiable {
			// The object exists and ends at or before off.
			return objstore.RangeReader(io.NopCloser(strings.NewReader("")), length), nil
		}
		return nil, err
	}
	if opts.Header().Get("Range") != "" && h.Get("Content-Range") == "" {
		body.Close()
		return nil, errors.New("the server ignored the Range header")
	}
	return objstore.RangeReader(&bodyReader{ctx: ctx, s: s, rc: body}, length), nil
}

// bodyReader maps the errors of reading a response body as the Store's
// methods map theirs.
type bodyReader struct {
	ctx context.Context
	s   *Store
	rc  io.ReadCloser
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		// The connection broke mid-body (a short body is
		// io.ErrUnexpectedEOF here, not a short object).
		if b.ctx.Err() == nil {
			err = objstore.Unavailable(err)
		} else {
			err = b.s.mapErr(b.ctx, err)
		}
	}
	return n, err
}

func (b *bodyReader) Close() error { return b.rc.Close() }

// Stat implements objstore.Store.
func (s *Store) Stat(ctx context.Context, name string) (objstore.Info, error) {
	if err := objstore.ValidName(name); err != nil {
		return objstore.Info{}, &objstore.Error{Op: "stat", Name: name, Err: err}
	}
	oi, err := s.client.StatObject(ctx, s.bucket, s.key(name), minio.StatObjectOptions{})
	if err != nil {
		return objstore.Info{}, &objstore.Error{Op: "stat", Name: name, Err: s.mapErr(ctx, err)}
	}
	return objstore.Info{Name: name, Size: oi.Size, Modified: oi.LastModified}, nil
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := objstore.ValidName(name); err != nil {
		return &objstore.Error{Op: "delete", Name: name, Err: err}
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.key(name), minio.RemoveObjectOptions{})
	if err != nil && !isNotFound(err) {
		return &objstore.Error{Op: "delete", Name: name, Err: s.mapErr(ctx, err)}
	}
	return nil
}

// List implements objstore.Store, one request per Config.ListPageSize keys.
func (s *Store) List(ctx context.Context, prefix string, fn func(objstore.Info) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the listing when fn stops it
	for oi := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{
		Prefix:    s.prefix + prefix,
		Recursive: true,
		MaxKeys:   s.cfg.ListPageSize,
	}) {
		if oi.Err != nil {
			return &objstore.Error{Op: "list", Name: prefix, Err: s.mapErr(ctx, oi.Err)}
		}
		name := strings.TrimPrefix(oi.Key, s.prefix)
		if objstore.ValidName(name) != nil {
			continue // not an object's key: a probe, or written by another tool
		}
		if err := fn(objstore.Info{Name: name, Size: oi.Size, Modified: oi.LastModified}); err != nil {
			return err
		}
	}
	return nil
}

var errInvalid = errors.New("invalid argument")

func isNotFound(err error) bool {
	return minio.ToErrorResponse(err).StatusCode == http.StatusNotFound
}

func isNotImplemented(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.StatusCode == http.StatusNotImplemented || r.Code == "NotImplemented"
}

// mapErr turns minio-go's and net/http's errors into objstore's: a done ctx
// is reported as such, 404 as ErrNotExist, 412 as ErrExists, and anything
// that says the server could not be reached or failed as ErrUnavailable.
func (s *Store) mapErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(err, cerr) {
			return err
		}
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	var se *sourceError
	if errors.As(err, &se) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		if resp.Code == "NoSuchBucket" {
			return fmt.Errorf("bucket %s: %w", s.bucket, objstore.ErrNotExist)
		}
		return objstore.ErrNotExist
	case resp.StatusCode == http.StatusPreconditionFailed:
		return objstore.ErrExists
	case resp.StatusCode >= 500:
		return objstore.Unavailable(err)
	case resp.StatusCode != 0:
		return err // the server answered: a refusal, not an outage
	}
	var ue *url.Error
	var ne net.Error
	if errors.As(err, &ue) || errors.As(err, &ne) {
		return objstore.Unavailable(err)
	}
	return err
}

// sourceReader marks the errors of the reader a Put copies from, except
// io.EOF, as sourceErrors.
type sourceReader struct{ r io.Reader }

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = &sourceError{err}
	}
	return n, err
}

// sourceError is an error of the reader a Put copies from, which mapErr
// leaves alone: a caller's network reader failing is no store outage.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }
