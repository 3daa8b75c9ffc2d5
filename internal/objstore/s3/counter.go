package s3

import (
	"net/http"
	"strings"
	"sync/atomic"
)

// RequestCounts counts the HTTP requests a Store sent, by S3 operation.
// A retried request counts once per try.
type RequestCounts struct {
	Puts      int64 // PutObject
	Parts     int64 // UploadPart
	Multipart int64 // CreateMultipartUpload, CompleteMultipartUpload, AbortMultipartUpload
	Gets      int64 // GetObject, ranged or whole
	Heads     int64 // HeadObject, HeadBucket
	Lists     int64 // ListObjectsV2 pages
	Deletes   int64 // DeleteObject
	Other     int64 // bucket creation and anything else
	// Failed counts the tries among them that got no answer, or an
	// answer minio-go retries (408, 429, 5xx): what a request cost beyond
	// one try each.
	Failed int64
}

// Total is the sum of all counts.
func (c RequestCounts) Total() int64 {
	return c.Puts + c.Parts + c.Multipart + c.Gets + c.Heads + c.Lists + c.Deletes + c.Other
}

// Sub returns c minus d, the requests made between two readings.
func (c RequestCounts) Sub(d RequestCounts) RequestCounts {
	return RequestCounts{c.Puts - d.Puts, c.Parts - d.Parts, c.Multipart - d.Multipart, c.Gets - d.Gets,
		c.Heads - d.Heads, c.Lists - d.Lists, c.Deletes - d.Deletes, c.Other - d.Other, c.Failed - d.Failed}
}

type counter struct {
	puts, parts, multipart, gets, heads, lists, deletes, other, failed atomic.Int64
}

func (c *counter) load() RequestCounts {
	return RequestCounts{c.puts.Load(), c.parts.Load(), c.multipart.Load(), c.gets.Load(),
		c.heads.Load(), c.lists.Load(), c.deletes.Load(), c.other.Load(), c.failed.Load()}
}

// countingTransport counts each request it sends by the S3 operation its
// method and query name. Counting at the transport sees every try minio-go
// makes, as the server (and its bill) does.
type countingTransport struct {
	next   http.RoundTripper
	count  *counter
	bucket string // for path-style URLs: a request on "/bucket" is a bucket operation
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.op(req).Add(1)
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		t.count.failed.Add(1)
	}
	return resp, err
}

func (t *countingTransport) op(req *http.Request) *atomic.Int64 {
	q := req.URL.Query()
	has := func(k string) bool { _, ok := q[k]; return ok }
	p := strings.Trim(req.URL.Path, "/")
	object := p != "" && p != t.bucket // virtual-host style: any path names an object
	c := t.count
	switch req.Method {
	case http.MethodPut:
		switch {
		case has("partNumber") && has("uploadId"):
			return &c.parts
		case object && len(q) == 0:
			return &c.puts
		}
	case http.MethodPost:
		if has("uploads") || has("uploadId") {
			return &c.multipart
		}
	case http.MethodGet:
		switch {
		case has("list-type") || (!object && len(q) == 0):
			return &c.lists
		case object && len(q) == 0:
			return &c.gets
		}
	case http.MethodHead:
		return &c.heads
	case http.MethodDelete:
		switch {
		case has("uploadId"):
			return &c.multipart
		case object:
			return &c.deletes
		}
	}
	return &c.other
}
