package server

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/wire"
)

// Blobs, plain objects and artifact records (docs/API.md). A blob body
// streams between the connection and the engine: a PUT's body is read
// into the blob store's staging by engine.PutObject before any
// transaction starts, and a GET's bytes go out as the engine verifies
// them, the last byte held back until they have verified.

// Header names of the blob endpoints: internal/wire's.
const (
	HeaderMetadata   = wire.HeaderMetadata
	HeaderMetaPrefix = wire.HeaderMetaPrefix
	HeaderUploaded   = wire.HeaderUploaded
	HeaderCode       = wire.HeaderCode
	HeaderMessage    = wire.HeaderMessage
)

func (s *Server) blobRoutes() {
	s.mux.HandleFunc("PUT /v1/blobs/{key...}", s.putBlob)
	s.mux.HandleFunc("GET /v1/blobs/{key...}", s.getBlob)
	s.mux.HandleFunc("HEAD /v1/blobs/{key...}", s.headBlob)
	s.mux.HandleFunc("DELETE /v1/blobs/{key...}", s.deleteBlob)
	s.mux.HandleFunc("GET /v1/blobs", s.listBlobs)

	s.handle("POST /v1/artifacts/save", s.saveArtifact)
	s.handle("POST /v1/artifacts/get", s.getArtifact)
	s.handle("POST /v1/artifacts/list", s.listArtifacts)
	s.handle("POST /v1/artifacts/delete", s.deleteArtifact)
	s.handle("POST /v1/artifacts/delete-run", s.deleteArtifactRun)
}

// blobError writes err, its code and message also in headers.
func blobError(w http.ResponseWriter, err error) {
	w.Header().Set(HeaderCode, Code(err))
	w.Header().Set(HeaderMessage, headerSafe(err.Error()))
	writeError(w, err)
}

// headerSafe makes s a header value: control characters become spaces,
// and it is cut at 1 KiB.
func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 1024 {
		s = s[:1024]
	}
	return strings.ToValidUTF8(s, "?")
}

// objectHeaders are the headers describing info (docs/API.md): a plain
// object's Content-Type only when it has one (none is sent then, not a
// guess), a blob's application/octet-stream.
func objectHeaders(info sbxdb.ObjectInfo) http.Header {
	h := http.Header{}
	switch {
	case info.ContentType != "":
		h.Set("Content-Type", info.ContentType)
	case isBlobKey(info.Key):
		h.Set("Content-Type", "application/octet-stream")
	default:
		h["Content-Type"] = nil // no sniffing either
	}
	h.Set("ETag", `"`+info.SHA256+`"`)
	h.Set(HeaderUploaded, strconv.FormatInt(info.Uploaded, 10))
	h.Set("Accept-Ranges", "bytes")
	if len(info.CustomMetadata) > 0 {
		h.Set(HeaderMetadata, wire.EncodeMetadata(info.CustomMetadata))
	}
	return h
}

func isBlobKey(key string) bool {
	_, _, err := cas.ParseKey(key)
	return err == nil
}

func setHeaders(w http.ResponseWriter, h http.Header) {
	for k, v := range h {
		w.Header()[k] = v
	}
}

// metaHeaders reads the custom metadata of a PUT: HeaderMetadata, or else
// the HeaderMetaPrefix headers (names lower-cased, the values of a
// repeated header joined with ", ", as HTTP combines them). Both at once,
// a repeated HeaderMetadata or a nameless entry header is
// SBXDB_BAD_REQUEST.
func metaHeaders(h http.Header) (map[string]string, error) {
	var md map[string]string
	for k, v := range h {
		if name, ok := strings.CutPrefix(http.CanonicalHeaderKey(k), HeaderMetaPrefix); ok {
			if name == "" {
				return nil, errorf(CodeBadRequest, "a %s header without a name", HeaderMetaPrefix)
			}
			if md == nil {
				md = map[string]string{}
			}
			md[strings.ToLower(name)] = strings.Join(v, ", ")
		}
	}
	enc := h.Values(HeaderMetadata)
	switch {
	case len(enc) == 0:
		return md, nil
	case len(enc) > 1:
		return nil, errorf(CodeBadRequest, "%s sent %d times", HeaderMetadata, len(enc))
	case md != nil:
		return nil, errorf(CodeBadRequest, "both %s and %s* headers", HeaderMetadata, HeaderMetaPrefix)
	}
	md, err := wire.DecodeMetadata(enc[0])
	if err != nil {
		return nil, errorf(CodeBadRequest, "%v", err)
	}
	return md, nil
}

// bodyReader is a request body whose read errors (a client that went
// away, a chunk that does not parse) are SBXDB_BAD_REQUEST.
type bodyReader struct{ r io.Reader }

func (b bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = errorf(CodeBadRequest, "reading the request body: %v", err)
	}
	return n, err
}

