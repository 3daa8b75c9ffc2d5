package objects

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"

	"github.com/sbxdb/sbxdb/cas"
	"github.com/sbxdb/sbxdb/chain"
	"github.com/sbxdb/sbxdb/internal/meta"
)

// Blobs and plain objects (docs/API.md, Blobs and objects): the object-store
// face of the blob store that sbxdb serve offers hosts.
//
// A key under sandbox-files/sha256/ or sandbox-artifacts/sha256/ is a
// content-addressed blob, stored and read as the blob store keeps it. Any
// other valid key is a plain object: a record in bucket objects naming the
// blob that holds its bytes (sandbox-artifacts/sha256/<hex of the bytes>,
// so equal bodies are stored once, compressed and verified on every read
// like any blob), with its content type and custom metadata. The record
// holds its blob (meta.AddHold) from the transaction that writes it until
// the one that removes it, so a sweep keeps the bytes while the object
// exists and takes them at the first sweep after it is gone and nothing
// else names them.
//
// Durability order: a put writes the body through a cas.Batch, which makes
// the bytes durable before its transaction commits, and the object's
// record commits in that same transaction (Batch.CommitWith): a record
// never names bytes that are not on disk, and bytes written for a put that
// fails are never indexed.

// objectKey is a parsed key: a content-addressed blob key (ca) or a plain
// object key.
type objectKey struct {
	key string
	ca  bool
	ns  cas.Namespace
	sum [32]byte
}

// parseObjectKey classifies key after sbxdb.CheckObjectKey accepted it.
func parseObjectKey(key string) (objectKey, error) {
	blob, err := sbxdb.CheckObjectKey(key)
	if err != nil || !blob {
		return objectKey{key: key}, err
	}
	ns, sum, err := cas.ParseKey(key)
	if err != nil { // CheckObjectKey accepted it: cannot happen
		return objectKey{}, fmt.Errorf("%w: %w", sbxdb.ErrInvalidObject, err)
	}
	return objectKey{key: key, ca: true, ns: ns, sum: sum}, nil
}

// checkPut runs PutObject's checks of its arguments (sbxdb.CheckPutObject)
// and parses the key.
func checkPut(key string, opts sbxdb.PutObjectOptions) (objectKey, error) {
	if err := sbxdb.CheckPutObject(key, opts); err != nil {
		return objectKey{}, err
	}
	return parseObjectKey(key)
}

// blobInfo is the ObjectInfo of a content-addressed blob.
func blobInfo(i cas.Info) sbxdb.ObjectInfo {
	return sbxdb.ObjectInfo{Key: i.Key, Size: i.Size, Uploaded: i.Uploaded.UnixMilli(), SHA256: digestOf(i.Key)}
}

// objectInfo is the ObjectInfo of a plain object's record.
func objectInfo(key string, o *meta.Object) sbxdb.ObjectInfo {
	return sbxdb.ObjectInfo{Key: key, Size: o.Size, Uploaded: o.Uploaded, SHA256: digestOf(o.BlobKey),
		ContentType: o.ContentType, CustomMetadata: maps.Clone(o.Metadata)}
}

// digestOf returns the hex digest a blob key ends with.
func digestOf(blobKey string) string { return blobKey[strings.LastIndexByte(blobKey, '/')+1:] }

