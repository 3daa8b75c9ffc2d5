// Package objstore stores named, write-once byte objects: the layer the blob
// store's pack and large-blob files go through when they live somewhere other
// than the local disk. Store is the interface; Dir is its local-directory
// implementation, and package objstore/s3 holds the S3-compatible one.
//
// Names are slash-separated paths such as "packs/0123456789abcdef.pack".
// Every implementation accepts exactly the names ValidName accepts, so a set
// of objects can move between implementations unchanged. One more rule holds
// where objects are files: a name cannot be an object and also lead to
// others ("a/b" and "a/b/c"); Dir and file-backed S3 servers such as
// versitygw's posix backend refuse the second Put, AWS S3 takes both.
package objstore

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb"
)

// Store holds objects by name. Its methods are safe for concurrent use.
//
// Objects are written whole and are not changed in place: a Put of an
// existing name replaces the object (or, with IfAbsent, leaves it), and a
// reader never sees a partly written object.
type Store interface {
	// Put stores the size bytes r yields under name; a negative size reads r
	// to io.EOF. A reader that ends before size bytes fails the Put with an
	// error wrapping io.ErrUnexpectedEOF; bytes past size are not read.
	//
	// Put is all or nothing: when it returns an error, whether from r, ctx or
	// the store, no object was created or replaced (a multipart upload in
	// progress is aborted). With opts.IfAbsent an existing object is left
	// alone and ErrExists returned.
	Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) error

	// Open returns a reader of length bytes of the object from offset off; a
	// negative length reads to the end. A missing object is ErrNotExist. If
	// the object ends before off+length, the reader yields the bytes there
	// are and then an error wrapping io.ErrUnexpectedEOF instead of io.EOF,
	// so io.ReadAll and io.ReadFull both report a short object.
	Open(ctx context.Context, name string, off, length int64) (io.ReadCloser, error)

	// Stat returns the object's size and modification time; a missing
	// object is ErrNotExist.
	Stat(ctx context.Context, name string) (Info, error)

	// Delete removes the object. Deleting a missing object is not an error.
	Delete(ctx context.Context, name string) error

	// List calls fn for each object whose name starts with prefix, in
	// byte-wise name order. An error from fn stops the listing and is
	// returned as it is.
	List(ctx context.Context, prefix string, fn func(Info) error) error

	// Close releases the store's resources. Readers Open returned stay usable
	// until they are closed.
	Close() error
}

// PutOptions modify a Put.
type PutOptions struct {
	// IfAbsent leaves an existing object alone and fails with ErrExists.
	// Whether the check and the write are one atomic step depends on the
	// implementation; see each one's documentation.
	IfAbsent bool
}

// Info describes an object.
type Info struct {
	Name     string // as given to Put, without any prefix the store adds
	Size     int64
	Modified time.Time
}

// sentinel is an error kind that may also match a standard error, as
// ErrNotExist matches fs.ErrNotExist.
type sentinel struct {
	msg string
	std error
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.std }

var (
	// ErrNotExist: the object does not exist. errors.Is(err, fs.ErrNotExist)
	// holds as well.
	ErrNotExist error = &sentinel{"object does not exist", fs.ErrNotExist}
	// ErrExists: a Put with IfAbsent found the name taken. errors.Is(err,
	// fs.ErrExist) holds as well.
	ErrExists error = &sentinel{"object already exists", fs.ErrExist}

	// ErrInvalidName: the name is one ValidName refuses.
	ErrInvalidName error = &sentinel{"invalid object name", fs.ErrInvalid}
)

// Error records a failed operation on a named object.
type Error struct {
	Op   string // "put", "open", "stat", "delete", "list"
	Name string // the object's name, or the prefix for "list"
	Err  error
}

func (e *Error) Error() string {
	return fmt.Sprintf("objstore: %s %q: %v", e.Op, e.Name, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Unavailable returns an error that matches both ErrUnavailable and cause.
func Unavailable(cause error) error {
	return fmt.Errorf("%w: %w", sbxdb.ErrBlobsUnavailable, cause)
}

// MaxNameLen is the longest name accepted, S3's limit on a key (a prefix an
// S3 store adds counts against the same limit there).
const MaxNameLen = 1024

// ReservedPrefix starts the names implementations keep for themselves
// (temporary files, probes); no component of a valid name starts with it.
const ReservedPrefix = ".objstore-"

// ValidName reports whether name may name an object: 1 to MaxNameLen bytes
// of UTF-8 without control characters or backslashes, made of non-empty
// components separated by single slashes, none of them "." or ".." or
// starting with ReservedPrefix. The error wraps ErrInvalidName.
//
// These rules make every name a relative path that stays inside a
// directory and an S3 key that means the same on every server.
func ValidName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %s", ErrInvalidName, why) }
	if name == "" {
		return bad("empty")
	}
	if len(name) > MaxNameLen {
		return bad("longer than 1024 bytes")
	}
	if !utf8.ValidString(name) {
		return bad("not UTF-8")
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return bad("control character or backslash")
		}
	}
	for comp := range strings.SplitSeq(name, "/") {
		switch {
		case comp == "":
			return bad("empty path component")
		case comp == "." || comp == "..":
			return bad("dot component")
		case strings.HasPrefix(comp, ReservedPrefix):
			return bad("reserved component")
		}
	}
	return nil
}

// RangeReader returns a reader of at most length bytes of rc (all of it
// for a negative length) that reports an rc ending early as
// io.ErrUnexpectedEOF, the contract of Store.Open. Closing it closes rc.
func RangeReader(rc io.ReadCloser, length int64) io.ReadCloser {
	return &rangeReader{rc: rc, left: length}
}

type rangeReader struct {
	rc   io.ReadCloser
	left int64 // bytes still owed; negative: read to the end
	err  error // sticky
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.left == 0 {
		r.err = io.EOF
		return 0, io.EOF
	}
	if r.left > 0 && int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.rc.Read(p)
	if r.left > 0 {
		r.left -= int64(n)
	}
	switch {
	case err == io.EOF && r.left > 0:
		r.err = fmt.Errorf("object ends %d bytes short of the range: %w", r.left, io.ErrUnexpectedEOF)
		return n, r.err
	case err != nil:
		r.err = err
	case r.left == 0:
		r.err = io.EOF
	}
	return n, r.err
}

func (r *rangeReader) Close() error { return r.rc.Close() }

// ContextReader returns a reader of r that fails once ctx is done, with
// ctx's error, so a long copy from r stops soon after ctx is cancelled.
func ContextReader(ctx context.Context, r io.Reader) io.Reader {
	return &ctxReader{ctx: ctx, r: r}
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
