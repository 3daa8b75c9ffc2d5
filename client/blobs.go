package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/wire"
)

// Blobs, plain objects and artifact records over the API (docs/API.md).
// Each method gives the error the engine's method of the same name gives:
// a key (and a put's attributes) is checked here first
// (sbxdb.CheckObjectKey, sbxdb.CheckPutObject: a key with an empty, "."
// or ".." segment cannot travel in a URL unchanged, nor can a header value
// with surrounding blanks), a refused request
// (SBXDB_BAD_REQUEST) matches sbxdb.ErrInvalidObject, and a body that is
// not the size declared fails as sbxdb.ErrBlobKeyMismatch before the server
// could take it for complete.

// blobPath is the path of key, each segment percent-encoded.
func blobPath(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/v1/blobs/" + strings.Join(segs, "/")
}

// decodeJSON decodes one JSON value of r into v.
func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// blobErr makes a refused blob request match the engine's sentinel.
func blobErr(err error) error {
	if errors.Is(err, ErrBadRequest) {
		return fmt.Errorf("%w: %w", sbxdb.ErrInvalidObject, err)
	}
	return err
}

// doBlob sends req and returns its response when the status is 2xx; any
// other status is the error the server sent, read from the body or, for a
// HEAD, which has none, from the error headers.
func (c *Client) doBlob(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	if code := resp.Header.Get(wire.HeaderCode); code != "" && req.Method == http.MethodHead {
		return nil, blobErr(wireError(resp.StatusCode, code, resp.Header.Get(wire.HeaderMessage)))
	}
	return nil, blobErr(responseError(resp))
}

// PutObject stores the bytes of r under key (PUT /v1/blobs/{key}), sent
// with opts.Size as their Content-Length, or chunked when it is -1.
func (c *Client) PutObject(ctx context.Context, key string, r io.Reader, opts sbxdb.PutObjectOptions) (sbxdb.ObjectInfo, error) {
	// Checked here too: a header value loses surrounding blanks, for one.
	if err := sbxdb.CheckPutObject(key, opts); err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	body := &sizedBody{r: r, key: key, want: opts.Size}
	var rb io.Reader = body
	if opts.Size == 0 {
		// An empty body travels as none: what r holds is checked here.
		if _, err := body.Read(make([]byte, 1)); err != io.EOF {
			return sbxdb.ObjectInfo{}, err
		}
		rb = http.NoBody
	}
	req, err := c.newRequest(ctx, http.MethodPut, blobPath(key), rb)
	if err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	req.ContentLength = opts.Size
	if opts.ContentType != "" {
		req.Header.Set("Content-Type", opts.ContentType)
	}
	if len(opts.CustomMetadata) > 0 {
		req.Header.Set(wire.HeaderMetadata, wire.EncodeMetadata(opts.CustomMetadata))
	}
	resp, err := c.doBlob(req)
	if body.err != nil {
		// The body failed (its reader, or its size): the request was cut
		// off before its end, and the server stored nothing.
		if resp != nil {
			resp.Body.Close()
		}
		return sbxdb.ObjectInfo{}, body.err
	}
	if err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	defer resp.Body.Close()
	var info sbxdb.ObjectInfo
	if err := decodeJSON(resp.Body, &info); err != nil {
		return sbxdb.ObjectInfo{}, fmt.Errorf("client: the response to PUT %s: %w", key, err)
	}
	return info, nil
}

// sizedBody is a request body that must be want bytes long (-1: any). It
// gives the last byte only once r has ended, so a longer body fails before
// the request is complete, and so does a shorter one or a failing r; err
// keeps the failure for the caller.
type sizedBody struct {
	r       io.Reader
	key     string
	want, n int64
	err     error
}

func (b *sizedBody) fail(err error) (int, error) {
	b.err = err
	return 0, err
}

func (b *sizedBody) mismatch(what string) (int, error) {
	return b.fail(&sbxdb.BlobError{Key: b.key, Err: sbxdb.ErrBlobKeyMismatch, Detail: fmt.Sprintf("the body is %s the %d bytes declared", what, b.want)})
}

func (b *sizedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	left := b.want - b.n
	switch {
	case b.want < 0 || left > 1:
		if b.want >= 0 {
			p = p[:min(int64(len(p)), left-1)]
		}
		n, err := b.r.Read(p)
		b.n += int64(n)
		switch {
		case err == io.EOF && b.want >= 0:
			return b.mismatch(fmt.Sprintf("%d bytes, fewer than", b.n))
		case err != nil && err != io.EOF:
			return b.fail(err)
		}
		return n, err
	case left == 1:
		var two [2]byte
		k, err := io.ReadFull(b.r, two[:])
		switch {
		case k == 2:
			return b.mismatch("more than")
		case k == 1 && err == io.ErrUnexpectedEOF:
			p[0] = two[0]
			b.n++
			return 1, nil
		case k == 0 && err == io.EOF:
			return b.mismatch(fmt.Sprintf("%d bytes, fewer than", b.n))
		}
		return b.fail(err)
	}
	// All want bytes were given (want 0: none): r must be at its end.
	var one [1]byte
	switch k, err := io.ReadFull(b.r, one[:]); {
	case k == 1:
		return b.mismatch("more than")
	case err != io.EOF:
		return b.fail(err)
	}
	return 0, io.EOF
}