func (s *Server) putBlob(w http.ResponseWriter, r *http.Request) {
	md, err := metaHeaders(r.Header)
	if err != nil {
		blobError(w, err)
		return
	}
	opts := sbxdb.PutObjectOptions{Size: r.ContentLength, CustomMetadata: md}
	if opts.Size < 0 {
		opts.Size = -1 // chunked
	}
	if ct := r.Header.Values("Content-Type"); len(ct) > 0 {
		opts.ContentType = strings.Join(ct, ", ")
	}
	info, err := s.db.PutObject(r.Context(), r.PathValue("key"), bodyReader{r.Body}, opts)
	if err != nil {
		blobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) headBlob(w http.ResponseWriter, r *http.Request) {
	info, err := s.db.StatObject(r.Context(), r.PathValue("key"))
	if err != nil {
		blobError(w, err)
		return
	}
	setHeaders(w, objectHeaders(info))
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.WriteHeader(http.StatusOK)
}

func (s *Server) getBlob(w http.ResponseWriter, r *http.Request) {
	rc, info, err := s.db.OpenObject(r.Context(), r.PathValue("key"))
	if err != nil {
		blobError(w, err)
		return
	}
	defer rc.Close()
	h := objectHeaders(info)
	status, off, n := http.StatusOK, int64(0), info.Size
	if spec := r.Header.Get("Range"); spec != "" {
		var ok bool
		if off, n, ok = parseRange(spec, info.Size); !ok {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", info.Size))
			blobError(w, errorf(CodeRange, "range %q is not one range within the %d bytes of %s", spec, info.Size, info.Key))
			return
		}
		status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, info.Size))
	}
	// The bytes before the range and the first read of the range are
	// read (and verified) before the status is sent: damage found there
	// is still an error response (an empty blob is read to its end).
	br := blobReaders.Get().(*bufio.Reader)
	br.Reset(rc)
	defer func() { br.Reset(nil); blobReaders.Put(br) }()
	if _, err := io.CopyN(io.Discard, br, off); err != nil {
		blobError(w, err)
		return
	}
	if n == 0 {
		_, err = io.Copy(io.Discard, br)
	} else {
		_, err = br.Peek(1)
	}
	if err != nil {
		blobError(w, err)
		return
	}
	setHeaders(w, h)
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(status)
	fitSendBuffer(connOf(r.Context()).Conn, n)
	if n > 0 && sendVerified(w, br, n) != nil {
		// The status is sent: cut the response off short of its length,
		// so that no client takes it for complete.
		panic(http.ErrAbortHandler)
	}
}

// sendVerified writes n (> 0) bytes of r to w, then reads r to its end,
// which verifies the blob, and only then writes the last of the n bytes:
// any failure leaves the response short. What precedes the last byte is
// flushed first, so a client sees the status and a body cut short.
func sendVerified(w http.ResponseWriter, r io.Reader, n int64) error {
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	// Through buf, whatever r and w implement: io.Copy would move 32 KiB
	// per write, each a write to the socket past net/http's small buffer.
	sent, err := io.CopyBuffer(struct{ io.Writer }{w}, io.LimitReader(r, n-1), *buf)
	if err == nil && sent < n-1 {
		err = io.EOF
	}
	if err != nil {
		return err
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		return err
	}
	var last [1]byte
	if _, err := io.ReadFull(r, last[:]); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	_, err = w.Write(last[:])
	return err
}

// blobReaders hold the 64 KiB readers getBlob reads a blob through.
var blobReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// copyBuffers hold the buffers sendVerified copies through.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

// maxFitted is the largest GET response whose whole body the server lets a
// unix socket queue (fitSendBuffer).
const maxFitted = 1 << 20

// parseRange reads a Range header of one byte range (bytes=a-b, a-, -n)
// of a blob of size bytes, clipped to it, and returns its offset and
// length; ok is false for anything else, or a range that holds no byte of
// the blob.
func parseRange(spec string, size int64) (off, n int64, ok bool) {
	rs, found := strings.CutPrefix(spec, "bytes=")
	if !found || strings.Contains(rs, ",") {
		return 0, 0, false
	}
	first, last, found := strings.Cut(strings.TrimSpace(rs), "-")
	if !found {
		return 0, 0, false
	}
	num := func(s string) (int64, bool) {
		v, err := strconv.ParseInt(s, 10, 64)
		return v, err == nil && v >= 0 && s != "" && s[0] != '+'
	}
	switch {
	case first == "": // the last n bytes
		suffix, ok := num(last)
		if !ok || suffix == 0 || size == 0 {
			return 0, 0, false
		}
		suffix = min(suffix, size)
		return size - suffix, suffix, true
	default:
		a, ok := num(first)
		if !ok || a >= size {
			return 0, 0, false
		}
		b := size - 1
		if last != "" {
			if b, ok = num(last); !ok || b < a {
				return 0, 0, false
			}
			b = min(b, size-1)
		}
		return a, b - a + 1, true
	}
}

