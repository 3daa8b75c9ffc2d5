package kv

import (
	"errors"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Bolt returns tx as a Tx. The adapters hold one pointer each, so wrapping
// allocates nothing.
func Bolt(tx *bolt.Tx) Tx { return boltTx{tx} }

// BoltTx returns the bbolt transaction under tx, or nil when tx is not
// bbolt's: for what only the embedded file has (its pages, its size).
func BoltTx(tx Tx) *bolt.Tx {
	if t, ok := tx.(boltTx); ok {
		return t.tx
	}
	return nil
}

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Bucket(name []byte) Bucket {
	if b := t.tx.Bucket(name); b != nil {
		return boltBucket{b}
	}
	return nil
}

func (t boltTx) CreateBucket(name []byte) (Bucket, error) {
	b, err := t.tx.CreateBucket(name)
	if err != nil {
		return nil, boltErr(err)
	}
	return boltBucket{b}, nil
}

func (t boltTx) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	b, err := t.tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, boltErr(err)
	}
	return boltBucket{b}, nil
}

func (t boltTx) DeleteBucket(name []byte) error { return boltErr(t.tx.DeleteBucket(name)) }
func (t boltTx) Writable() bool                 { return t.tx.Writable() }

type boltBucket struct{ b *bolt.Bucket }

func (b boltBucket) Get(key []byte) []byte { return b.b.Get(key) }

// GetMany is a loop of Gets: bbolt's reads cost no request.
func (b boltBucket) GetMany(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = b.b.Get(k)
	}
	return out
}
func (b boltBucket) Put(key, value []byte) error { return boltErr(b.b.Put(key, value)) }
func (b boltBucket) Delete(key []byte) error     { return boltErr(b.b.Delete(key)) }
func (b boltBucket) Cursor() Cursor              { return boltCursor{b.b.Cursor()} }
func (b boltBucket) ForEach(fn func(k, v []byte) error) error {
	return b.b.ForEach(fn)
}
func (b boltBucket) Sequence() uint64           { return b.b.Sequence() }
func (b boltBucket) SetSequence(v uint64) error { return boltErr(b.b.SetSequence(v)) }
func (b boltBucket) NextSequence() (uint64, error) {
	n, err := b.b.NextSequence()
	return n, boltErr(err)
}

type boltCursor struct{ c *bolt.Cursor }

func (c boltCursor) First() ([]byte, []byte)           { return c.c.First() }
func (c boltCursor) Next() ([]byte, []byte)            { return c.c.Next() }
func (c boltCursor) Seek(seek []byte) ([]byte, []byte) { return c.c.Seek(seek) }
func (c boltCursor) Delete() error                     { return boltErr(c.c.Delete()) }

// boltErr maps bbolt's errors of the bucket operations to this package's.
func boltErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, berrors.ErrBucketExists):
		return ErrBucketExists
	case errors.Is(err, berrors.ErrBucketNotFound):
		return ErrBucketNotFound
	case errors.Is(err, berrors.ErrKeyRequired):
		return ErrKeyRequired
	case errors.Is(err, berrors.ErrKeyTooLarge):
		return ErrKeyTooLarge
	case errors.Is(err, berrors.ErrTxNotWritable):
		return ErrTxNotWritable
	}
	return err
}

// BoltDB runs the transactions of a bbolt database as kv transactions.
type BoltDB struct{ DB *bolt.DB }

// View runs fn in a read transaction.
func (d BoltDB) View(fn func(Tx) error) error {
	return d.DB.View(func(tx *bolt.Tx) error { return fn(Bolt(tx)) })
}

// Update runs fn in a write transaction, committed when fn returns nil.
func (d BoltDB) Update(fn func(Tx) error) error {
	return d.DB.Update(func(tx *bolt.Tx) error { return fn(Bolt(tx)) })
}