// Put stores the bytes of r under key and returns what it stored.
// For a content-addressed key, the body's sha256 must be the key's digest
// and, when opts.Size is not -1, its length opts.Size: else the error
// matches sbxdb.ErrBlobKeyMismatch and nothing is stored. Bytes stored already
// are not written again; their upload time is refreshed. For a plain key,
// the bytes go into a blob and the record (content type, metadata, upload
// time) replaces any earlier one in the transaction that indexes them; a
// body of another length than opts.Size is refused as for a blob. A body
// whose reader fails stores nothing. The body is streamed: memory does not
// grow with it past cas.MaxPacked.
func Put(ctx context.Context, s Store, key string, r io.Reader, opts sbxdb.PutObjectOptions) (sbxdb.ObjectInfo, error) {
	k, err := checkPut(key, opts)
	if err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	if s.ReadOnly() {
		return sbxdb.ObjectInfo{}, sbxdb.ErrReadOnly
	}
	if err := s.WriteRefused(); err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	b := s.Blobs().NewBatch()
	defer b.Close() // until the record naming the blob has committed or failed
	ns := cas.Artifacts
	if k.ca {
		ns = k.ns
	}
	res, err := addBody(ctx, b, ns, k, &sizedReader{r: r, key: key, want: opts.Size})
	if err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	if k.ca && res.Key != key {
		return sbxdb.ObjectInfo{}, &sbxdb.BlobError{Key: key, Err: sbxdb.ErrBlobKeyMismatch, Detail: fmt.Sprintf("the body's sha256 is %x", res.Sum)}
	}
	if k.ca {
		if err := b.Commit(ctx); err != nil {
			return sbxdb.ObjectInfo{}, err
		}
		var info sbxdb.ObjectInfo
		err := s.View(ctx, func(tx kv.Tx) error { // pinned still: a sweep cannot have taken it
			i, ok, err := cas.InfoIn(tx, key)
			if err == nil && !ok {
				err = &sbxdb.BlobError{Key: key, Err: sbxdb.ErrBlobNotFound, Detail: "gone after its put committed"}
			}
			info = blobInfo(i)
			return err
		})
		return info, err
	}
	rec := &meta.Object{BlobKey: res.Key, Size: res.Size, ContentType: opts.ContentType}
	if len(opts.CustomMetadata) > 0 {
		rec.Metadata = maps.Clone(opts.CustomMetadata)
	}
	err = b.CommitWith(ctx, func(tx kv.Tx) error {
		rec.Uploaded = s.NowMs()
		return meta.PutObject(tx, key, rec)
	})
	if err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	return objectInfo(key, rec), nil
}

// addBody adds the bytes of r to b in namespace ns: a body of at most
// cas.MaxPacked bytes (read into memory) to a pack, checked against a
// content-addressed key before anything is written; a longer one streamed
// into a file of its own (the caller compares its key).
func addBody(ctx context.Context, b *cas.Batch, ns cas.Namespace, k objectKey, r io.Reader) (cas.AddResult, error) {
	var buf bytes.Buffer
	_, err := io.CopyN(&buf, r, cas.MaxPacked+1)
	if err == io.EOF {
		data := buf.Bytes()
		if sum := sha256.Sum256(data); k.ca && sum != k.sum {
			return cas.AddResult{}, &sbxdb.BlobError{Key: k.key, Err: sbxdb.ErrBlobKeyMismatch, Detail: fmt.Sprintf("the body's sha256 is %x", sum)}
		}
		return b.Add(ctx, ns, data)
	}
	if err != nil {
		return cas.AddResult{}, err
	}
	return b.AddReader(ctx, ns, io.MultiReader(&buf, r))
}

// sizedReader reads a body that must be want bytes long (-1: any length):
// a longer or shorter one fails with a sbxdb.ErrBlobKeyMismatch error once that
// is known, reading at most one byte past want.
type sizedReader struct {
	r       io.Reader
	key     string
	want, n int64
}

func (s *sizedReader) Read(p []byte) (int, error) {
	if s.want >= 0 && int64(len(p)) > s.want-s.n+1 {
		p = p[:s.want-s.n+1]
	}
	n, err := s.r.Read(p)
	s.n += int64(n)
	switch {
	case s.want >= 0 && s.n > s.want:
		return 0, s.mismatch("more than")
	case err == io.EOF && s.want >= 0 && s.n < s.want:
		return n, s.mismatch(fmt.Sprintf("%d bytes, fewer than", s.n))
	}
	return n, err
}

func (s *sizedReader) mismatch(what string) error {
	return &sbxdb.BlobError{Key: s.key, Err: sbxdb.ErrBlobKeyMismatch, Detail: fmt.Sprintf("the body is %s the %d bytes declared", what, s.want)}
}