// OpenObject returns a reader of key's bytes from offset off, at most n of
// them (n < 0: to the end), and what is stored under key
// (GET /v1/blobs/{key} with a Range). The server verifies the bytes as it
// sends them and cuts the response off when they fail: a Read then fails
// (io.ErrUnexpectedEOF) rather than end early, so everything read is good
// once Read returns io.EOF. An offset past the end is ErrRange; one at
// the end reads nothing. n == 0 reads nothing and asks only for the
// description (a HEAD, which refreshes a blob's upload time as
// StatObject does).
func (c *Client) OpenObject(ctx context.Context, key string, off, n int64) (io.ReadCloser, sbxdb.ObjectInfo, error) {
	if _, err := sbxdb.CheckObjectKey(key); err != nil {
		return nil, sbxdb.ObjectInfo{}, err
	}
	if off < 0 {
		return nil, sbxdb.ObjectInfo{}, fmt.Errorf("%w: offset %d", ErrRange, off)
	}
	if n == 0 {
		info, err := c.StatObject(ctx, key)
		if err == nil && off > info.Size {
			err = fmt.Errorf("%w: offset %d is past the %d bytes of %s", ErrRange, off, info.Size, key)
		}
		if err != nil {
			return nil, sbxdb.ObjectInfo{}, err
		}
		return io.NopCloser(strings.NewReader("")), info, nil
	}
	req, err := c.newRequest(ctx, http.MethodGet, blobPath(key), nil)
	if err != nil {
		return nil, sbxdb.ObjectInfo{}, err
	}
	ranged := off > 0 || n > 0
	switch {
	case n > 0:
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	case off > 0:
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", off))
	}
	resp, err := c.doBlob(req)
	if errors.Is(err, ErrRange) {
		// A range starting at the end (of an empty blob, say) holds no
		// byte: an empty read, not an error.
		if info, serr := c.StatObject(ctx, key); serr == nil && off == info.Size {
			return io.NopCloser(strings.NewReader("")), info, nil
		}
	}
	if err != nil {
		return nil, sbxdb.ObjectInfo{}, err
	}
	info, err := infoOf(key, resp)
	if err == nil && ranged != (resp.StatusCode == http.StatusPartialContent) {
		err = fmt.Errorf("client: GET %s answered %s to a range of %d", key, resp.Status, off)
	}
	if err != nil {
		resp.Body.Close()
		return nil, sbxdb.ObjectInfo{}, err
	}
	return blobBody{resp.Body}, info, nil
}

// blobBody is the body of a GET. Its WriteTo, which io.Copy prefers, reads
// the connection through a large buffer: io.Copy alone reads 32 KiB at a
// time, and 8 KiB into io.Discard, each a read of the socket.
type blobBody struct{ io.ReadCloser }

func (b blobBody) WriteTo(w io.Writer) (int64, error) {
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{b.ReadCloser}, *buf)
}

// copyBuffers hold the buffers blobBody copies through.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

// infoOf reads the description of key from a response's headers.
func infoOf(key string, resp *http.Response) (sbxdb.ObjectInfo, error) {
	h := resp.Header
	info := sbxdb.ObjectInfo{Key: key, SHA256: strings.Trim(h.Get("ETag"), `"`)}
	info.Size = resp.ContentLength // of a HEAD too: the length a GET would have
	if resp.StatusCode == http.StatusPartialContent {
		_, total, _ := strings.Cut(h.Get("Content-Range"), "/")
		var err error
		if info.Size, err = strconv.ParseInt(total, 10, 64); err != nil {
			info.Size = -1
		}
	}
	if info.Size < 0 {
		return info, fmt.Errorf("client: %s: no size in the response", key)
	}
	var err error
	if info.Uploaded, err = strconv.ParseInt(h.Get(wire.HeaderUploaded), 10, 64); err != nil {
		return info, fmt.Errorf("client: %s: no upload time in the response: %w", key, err)
	}
	if sbxdb.CheckBlobKey(key) != nil { // a plain object: its own attributes
		info.ContentType = h.Get("Content-Type")
		if v := h.Get(wire.HeaderMetadata); v != "" {
			if err := json.Unmarshal([]byte(v), &info.CustomMetadata); err != nil {
				return info, fmt.Errorf("client: %s: the %s header: %w", key, wire.HeaderMetadata, err)
			}
			if len(info.CustomMetadata) == 0 {
				info.CustomMetadata = nil
			}
		}
	}
	return info, nil
}

// StatObject describes key (HEAD /v1/blobs/{key}), refreshing a blob's
// upload time.
func (c *Client) StatObject(ctx context.Context, key string) (sbxdb.ObjectInfo, error) {
	if _, err := sbxdb.CheckObjectKey(key); err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	req, err := c.newRequest(ctx, http.MethodHead, blobPath(key), nil)
	if err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	resp, err := c.doBlob(req)
	if err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	resp.Body.Close()
	return infoOf(key, resp)
}

