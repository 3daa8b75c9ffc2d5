package meta

import (
	"bytes"
	"maps"
	"slices"

	"github.com/sbxdb/sbxdb/internal/kv"
)

// Object is the record of a plain object (bucket objects): its bytes are
// the blob BlobKey names, which the record holds (holds.go).
type Object struct {
	BlobKey     string
	Size        int64
	ContentType string
	Metadata    map[string]string // nil when there is none
	Uploaded    int64             // Unix ms of the put
}

// encodeObject writes o: blob key, size, content type, the metadata pairs
// by name, upload time.
func encodeObject(o *Object) []byte {
	e := &Encoder{}
	e.String(o.BlobKey)
	e.Varint(o.Size)
	e.String(o.ContentType)
	names := slices.Sorted(maps.Keys(o.Metadata))
	e.Uvarint(uint64(len(names)))
	for _, n := range names {
		e.String(n)
		e.String(o.Metadata[n])
	}
	e.Varint(o.Uploaded)
	return e.Bytes()
}

func decodeObject(key, p []byte) (*Object, error) {
	d := NewDecoder(p)
	o := &Object{BlobKey: d.String(), Size: d.Varint(), ContentType: d.String()}
	if n := d.Count(2); n > 0 {
		o.Metadata = make(map[string]string, n)
		for range n {
			name := d.String()
			o.Metadata[name] = d.String()
		}
	}
	o.Uploaded = d.Varint()
	if err := d.Err(); err != nil {
		return nil, corrupt(BucketObjects, key, "malformed object record: "+err.Error())
	}
	return o, nil
}

// GetObject returns the record of the plain object key, or nil when there
// is none.
func GetObject(tx kv.Tx, key string) (*Object, error) {
	p, err := get(tx, BucketObjects, []byte(key))
	if p == nil || err != nil {
		return nil, err
	}
	return decodeObject([]byte(key), p)
}

// PutObject stores o as the record of key, replacing the one there, and
// moves the hold: the blob the old record named loses one, o.BlobKey gains
// one.
func PutObject(tx kv.Tx, key string, o *Object) error {
	old, err := GetObject(tx, key)
	if err != nil {
		return err
	}
	if old != nil {
		if err := AddHold(tx, old.BlobKey, -1); err != nil {
			return err
		}
	}
	if err := AddHold(tx, o.BlobKey, 1); err != nil {
		return err
	}
	return put(tx, BucketObjects, []byte(key), encodeObject(o))
}

// DeleteObject removes the record of key and its hold, and reports whether
// there was one.
func DeleteObject(tx kv.Tx, key string) (bool, error) {
	old, err := GetObject(tx, key)
	if old == nil || err != nil {
		return false, err
	}
	if err := AddHold(tx, old.BlobKey, -1); err != nil {
		return false, err
	}
	return true, bucket(tx, BucketObjects).Delete([]byte(key))
}

// ForEachObject calls fn, in key byte order, with each plain object whose
// key starts with prefix and sorts after after, until fn returns false or
// an error. A record that does not unseal or decode is passed to fn as its
// error, with a nil object.
func ForEachObject(tx kv.Tx, prefix, after string, fn func(key string, o *Object, err error) (bool, error)) error {
	c := bucket(tx, BucketObjects).Cursor()
	start := []byte(prefix)
	if after >= prefix {
		start = []byte(after)
	}
	for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, []byte(prefix)); k, v = c.Next() {
		if string(k) == after {
			continue
		}
		var o *Object
		p, err := Unseal(BucketObjects, k, v)
		if err == nil {
			o, err = decodeObject(k, p)
		}
		more, err := fn(string(k), o, err)
		if !more || err != nil {
			return err
		}
	}
	return nil
}