func (s *Server) deleteBlob(w http.ResponseWriter, r *http.Request) {
	if err := s.db.DeleteObject(r.Context(), r.PathValue("key")); err != nil {
		blobError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ObjectList is the response of GET /v1/blobs.
type ObjectList struct {
	Objects []sbxdb.ObjectInfo `json:"objects"`
	Cursor  *string            `json:"cursor"` // null on the last page
}

func (s *Server) listBlobs(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		blobError(w, errorf(CodeBadRequest, "query: %v", err))
		return
	}
	limit := sbxdb.MaxListObjects
	if v, ok := q["limit"]; ok {
		// The engine decides the range; only a number travels.
		if limit, err = strconv.Atoi(v[0]); err != nil {
			blobError(w, errorf(CodeBadRequest, "limit %q is not an integer", v[0]))
			return
		}
	}
	objs, next, err := s.db.ListObjects(r.Context(), q.Get("prefix"), q.Get("cursor"), limit)
	if err != nil {
		blobError(w, err)
		return
	}
	out := ObjectList{Objects: objs}
	if out.Objects == nil {
		out.Objects = []sbxdb.ObjectInfo{}
	}
	if next != "" {
		out.Cursor = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// wireArtifactRecord is an artifact record as a request carries it:
// nothing is lost in decoding (a member that is not a string or a safe
// integer, or a required integer that is absent, decodes to a value the
// engine refuses with its code, in its order), and blobKey and sourceUrl
// may be absent or null.
type wireArtifactRecord struct {
	ArtifactID chain.WireString  `json:"artifactId"`
	RunID      chain.WireString  `json:"runId"`
	ThreadID   chain.WireString  `json:"threadId"`
	BlobKey    *chain.WireString `json:"blobKey"`
	Name       chain.WireString  `json:"name"`
	MimeType   chain.WireString  `json:"mimeType"`
	Size       *chain.WireInt    `json:"size"`
	SourceURL  *chain.WireString `json:"sourceUrl"`
	CreatedAt  *chain.WireInt    `json:"createdAt"`
}

func (a *wireArtifactRecord) record() sbxdb.ArtifactRecord {
	opt := func(s *chain.WireString) string {
		if s == nil {
			return ""
		}
		return string(*s)
	}
	num := func(n *chain.WireInt) int64 {
		if n == nil {
			return chain.NotAnInt
		}
		return int64(*n)
	}
	return sbxdb.ArtifactRecord{ArtifactID: string(a.ArtifactID), RunID: string(a.RunID), ThreadID: string(a.ThreadID),
		BlobKey: opt(a.BlobKey), Name: string(a.Name), MimeType: string(a.MimeType), Size: num(a.Size),
		SourceURL: opt(a.SourceURL), CreatedAt: num(a.CreatedAt)}
}

func (s *Server) saveArtifact(r *http.Request) (any, error) {
	var in wireArtifactRecord
	if err := s.decode(r, &in); err != nil {
		return nil, err
	}
	return struct{}{}, s.db.ArtifactRecords().Save(r.Context(), in.record())
}

func (s *Server) getArtifact(r *http.Request) (any, error) {
	var in struct {
		ArtifactID chain.WireString `json:"artifactId"`
	}
	if err := s.decode(r, &in); err != nil {
		return nil, err
	}
	rec, err := s.db.ArtifactRecords().Get(r.Context(), string(in.ArtifactID))
	if err != nil {
		return nil, err
	}
	return struct {
		Artifact *sbxdb.ArtifactRecord `json:"artifact"`
	}{rec}, nil
}

func (s *Server) listArtifacts(r *http.Request) (any, error) {
	var in struct {
		RunID    *chain.WireString `json:"runId"`
		ThreadID *chain.WireString `json:"threadId"`
	}
	if err := s.decode(r, &in); err != nil {
		return nil, err
	}
	var recs []sbxdb.ArtifactRecord
	var err error
	switch {
	case in.RunID != nil && in.ThreadID == nil:
		recs, err = s.db.ArtifactRecords().ListForRun(r.Context(), string(*in.RunID))
	case in.ThreadID != nil && in.RunID == nil:
		recs, err = s.db.ArtifactRecords().ListForThread(r.Context(), string(*in.ThreadID))
	default:
		return nil, errorf(CodeBadRequest, `give one of "runId" and "threadId"`)
	}
	if err != nil {
		return nil, err
	}
	return struct {
		Artifacts []sbxdb.ArtifactRecord `json:"artifacts"`
	}{recs}, nil
}

func (s *Server) deleteArtifact(r *http.Request) (any, error) {
	var in struct {
		ArtifactID chain.WireString `json:"artifactId"`
	}
	if err := s.decode(r, &in); err != nil {
		return nil, err
	}
	return struct{}{}, s.db.ArtifactRecords().Delete(r.Context(), string(in.ArtifactID))
}

func (s *Server) deleteArtifactRun(r *http.Request) (any, error) {
	var in struct {
		RunID chain.WireString `json:"runId"`
	}
	if err := s.decode(r, &in); err != nil {
		return nil, err
	}
	n, err := s.db.ArtifactRecords().DeleteForRun(r.Context(), string(in.RunID))
	if err != nil {
		return nil, err
	}
	return struct {
		Deleted int `json:"deleted"`
	}{n}, nil
}
