package sbxdb

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sbxdb/sbxdb/chain"
)

var (
	// ErrBlobInUse refuses to delete a content-addressed blob that a
	// checkpoint, a plain object or an artifact record references, or that
	// a capture in flight has pinned.
	ErrBlobInUse = errors.New("sbxdb: blob is in use")
	// ErrInvalidObject refuses an object key, content type, custom
	// metadata, declared size or listing limit the store does not take
	// (SBXDB_BAD_REQUEST on the wire). Nothing is read or changed.
	ErrInvalidObject = errors.New("sbxdb: invalid object request")
)

// Limits of plain objects and listings.
const (
	// MaxObjectKeyBytes is the longest plain object key, in bytes.
	MaxObjectKeyBytes = 1024
	// MaxObjectMetaBytes bounds a plain object's content type, and
	// separately the names and values of its custom metadata together.
	MaxObjectMetaBytes = 8 << 10
	// MaxListObjects is the largest page ListObjects returns.
	MaxListObjects = 1000
)

// ObjectInfo describes a stored blob or plain object (docs/API.md, Blobs
// and objects).
type ObjectInfo struct {
	Key      string `json:"key"`
	Size     int64  `json:"size"`
	Uploaded int64  `json:"uploaded"` // epoch ms
	// SHA256 is the hex digest of the bytes.
	SHA256 string `json:"sha256"`
	// ContentType and CustomMetadata are a plain object's, as put.
	ContentType    string            `json:"contentType,omitempty"`
	CustomMetadata map[string]string `json:"customMetadata,omitempty"`
}

// PutObjectOptions describe the bytes given to PutObject.
type PutObjectOptions struct {
	// ContentType and CustomMetadata are kept with a plain object; a
	// content-addressed key keeps neither. The content type is at most
	// MaxObjectMetaBytes of UTF-8 text without control characters or
	// surrounding blanks (an HTTP header carries it); metadata names and
	// values are any UTF-8 strings (R2's custom metadata: JSON carries
	// them on the wire), the names' and values' bytes together at most
	// MaxObjectMetaBytes.
	ContentType    string
	CustomMetadata map[string]string
	// Size, when not -1, is the length the body must have.
	Size int64
}

// CheckObjectKey returns the error PutObject, OpenObject, StatObject and
// DeleteObject give key when it is neither a content-addressed blob key
// nor a valid plain object key (it matches ErrInvalidObject), or nil; blob
// reports a blob key. A plain key is 1 to MaxObjectKeyBytes bytes of UTF-8
// with no NUL and no empty, "." or ".." segment (no leading, trailing or
// doubled "/"). A client checks a key with it before building the key's
// URL: a path with such a segment does not reach the server unchanged.
func CheckObjectKey(key string) (blob bool, err error) {
	if strings.HasPrefix(key, chain.FilePrefix) || strings.HasPrefix(key, chain.ArtifactPrefix) {
		if err := CheckBlobKey(key); err != nil {
			return false, fmt.Errorf("%w: %w", ErrInvalidObject, err)
		}
		return true, nil
	}
	bad := func(why string) (bool, error) {
		return false, fmt.Errorf("%w: object key %q %s", ErrInvalidObject, key, why)
	}
	switch {
	case key == "":
		return bad("is empty")
	case len(key) > MaxObjectKeyBytes:
		return false, fmt.Errorf("%w: object key of %d bytes is longer than %d", ErrInvalidObject, len(key), MaxObjectKeyBytes)
	case !utf8.ValidString(key):
		return bad("is not UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return bad("contains NUL")
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return bad(`has an empty segment (a leading, trailing or doubled "/")`)
		case ".", "..":
			return bad(fmt.Sprintf("has a %q segment", seg))
		}
	}
	return false, nil
}

// CheckBlobKey returns nil for a content-addressed blob key, a namespace's
// prefix (chain.FilePrefix, chain.ArtifactPrefix) and 64 lowercase hex
// digits, and else a *BlobError matching ErrInvalidBlobKey.
func CheckBlobKey(key string) error {
	var h string
	switch {
	case len(key) == len(chain.FilePrefix)+64 && key[:len(chain.FilePrefix)] == chain.FilePrefix:
		h = key[len(chain.FilePrefix):]
	case len(key) == len(chain.ArtifactPrefix)+64 && key[:len(chain.ArtifactPrefix)] == chain.ArtifactPrefix:
		h = key[len(chain.ArtifactPrefix):]
	default:
		return &BlobError{Key: key, Err: ErrInvalidBlobKey, Detail: "want sandbox-files/sha256/<64 hex> or sandbox-artifacts/sha256/<64 hex>"}
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return &BlobError{Key: key, Err: ErrInvalidBlobKey, Detail: "digest must be lowercase hex"}
		}
	}
	return nil
}

// CheckPutObject returns the error PutObject gives key and opts before it
// reads a byte of the body (it matches ErrInvalidObject), or nil.
func CheckPutObject(key string, opts PutObjectOptions) error {
	blob, err := CheckObjectKey(key)
	switch {
	case err != nil:
		return err
	case opts.Size < -1:
		return fmt.Errorf("%w: size %d", ErrInvalidObject, opts.Size)
	case blob:
		return nil
	}
	if err := checkHeaderText("content type", opts.ContentType); err != nil {
		return err
	}
	total := 0
	for name, v := range opts.CustomMetadata {
		total += len(name) + len(v)
		switch {
		case !utf8.ValidString(name):
			return fmt.Errorf("%w: metadata name %q is not UTF-8", ErrInvalidObject, name)
		case !utf8.ValidString(v):
			return fmt.Errorf("%w: metadata %q: value %q is not UTF-8", ErrInvalidObject, name, v)
		}
	}
	if total > MaxObjectMetaBytes {
		return fmt.Errorf("%w: custom metadata of %d bytes is more than %d", ErrInvalidObject, total, MaxObjectMetaBytes)
	}
	return nil
}

// checkHeaderText refuses text an HTTP header value could not carry
// unchanged: invalid UTF-8, control characters, surrounding blanks, or more
// than MaxObjectMetaBytes.
func checkHeaderText(what, s string) error {
	switch {
	case len(s) > MaxObjectMetaBytes:
		return fmt.Errorf("%w: %s of %d bytes is longer than %d", ErrInvalidObject, what, len(s), MaxObjectMetaBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not UTF-8", ErrInvalidObject, what, s)
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("%w: %s %q starts or ends with a blank", ErrInvalidObject, what, s)
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: %s %q holds a control character", ErrInvalidObject, what, s)
	}
	return nil
}
