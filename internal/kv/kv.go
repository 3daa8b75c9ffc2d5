// Package kv is the ordered key-value model the metadata of sbxdb is written
// against: named buckets of byte keys in byte order, read and written inside
// transactions. It is the subset of bbolt's Tx, Bucket and Cursor that the
// engine, internal/meta and cas use, so that one body of code — the same
// checks in the same order — runs on either metadata backend:
//
//   - Bolt adapts a bbolt transaction (the embedded store, sbx.db);
//   - package internal/kv/pgkv keeps the buckets in one PostgreSQL table and
//     runs each transaction as one SQL transaction, write transactions
//     one at a time across every server sharing the database.
//
// The semantics are bbolt's: a read transaction sees one consistent
// snapshot; a write transaction sees its own writes, and write
// transactions run one at a time (bbolt's lock, pgkv's advisory lock); a
// slice returned by Get or a cursor is valid until the
// transaction ends and must not be modified; buckets are top-level only.
//
// A backend whose reads can fail (a lost connection) cannot say so through
// Get's or a cursor's results: it records the first failure, returns nil
// from then on, and the transaction fails with that error in preference to
// whatever the function returned, so that a nil read never becomes an
// answer.
//
// # Running a write transaction again
//
// A backend that runs write transactions concurrently may abort one that
// conflicted with another and run its function again, in a new
// transaction (pgkv on a serialization failure). So the function of a
// write transaction may run more than once on shared metadata (on bbolt:
// exactly once), and must be re-runnable: every effect it has outside the
// transaction (results handed to callers, caches, counters) must be
// overwritten or discarded by the next run, and must not be acted on
// before the transaction has committed. Only the last run's writes are
// committed.
package kv

import "errors"

// Tx is a read or write transaction.
type Tx interface {
	// Bucket returns the named bucket, or nil when there is none.
	Bucket(name []byte) Bucket
	// CreateBucket creates the named bucket; ErrBucketExists when it
	// exists.
	CreateBucket(name []byte) (Bucket, error)
	// CreateBucketIfNotExists returns the named bucket, creating it when
	// missing.
	CreateBucketIfNotExists(name []byte) (Bucket, error)
	// DeleteBucket deletes the named bucket and every key in it;
	// ErrBucketNotFound when there is none.
	DeleteBucket(name []byte) error
	// Writable says whether this is a write transaction.
	Writable() bool
}

// Bucket is a set of keys in byte order, each with a value.
type Bucket interface {
	// Get returns the key's value, or nil when it is absent. A present key
	// has a non-nil value, empty or not.
	Get(key []byte) []byte
	// GetMany returns the values of keys, in order, each as Get would
	// return it (nil for an absent, empty or too long key); keys may
	// repeat. A backend with a cost per request reads them in a bounded
	// number of requests (pgkv: one query per MaxGetMany keys), not one
	// per key.
	GetMany(keys [][]byte) [][]byte
	// Put sets the key's value. The key is 1 to MaxKeySize bytes.
	Put(key, value []byte) error
	// Delete removes the key; removing an absent key is no error.
	Delete(key []byte) error
	// Cursor iterates over the keys in byte order.
	Cursor() Cursor
	// ForEach calls fn for every key in order, stopping at its first error.
	// fn must not change the bucket.
	ForEach(fn func(k, v []byte) error) error
	// Sequence is the bucket's counter; SetSequence sets it and
	// NextSequence increments it and returns the new value.
	Sequence() uint64
	SetSequence(v uint64) error
	NextSequence() (uint64, error)
}

// Cursor walks a bucket's keys in byte order. Each method returns the key
// and value it lands on, or a nil key past either end.
type Cursor interface {
	First() (k, v []byte)
	Next() (k, v []byte)
	// Seek lands on the first key at or after seek.
	Seek(seek []byte) (k, v []byte)
	// Delete removes the key the cursor is on; Next then lands on the key
	// after it.
	Delete() error
}

// MaxGetMany is the most keys one request of a backend's GetMany reads:
// larger calls are split.
const MaxGetMany = 4096

// MaxKeySize is the longest key every backend stores: bbolt's limit.
const MaxKeySize = 32768

// Errors of the bucket operations, the same on every backend.
var (
	ErrBucketExists   = errors.New("kv: bucket already exists")
	ErrBucketNotFound = errors.New("kv: bucket not found")
	ErrKeyRequired    = errors.New("kv: key required")
	ErrKeyTooLarge    = errors.New("kv: key too large")
	ErrTxNotWritable  = errors.New("kv: transaction not writable")
)

// SequenceAdder is a Bucket that can add to its sequence without reading
// it (pgkv): transactions that only add to one sequence then do not
// conflict with each other, as reading and setting it would make them.
type SequenceAdder interface {
	AddSequence(delta int64) error
}

// AddSequence adds delta to b's sequence, modulo 2^64: without reading it
// when b is a SequenceAdder, else as SetSequence(Sequence() + delta),
// which on bbolt is the same thing (one writer at a time).
func AddSequence(b Bucket, delta int64) error {
	if a, ok := b.(SequenceAdder); ok {
		return a.AddSequence(delta)
	}
	return b.SetSequence(b.Sequence() + uint64(delta))
}

// Count returns the number of keys in b.
func Count(b Bucket) (n int, err error) {
	err = b.ForEach(func(_, _ []byte) error { n++; return nil })
	return n, err
}