// DeleteObject deletes key (DELETE /v1/blobs/{key}); a key not stored is
// not an error, a blob in use is sbxdb.ErrBlobInUse.
func (c *Client) DeleteObject(ctx context.Context, key string) error {
	if _, err := sbxdb.CheckObjectKey(key); err != nil {
		return err
	}
	req, err := c.newRequest(ctx, http.MethodDelete, blobPath(key), nil)
	if err != nil {
		return err
	}
	resp, err := c.doBlob(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ListObjects lists up to limit (0 to sbxdb.MaxListObjects) keys starting
// with prefix and after cursor, in key byte order, and returns the cursor
// of the next page, "" after the last (GET /v1/blobs).
func (c *Client) ListObjects(ctx context.Context, prefix, cursor string, limit int) ([]sbxdb.ObjectInfo, string, error) {
	q := url.Values{"prefix": {prefix}, "cursor": {cursor}, "limit": {strconv.Itoa(limit)}}
	req, err := c.newRequest(ctx, http.MethodGet, "/v1/blobs?"+q.Encode(), nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := c.doBlob(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var out struct {
		Objects []sbxdb.ObjectInfo `json:"objects"`
		Cursor  *string            `json:"cursor"`
	}
	if err := decodeJSON(resp.Body, &out); err != nil {
		return nil, "", fmt.Errorf("client: the response to GET /v1/blobs: %w", err)
	}
	next := ""
	if out.Cursor != nil {
		next = *out.Cursor
	}
	return out.Objects, next, nil
}

// ArtifactRecords returns the server's artifact records.
func (c *Client) ArtifactRecords() sbxdb.ArtifactRecords { return artifactRecords{c} }

type artifactRecords struct{ c *Client }

var _ sbxdb.ArtifactRecords = artifactRecords{}

// wireRecord is an artifact record as a request carries it: strings as
// chain.WireString, so that a lone surrogate reaches the server's checks
// as it would reach the engine's.
type wireRecord struct {
	ArtifactID chain.WireString  `json:"artifactId"`
	RunID      chain.WireString  `json:"runId"`
	ThreadID   chain.WireString  `json:"threadId"`
	BlobKey    *chain.WireString `json:"blobKey,omitempty"`
	Name       chain.WireString  `json:"name"`
	MimeType   chain.WireString  `json:"mimeType"`
	Size       int64             `json:"size"`
	SourceURL  *chain.WireString `json:"sourceUrl,omitempty"`
	CreatedAt  int64             `json:"createdAt"`
}

func optional(s string) *chain.WireString {
	if s == "" {
		return nil
	}
	w := chain.WireString(s)
	return &w
}

func (a artifactRecords) Save(ctx context.Context, rec sbxdb.ArtifactRecord) error {
	in := wireRecord{ArtifactID: chain.WireString(rec.ArtifactID), RunID: chain.WireString(rec.RunID),
		ThreadID: chain.WireString(rec.ThreadID), BlobKey: optional(rec.BlobKey), Name: chain.WireString(rec.Name),
		MimeType: chain.WireString(rec.MimeType), Size: rec.Size, SourceURL: optional(rec.SourceURL), CreatedAt: rec.CreatedAt}
	return a.c.call(ctx, "/v1/artifacts/save", in, nil)
}

func (a artifactRecords) Get(ctx context.Context, artifactID string) (*sbxdb.ArtifactRecord, error) {
	var out struct {
		Artifact *sbxdb.ArtifactRecord `json:"artifact"`
	}
	err := a.c.call(ctx, "/v1/artifacts/get", map[string]chain.WireString{"artifactId": chain.WireString(artifactID)}, &out)
	return out.Artifact, err
}

func (a artifactRecords) ListForRun(ctx context.Context, runID string) ([]sbxdb.ArtifactRecord, error) {
	return a.list(ctx, "runId", runID)
}

func (a artifactRecords) ListForThread(ctx context.Context, threadID string) ([]sbxdb.ArtifactRecord, error) {
	return a.list(ctx, "threadId", threadID)
}

func (a artifactRecords) list(ctx context.Context, field, id string) ([]sbxdb.ArtifactRecord, error) {
	var out struct {
		Artifacts []sbxdb.ArtifactRecord `json:"artifacts"`
	}
	if err := a.c.call(ctx, "/v1/artifacts/list", map[string]chain.WireString{field: chain.WireString(id)}, &out); err != nil {
		return nil, err
	}
	if out.Artifacts == nil {
		out.Artifacts = []sbxdb.ArtifactRecord{}
	}
	return out.Artifacts, nil
}

func (a artifactRecords) Delete(ctx context.Context, artifactID string) error {
	return a.c.call(ctx, "/v1/artifacts/delete", map[string]chain.WireString{"artifactId": chain.WireString(artifactID)}, nil)
}

func (a artifactRecords) DeleteForRun(ctx context.Context, runID string) (int, error) {
	var out struct {
		Deleted int `json:"deleted"`
	}
	err := a.c.call(ctx, "/v1/artifacts/delete-run", map[string]chain.WireString{"runId": chain.WireString(runID)}, &out)
	return out.Deleted, err
}