// Open returns a reader of key's verified bytes and what is stored
// under key. A key that is not stored is an error matching sbxdb.ErrBlobNotFound.
// Stored bytes that do not match their blob key are an error matching
// chain.ErrInvalidBlob and sbxdb.ErrBlobCorrupt: from Open when that is
// known at once (a blob stored in a pack), else from the Read that would
// have returned io.EOF (a blob of its own file, verified as it streams):
// a caller must treat what it read as unverified until Read returns
// io.EOF. A plain object whose blob is missing is an error matching
// chain.ErrMissingBlob (the store is damaged; sbxdb check says more).
func Open(ctx context.Context, s Store, key string) (io.ReadCloser, sbxdb.ObjectInfo, error) {
	k, err := parseObjectKey(key)
	if err != nil {
		return nil, sbxdb.ObjectInfo{}, err
	}
	prev := ""
	for {
		info, blobKey, err := lookup(ctx, s, k)
		if err != nil {
			return nil, sbxdb.ObjectInfo{}, err
		}
		r, err := s.Blobs().Open(ctx, blobKey)
		switch {
		case err == nil:
			return &objectReader{r: r}, info, nil
		case !k.ca && errors.Is(err, sbxdb.ErrBlobNotFound) && blobKey != prev:
			// Overwritten or deleted, and swept, since the record was
			// read: read it again.
			prev = blobKey
			continue
		case !k.ca && errors.Is(err, sbxdb.ErrBlobNotFound):
			return nil, sbxdb.ObjectInfo{}, chain.Errorf(chain.ErrMissingBlob, "object %q: its blob %s is missing", key, blobKey)
		}
		return nil, sbxdb.ObjectInfo{}, invalidBlob(err)
	}
}

// lookup reads what is stored under k and the key of the blob
// holding its bytes.
func lookup(ctx context.Context, s Store, k objectKey) (info sbxdb.ObjectInfo, blobKey string, err error) {
	if err := ctx.Err(); err != nil {
		return sbxdb.ObjectInfo{}, "", err
	}
	err = s.View(ctx, func(tx kv.Tx) error {
		if k.ca {
			i, ok, err := cas.InfoIn(tx, k.key)
			if err == nil && !ok {
				err = &sbxdb.BlobError{Key: k.key, Err: sbxdb.ErrBlobNotFound}
			}
			info, blobKey = blobInfo(i), k.key
			return err
		}
		o, err := meta.GetObject(tx, k.key)
		if err == nil && o == nil {
			err = &sbxdb.BlobError{Key: k.key, Err: sbxdb.ErrBlobNotFound, Detail: "no such object"}
		}
		if err == nil {
			info, blobKey = objectInfo(k.key, o), o.BlobKey
		}
		return err
	})
	return info, blobKey, err
}

// damagedBlobError is a failed read of stored bytes: it matches both the
// contract's code (chain.ErrInvalidBlob) and the blob store's error.
type damagedBlobError struct{ err error }

func (e *damagedBlobError) Error() string   { return chain.CodeInvalidBlob + ": " + e.err.Error() }
func (e *damagedBlobError) Unwrap() []error { return []error{chain.ErrInvalidBlob, e.err} }

// invalidBlob makes an error that says stored bytes are damaged
// (sbxdb.ErrBlobCorrupt) match chain.ErrInvalidBlob too.
func invalidBlob(err error) error {
	if err != nil && errors.Is(err, sbxdb.ErrBlobCorrupt) {
		return &damagedBlobError{err}
	}
	return err
}

// objectReader is a blob reader whose damage errors match
// chain.ErrInvalidBlob.
type objectReader struct{ r *cas.Reader }

func (o *objectReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	return n, invalidBlob(err)
}

// WriteTo lets io.Copy use the blob reader's own (see cas.Reader.WriteTo).
func (o *objectReader) WriteTo(w io.Writer) (int64, error) {
	n, err := o.r.WriteTo(w)
	return n, invalidBlob(err)
}

func (o *objectReader) Close() error { return o.r.Close() }

// Stat describes what is stored under key (an error matching
// sbxdb.ErrBlobNotFound when nothing is). It reads no bytes. A content-addressed
// blob's upload time is refreshed, on a writable store, as if its bytes
// had been put again: a host that finds a blob present and skips its
// upload relies on it as an upload would, so the sweep's olderThan window
// runs from the Stat (docs/API.md, HEAD refreshes). That costs a
// write transaction per call, the one the skipped put would have cost.
func Stat(ctx context.Context, s Store, key string) (sbxdb.ObjectInfo, error) {
	k, err := parseObjectKey(key)
	if err != nil {
		return sbxdb.ObjectInfo{}, err
	}
	if k.ca && !s.ReadOnly() {
		if err := refreshBlob(ctx, s, key); err != nil {
			return sbxdb.ObjectInfo{}, err
		}
	}
	info, _, err := lookup(ctx, s, k)
	return info, err
}

// refreshBlob sets key's upload time to now through a batch that pins it
// meanwhile; a key not stored is an error matching sbxdb.ErrBlobNotFound.
func refreshBlob(ctx context.Context, s Store, key string) error {
	b := s.Blobs().NewBatch()
	defer b.Close()
	missing, _, err := b.Lookup(ctx, []string{key})
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		// Absent, or its entry is damaged: lookup says which.
		return nil
	}
	b.Refresh([]string{key})
	return b.Commit(ctx)
}

// Delete deletes key; a key not stored is not an error. A plain
// object's record goes, and with it its hold on its blob: the bytes go at
// the next sweep that finds nothing else naming them. A content-addressed
// blob is deleted only when no checkpoint, plain object or artifact record
// names it and no capture in flight has pinned it; otherwise the error
// matches ErrBlobInUse (and cas.ErrPinned for a pin) and nothing changes.
func Delete(ctx context.Context, s Store, key string) error {
	k, err := parseObjectKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.ReadOnly() {
		return sbxdb.ErrReadOnly
	}
	if !k.ca {
		return s.Write(ctx, func(tx kv.Tx) error {
			_, err := meta.DeleteObject(tx, key)
			return err
		})
	}
	deleted, err := s.Blobs().DeleteUnused(ctx, []string{key}, s.InUse())
	if err != nil || len(deleted) == 1 {
		return err
	}
	stored := false
	err = s.View(ctx, func(tx kv.Tx) error {
		_, ok, err := cas.InfoIn(tx, key)
		stored = ok
		if errors.Is(err, sbxdb.ErrBlobCorrupt) {
			stored, err = true, nil // DeleteUnused reads the entry too: it would have said
		}
		return err
	})
	switch {
	case err != nil || !stored:
		return err
	case s.Blobs().Pinned(key):
		return fmt.Errorf("%w: %s: %w", sbxdb.ErrBlobInUse, key, cas.ErrPinned)
	}
	return fmt.Errorf("%w: %s is referenced by a checkpoint, a plain object or an artifact record", sbxdb.ErrBlobInUse, key)
}

// List lists, in key byte order, up to limit (0 to MaxListObjects)
// blobs and plain objects whose key starts with prefix and sorts after
// cursor ("" to start), and returns the cursor of the next page: the last
// key listed, or "" when nothing is left. Limit 0 lists nothing and gives
// no cursor (R2's list with limit 0). One read transaction; memory
// bounded by limit.
func List(ctx context.Context, s Store, prefix, cursor string, limit int) ([]sbxdb.ObjectInfo, string, error) {
	if limit < 0 || limit > sbxdb.MaxListObjects {
		return nil, "", fmt.Errorf("%w: limit %d is not from 0 to %d", sbxdb.ErrInvalidObject, limit, sbxdb.MaxListObjects)
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if limit == 0 {
		return []sbxdb.ObjectInfo{}, "", nil
	}
	out := make([]sbxdb.ObjectInfo, 0, min(limit+1, 64))
	err := s.View(ctx, func(tx kv.Tx) error {
		blobs, err := cas.ListIn(tx, prefix, cursor, limit+1)
		if err != nil {
			return err
		}
		i := 0
		// Blob keys and plain keys are disjoint: merge the two in order,
		// stopping one past the page to learn whether more follow.
		err = meta.ForEachObject(tx, prefix, cursor, func(key string, o *meta.Object, err error) (bool, error) {
			if err != nil {
				return false, err
			}
			for ; i < len(blobs) && blobs[i].Key < key && len(out) <= limit; i++ {
				out = append(out, blobInfo(blobs[i]))
			}
			if len(out) > limit {
				return false, nil
			}
			out = append(out, objectInfo(key, o))
			return len(out) <= limit, nil
		})
		for ; i < len(blobs) && len(out) <= limit; i++ {
			out = append(out, blobInfo(blobs[i]))
		}
		return err
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].Key
	}
	return out, next, nil
}
