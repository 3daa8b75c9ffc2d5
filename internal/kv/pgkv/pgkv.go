// Package pgkv keeps kv's buckets in a PostgreSQL database, so that the
// metadata of several sbxdb servers, on several machines, is one store.
//
// Each View is one REPEATABLE READ READ ONLY transaction: one snapshot.
// Each Update is one READ COMMITTED transaction that first takes a
// transaction-scoped advisory lock, the same for every process using the
// schema, so write transactions run one at a time across all of them, as
// bbolt's do in one process: logic that reads and then writes in Go (a
// head compare-and-swap, a fence check, a reference count, a sweep's
// re-check of a blob, a repack's swap of index entries) is as safe as
// under bbolt. (READ COMMITTED, not REPEATABLE READ, because the snapshot
// must be taken after the lock is held, or it would miss the previous
// writer's commit.) Running write transactions of several processes at
// once (SERIALIZABLE, retried on 40001) was tried and withdrawn: a sweep's
// long transaction starved behind a stream of appends, and two servers
// appended no faster, their batches conflicting on shared index pages.
//
// Update still runs fn again, in a new transaction, after a jittered
// backoff, when PostgreSQL aborts it as a deadlock or a serialization
// failure (40P01, 40001): fn may run more than once, and must have no
// effect outside its transaction that a second run would not redo (kv.Tx
// says so).
//
// A bucket's sequence is not one row: SetSequence writes the value and AddSequence
// (kv.AddSequence) adds a delta row without reading anything, so that
// transactions that only add to a sequence do not conflict; its value is
// the sum of its rows, read only when Sequence is called.
//
// # Tables
//
// Everything lives in one schema, "sbxdb" unless Options.Schema says
// otherwise, created by Open when absent:
//
//	version(version)               the schema version, one row
//	buckets(id, nh, name, seq)     nh = sha256(name); seq is unused since
//	                               version 2 (version 1 kept the sequence
//	                               there; Open moves it into seqs)
//	seqs(bucket, id, delta)        a bucket's sequence: the sum of its rows'
//	                               deltas, modulo 2^64 (bigints, two's
//	                               complement)
//	kv(bucket, kp, kh, krest, value)
//
// A key is stored as kp, its first 1024 bytes, and krest, the rest (empty
// for most keys). A btree index entry holds at most about 2.7 KB and keys
// may be 32 KiB, so the primary key is (bucket, kp, kh) with kh empty when
// krest is and the key's sha256 otherwise: unique per key, and, led by kp,
// the index range scans use. Ordering by (kp, krest) is the keys' byte
// order, since bytea compares bytewise and a key shorter than 1024 bytes
// has an empty krest.
//
// # Round trips
//
// A transaction begins in one round trip (BEGIN and the list of buckets). Puts, Deletes, DeleteBucket and sequence changes are
// queued and sent together with the next statement whose answer is needed
// (a Get, a cursor's read, a CreateBucket, the COMMIT), so a transaction
// sees its own writes and an Update of only writes takes two round trips.
// A cursor reads ahead in batches of up to 256 keys. A View returns
// without waiting for its transaction to end.
//
// A write transaction holds the row locks of what it wrote until it ends.
// If the machine running one dies, PostgreSQL releases them only when it
// notices the lost connection; a connection string may bound that with
// the session settings idle_in_transaction_session_timeout and
// tcp_keepalives_idle.
//
// # Errors
//
// Get and the cursor cannot return errors. A failed statement is recorded
// as the transaction's error; from then on reads return nil and writes
// return that error, and View or Update returns it in preference to what
// the function returned. A queued write that fails fails the transaction
// the same way, when it is sent. A failure of the connection or of the
// server wraps ErrUnavailable; the pool replaces broken connections, so
// the next call works without reopening. A serialization failure or a
// deadlock is retried by Update (above), up to maxAttempts runs; after the
// last, Update returns it. A transaction that fails before
// the function runs (a dead pooled connection) is retried on another
// connection. A COMMIT whose outcome is unknown, the connection lost while
// it ran, wraps ErrCommitUnknown as well as ErrUnavailable.
package pgkv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/big"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sbxdb/sbxdb"
	"github.com/sbxdb/sbxdb/internal/kv"
)

// SchemaVersion is the version of the tables this code reads and writes.
const SchemaVersion = 2

// DefaultSchema is the schema used when Options.Schema is empty.
const DefaultSchema = "sbxdb"

// prefixLen is how many leading bytes of a key kp holds. Changing it
// changes the schema version.
const prefixLen = 1024

// Errors of the database as a whole.
var (

	// ErrNewerSchema: the database was written by a newer version of this
	// package; Open refuses it.
	ErrNewerSchema = errors.New("pgkv: database schema is newer than this program")
	// ErrBucketNameRequired: a bucket name is empty.
	ErrBucketNameRequired = errors.New("pgkv: bucket name required")
)

// Options configure Open.
type Options struct {
	// Schema is the PostgreSQL schema holding the tables: DefaultSchema
	// when empty. Servers sharing metadata use the same schema; different
	// schemas in one database are independent stores.
	Schema string
	// MaxConns bounds the pool's connections; when 0, the connection
	// string's pool_max_conns, else pgxpool's default (the greater of 4
	// and the number of CPUs).
	MaxConns int32
}

// DB is a kv store in one PostgreSQL schema. It is safe for concurrent
// use.
type DB struct {
	pool    *pgxpool.Pool
	schema  string // the schema holding the tables
	lockKey int64  // the advisory lock under which Open creates or upgrades the tables
	retries int    // attempts to begin a transaction
	retried atomic.Int64
	// onRetry, when set (tests), is called before each retry of an
	// Update with the attempt that failed and its error.
	onRetry func(attempt int, err error)
	q       queries
}

type queries struct {
	loadBuckets, createBucket, deleteBucket, setSeq, addSeq, readSeq string
	get, getMany, put, del, first, seek, after                       string
}

func newQueries(s string) queries {
	return queries{
		loadBuckets:  "SELECT id, name FROM " + s + ".buckets",
		createBucket: "INSERT INTO " + s + ".buckets (nh, name) VALUES ($1, $2) RETURNING id",
		deleteBucket: "WITH d AS (DELETE FROM " + s + ".kv WHERE bucket = $1), q AS (DELETE FROM " + s + ".seqs WHERE bucket = $1)" +
			" DELETE FROM " + s + ".buckets WHERE id = $1",
		// Setting deletes the rows this transaction sees: a delta another
		// transaction adds concurrently stays (and serializes after).
		setSeq: "WITH d AS (DELETE FROM " + s + ".seqs WHERE bucket = $1) INSERT INTO " + s + ".seqs (bucket, delta) VALUES ($1, $2)",
		addSeq: "INSERT INTO " + s + ".seqs (bucket, delta) VALUES ($1, $2)",
		// The sum, modulo 2^64, as text: sum(bigint) is a numeric.
		readSeq: "SELECT coalesce(sum(delta), 0)::text FROM " + s + ".seqs WHERE bucket = $1",
		get:     "SELECT value FROM " + s + ".kv WHERE bucket = $1 AND kp = $2 AND kh = $3",
		// The keys' prefixes as one array: the rows of other keys sharing
		// a prefix (keys longer than prefixLen) are told apart by kh.
		getMany: "SELECT kp, kh, value FROM " + s + ".kv WHERE bucket = $1 AND kp = ANY($2)",
		put: "INSERT INTO " + s + ".kv (bucket, kp, kh, krest, value) VALUES ($1, $2, $3, $4, $5)" +
			" ON CONFLICT (bucket, kp, kh) DO UPDATE SET value = excluded.value",
		del:   "DELETE FROM " + s + ".kv WHERE bucket = $1 AND kp = $2 AND kh = $3",
		first: "SELECT kp, krest, value FROM " + s + ".kv WHERE bucket = $1 ORDER BY kp, krest LIMIT $2",
		seek: "SELECT kp, krest, value FROM " + s + ".kv WHERE bucket = $1 AND kp >= $2 AND (kp > $2 OR krest >= $3)" +
			" ORDER BY kp, krest LIMIT $4",
		after: "SELECT kp, krest, value FROM " + s + ".kv WHERE bucket = $1 AND kp >= $2 AND (kp > $2 OR krest > $3)" +
			" ORDER BY kp, krest LIMIT $4",
	}
}

func ddl(s string) string {
	return `
CREATE TABLE ` + s + `.version (version integer NOT NULL);
CREATE TABLE ` + s + `.buckets (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	nh bytea NOT NULL UNIQUE,
	name bytea NOT NULL,
	seq bigint NOT NULL DEFAULT 0
);
CREATE TABLE ` + s + `.kv (
	bucket bigint NOT NULL,
	kp bytea NOT NULL,
	kh bytea NOT NULL,
	krest bytea NOT NULL,
	value bytea NOT NULL,
	PRIMARY KEY (bucket, kp, kh)
);
` + seqsDDL(s) + `
INSERT INTO ` + s + `.version VALUES (` + fmt.Sprint(SchemaVersion) + `);`
}

func seqsDDL(s string) string {
	return `
CREATE TABLE ` + s + `.seqs (
	bucket bigint NOT NULL,
	id bigint GENERATED ALWAYS AS IDENTITY,
	delta bigint NOT NULL,
	PRIMARY KEY (bucket, id)
);`
}

// upgrade1 moves version 1's sequences (buckets.seq) into seqs.
func upgrade1(s string) string {
	return seqsDDL(s) + `
INSERT INTO ` + s + `.seqs (bucket, delta) SELECT id, seq FROM ` + s + `.buckets WHERE seq <> 0;
UPDATE ` + s + `.buckets SET seq = 0;
UPDATE ` + s + `.version SET version = 2;`
}

// sessionDefaults are the session settings Open gives every connection
// unless the connection string sets them: a transaction left idle ends
// after a minute, and a peer that vanished is noticed within about a
// minute of silence (keepalives after 30 s, every 10 s, 3 missed).
var sessionDefaults = map[string]string{
	"idle_in_transaction_session_timeout": "60000",
	"tcp_keepalives_idle":                 "30",
	"tcp_keepalives_interval":             "10",
	"tcp_keepalives_count":                "3",
}

// Open connects to the database connString names (a PostgreSQL URL or
// keyword/value string, as pgx parses it) and creates the schema when it
// is absent. It refuses a schema of a newer version with ErrNewerSchema.
func Open(ctx context.Context, connString string, opts Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgkv: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	// A write transaction holds the row locks of what it wrote, which
	// other servers' writes of the same rows (one thread's head, a sweep's
	// lock) wait for: a server that stops (paused, partitioned, its
	// machine gone) must not hold them for the hours PostgreSQL's defaults
	// would take to notice. The connection string's own settings win.
	for k, v := range sessionDefaults {
		if _, set := cfg.ConnConfig.RuntimeParams[k]; !set {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	cfg.ConnConfig.Tracer = counter{} // ProcessCounts (trace.go)
	schema := opts.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgkv: %w", err)
	}
	h := fnv.New64a()
	// The key of version 1's write lock, which its every Update took: an
	// upgrade from version 1 under it excludes that version's writers.
	io.WriteString(h, "sbxdb/pgkv write lock\x00"+schema)
	db := &DB{
		pool:    pool,
		schema:  schema,
		lockKey: int64(h.Sum64()),
		retries: int(cfg.MaxConns) + 1,
		q:       newQueries(pgx.Identifier{schema}.Sanitize()),
	}
	if err := db.initSchema(ctx, schema); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// initSchema creates the tables when absent, or upgrades them from an
// older version, under an advisory lock so that concurrent Opens do it
// once, and checks the stored version.
func (db *DB) initSchema(ctx context.Context, schema string) error {
	conn, err := db.acquire(ctx, "open", func(c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, "BEGIN ISOLATION LEVEL READ COMMITTED")
		if err == nil {
			_, err = c.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", db.lockKey)
		}
		return err
	})
	if err != nil {
		return err
	}
	defer conn.Release() // destroys it unless COMMIT ended the transaction
	s := pgx.Identifier{schema}.Sanitize()
	var haveSchema, haveTables bool
	err = conn.QueryRow(ctx, "SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
		s, s+".version").Scan(&haveSchema, &haveTables)
	if err != nil {
		return wrapErr(ctx, conn, "open", err)
	}
	if haveTables {
		var v int
		if err := conn.QueryRow(ctx, "SELECT max(version) FROM "+s+".version").Scan(&v); err != nil {
			return wrapErr(ctx, conn, "open: read schema version", err)
		}
		if v > SchemaVersion {
			return fmt.Errorf("%w: schema %s is version %d, this program knows %d", ErrNewerSchema, schema, v, SchemaVersion)
		}
		switch {
		case v == 1:
			if _, err := conn.Exec(ctx, upgrade1(s)); err != nil {
				return wrapErr(ctx, conn, "open: upgrade schema from version 1", err)
			}
		case v < SchemaVersion:
			return fmt.Errorf("pgkv: schema %s has unknown version %d", schema, v)
		}
	} else {
		q := ddl(s)
		if !haveSchema {
			q = "CREATE SCHEMA " + s + ";" + q
		}
		if _, err := conn.Exec(ctx, q); err != nil {
			return wrapErr(ctx, conn, "open: create schema", err)
		}
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return wrapErr(ctx, conn, "open: commit", err)
	}
	return nil
}

// Close waits for the transactions running to end and closes the pool's
// connections.
func (db *DB) Close() { db.pool.Close() }

// View runs fn in a read transaction: one snapshot of the database.
func (db *DB) View(ctx context.Context, fn func(kv.Tx) error) error {
	return db.run(ctx, false, fn)
}

// Update runs fn in a write transaction, committed when fn returns nil
// and rolled back otherwise. Write transactions of every process using
// the schema run concurrently and serializably: when PostgreSQL aborts
// this one to keep them so (a serialization failure or a deadlock), fn
// runs again in a new transaction, after a jittered backoff, up to
// maxAttempts times. fn must therefore be safe to run more than once.
func (db *DB) Update(ctx context.Context, fn func(kv.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := db.run(ctx, true, fn)
		if err == nil || attempt == maxAttempts || !Retryable(err) {
			return err
		}
		db.retried.Add(1)
		if hook := db.onRetry; hook != nil {
			hook(attempt, err)
		}
		select {
		case <-time.After(backoff(attempt)):
		case <-ctx.Done():
			return fmt.Errorf("pgkv: %w (retrying: %w)", ctx.Err(), err)
		}
	}
}

// maxAttempts bounds the runs of one Update's fn. Each failure means
// another transaction committed, so the store makes progress; the bound
// only keeps a pathological livelock from running forever.
const maxAttempts = 100

// backoff is the wait before run attempt+1: random in [0, d) with d
// doubling from 1 ms up to 64 ms, so that two transactions that conflicted
// do not start again in step.
func backoff(attempt int) time.Duration {
	d := time.Millisecond << min(attempt-1, 6)
	return time.Duration(rand.Int64N(int64(d)))
}

// Retryable says whether err is PostgreSQL's abort of a transaction that
// could not be serialized with the others (SQLSTATE 40001) or that
// deadlocked (40P01): nothing of it was committed, and running it again
// may succeed.
func Retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.Is(err, sbxdb.ErrCommitUnknown) || !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "40001" || pgErr.Code == "40P01"
}

// Retries returns how many times Update has run a function again since
// Open, after a serialization failure or a deadlock.
func (db *DB) Retries() int64 { return db.retried.Load() }

func (db *DB) run(ctx context.Context, writable bool, fn func(kv.Tx) error) error {
	t, err := db.begin(ctx, writable)
	if err != nil {
		return err
	}
	// Release destroys a connection still in a transaction (fn panicked,
	// failed, or ending it failed), which makes the server roll it back.
	release := true
	defer func() {
		if release {
			t.conn.Release()
		}
	}()
	ferr := fn(t)
	switch {
	case t.err != nil:
		return t.err
	case !writable:
		// Every read has succeeded; ending the snapshot changes nothing,
		// so the caller does not wait for it.
		release = false
		go func() {
			t.rollback(ctx)
			t.conn.Release()
		}()
		return ferr
	case ferr != nil:
		// Rolled back before returning, so that the rows it wrote are
		// free when Update returns.
		t.rollback(ctx)
		return ferr
	case ctx.Err() != nil:
		t.rollback(ctx)
		return fmt.Errorf("pgkv: %w", ctx.Err())
	}
	return t.commit(ctx)
}

// begin acquires a connection and starts a transaction on it, trying
// other connections while the failure is one of the connection: a pooled
// connection may have died since its last use, and nothing has run yet.
func (db *DB) begin(ctx context.Context, writable bool) (*tx, error) {
	t := &tx{db: db, ctx: ctx, writable: writable, buckets: map[string]*bucket{}}
	conn, err := db.acquire(ctx, "begin", t.start)
	if err != nil {
		return nil, err
	}
	t.conn = conn
	return t, nil
}

// acquire returns a pooled connection on which start succeeded.
func (db *DB) acquire(ctx context.Context, op string, start func(*pgxpool.Conn) error) (*pgxpool.Conn, error) {
	var last error
	for range db.retries {
		conn, err := db.pool.Acquire(ctx)
		if err != nil {
			// A new connection could not be made: trying again at once
			// would not help.
			return nil, wrapErr(ctx, nil, op, err)
		}
		err = start(conn)
		if err == nil {
			return conn, nil
		}
		last = wrapErr(ctx, conn, op, err)
		conn.Release()
		if !errors.Is(last, sbxdb.ErrMetadataUnavailable) {
			break
		}
	}
	return nil, last
}

// wrapErr states what failed: ctx's end, the connection (ErrUnavailable),
// or the statement. conn, when not nil, is the connection it ran on.
func wrapErr(ctx context.Context, conn *pgxpool.Conn, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(err, cerr) {
			return fmt.Errorf("pgkv: %s: %w", op, err)
		}
		return fmt.Errorf("pgkv: %s: %w: %w", op, cerr, err)
	}
	if unavailable(conn, err) {
		return fmt.Errorf("%w: %s: %w", sbxdb.ErrMetadataUnavailable, op, err)
	}
	return fmt.Errorf("pgkv: %s: %w", op, err)
}

// unavailable says whether err is a failure of the connection or of the
// server rather than of a statement.
func unavailable(conn *pgxpool.Conn, err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch c := pgErr.Code; {
		case strings.HasPrefix(c, "08"), // connection exception
			c == "57P01", c == "57P02", c == "57P03", // shutting down, crashed, starting up
			c == "53300": // too many connections
			return true
		}
		return conn != nil && conn.Conn().IsClosed()
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		pgconn.SafeToRetry(err):
		return true
	}
	return conn != nil && conn.Conn().IsClosed()
}

// tx is a transaction on one pooled connection. It is used by one
// goroutine, fn's.
//
// Writes are not sent when made: they are queued, and sent in one round
// trip with the next statement whose answer is needed (a read, a bucket's
// creation, the COMMIT), before it, so the transaction sees its own writes.
// A queued write that fails is the transaction's error.
type tx struct {
	db       *DB
	ctx      context.Context
	conn     *pgxpool.Conn
	writable bool
	err      error              // the first failure; sticky
	buckets  map[string]*bucket // every bucket, read when the transaction began
	pending  pgx.Batch          // queued writes
	ops      []string           // what each queued write does, for errors
}

// start begins the transaction on conn and reads the bucket table, in one
// round trip.
func (t *tx) start(conn *pgxpool.Conn) error {
	b := &pgx.Batch{}
	if t.writable {
		// One write transaction at a time across every process using the
		// schema: READ COMMITTED, so that the snapshot is taken after the
		// lock is held and sees the previous writer's commit.
		b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
		b.Queue("SELECT pg_advisory_xact_lock($1)", t.db.lockKey)
	} else {
		b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	}
	b.Queue(t.db.q.loadBuckets)
	br := conn.SendBatch(t.ctx, b)
	defer br.Close()
	for range b.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	for rows.Next() {
		bk := &bucket{tx: t}
		if err := rows.Scan(&bk.id, &bk.name); err != nil {
			rows.Close()
			return err
		}
		t.buckets[string(bk.name)] = bk
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return br.Close()
}

// fail records err, the failure of op, as the transaction's error unless
// one is recorded, and returns the recorded one.
func (t *tx) fail(op string, err error) error {
	if t.err == nil {
		t.err = wrapErr(t.ctx, t.conn, op, err)
	}
	return t.err
}

// maxPending bounds the writes queued, and so the memory they hold: the
// queue is sent when it reaches this many.
const maxPending = 1024

// queue queues a write, with what it does.
func (t *tx) queue(op, sql string, args ...any) {
	t.pending.Queue(sql, args...)
	t.ops = append(t.ops, op)
	if t.pending.Len() >= maxPending {
		t.query("", "", nil, nil)
	}
}

// query sends the queued writes and then sql, in one round trip, and calls
// scan for each row of sql's result; with sql empty, it sends the writes
// only. A failure is the transaction's.
func (t *tx) query(op, sql string, args []any, scan func(pgx.Rows) error) error {
	if t.err != nil {
		return t.err
	}
	if sql == "" {
		if t.pending.Len() == 0 {
			return nil
		}
		b, ops := t.pending, t.ops
		t.pending, t.ops = pgx.Batch{}, nil
		br := t.conn.SendBatch(t.ctx, &b)
		defer br.Close()
		for _, op := range ops {
			if _, err := br.Exec(); err != nil {
				return t.fail(op, err)
			}
		}
		if err := br.Close(); err != nil {
			return t.fail("write", err)
		}
		return nil
	}
	if t.pending.Len() == 0 {
		rows, err := t.conn.Query(t.ctx, sql, args...)
		if err != nil {
			return t.fail(op, err)
		}
		return t.scan(op, rows, scan)
	}
	b, ops := t.pending, t.ops
	t.pending, t.ops = pgx.Batch{}, nil
	b.Queue(sql, args...)
	br := t.conn.SendBatch(t.ctx, &b)
	defer br.Close()
	for _, op := range ops {
		if _, err := br.Exec(); err != nil {
			return t.fail(op, err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return t.fail(op, err)
	}
	if err := t.scan(op, rows, scan); err != nil {
		return err
	}
	if err := br.Close(); err != nil {
		return t.fail(op, err)
	}
	return nil
}

func (t *tx) scan(op string, rows pgx.Rows, scan func(pgx.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return t.fail(op, err)
		}
	}
	if err := rows.Err(); err != nil {
		return t.fail(op, err)
	}
	return nil
}

// endTimeout bounds a ROLLBACK, which may run after ctx has ended.
const endTimeout = 5 * time.Second

func (t *tx) rollback(ctx context.Context) {
	if t.conn.Conn().IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	// On failure the connection stays in its transaction and Release
	// destroys it.
	t.conn.Exec(ctx, "ROLLBACK")
}

// commit sends the queued writes, the changed sequences and COMMIT in one
// round trip.
func (t *tx) commit(ctx context.Context) error {
	for _, bk := range t.buckets {
		switch {
		case bk.seqSet:
			t.pending.Queue(t.db.q.setSeq, bk.id, int64(bk.seq))
			t.ops = append(t.ops, "set sequence")
		case bk.seqAdd != 0:
			t.pending.Queue(t.db.q.addSeq, bk.id, int64(bk.seqAdd))
			t.ops = append(t.ops, "add to sequence")
		}
	}
	b, ops := t.pending, t.ops
	t.pending, t.ops = pgx.Batch{}, nil
	b.Queue("COMMIT")
	br := t.conn.SendBatch(ctx, &b)
	defer br.Close()
	for _, op := range ops {
		if _, err := br.Exec(); err != nil {
			return t.commitErr(ctx, op, err)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return t.commitErr(ctx, "commit", err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("pgkv: commit: the server rolled the transaction back (%s)", tag)
	}
	return nil
}

// commitErr says whether the transaction that failed with err while
// committing may have committed.
func (t *tx) commitErr(ctx context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	if pgconn.SafeToRetry(err) || (errors.As(err, &pgErr) && !t.conn.Conn().IsClosed()) {
		// Nothing was sent, or the server answered that a statement
		// failed, which makes it skip the COMMIT after it.
		return wrapErr(ctx, t.conn, op, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %s: %w: %w", sbxdb.ErrCommitUnknown, op, ctx.Err(), err)
	}
	return fmt.Errorf("%w (%w): %s: %w", sbxdb.ErrCommitUnknown, sbxdb.ErrMetadataUnavailable, op, err)
}

func (t *tx) Writable() bool { return t.writable }

func (t *tx) Bucket(name []byte) kv.Bucket {
	if b := t.buckets[string(name)]; b != nil {
		return b
	}
	return nil
}

func (t *tx) CreateBucket(name []byte) (kv.Bucket, error) {
	switch {
	case !t.writable:
		return nil, kv.ErrTxNotWritable
	case t.err != nil:
		return nil, t.err
	case len(name) == 0:
		return nil, ErrBucketNameRequired
	case t.buckets[string(name)] != nil:
		return nil, kv.ErrBucketExists
	}
	nh := sha256.Sum256(name)
	b := &bucket{tx: t, id: -1, name: bytes.Clone(name), seqRead: true} // a new bucket's sequence is 0
	err := t.query("create bucket", t.db.q.createBucket, []any{nh[:], b.name}, func(r pgx.Rows) error {
		return r.Scan(&b.id)
	})
	if err == nil && b.id < 0 {
		err = t.fail("create bucket", errors.New("no id returned"))
	}
	if err != nil {
		return nil, err
	}
	t.buckets[string(name)] = b
	return b, nil
}

func (t *tx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	if b := t.buckets[string(name)]; b != nil {
		return b, nil
	}
	return t.CreateBucket(name)
}

func (t *tx) DeleteBucket(name []byte) error {
	b := t.buckets[string(name)]
	switch {
	case !t.writable:
		return kv.ErrTxNotWritable
	case t.err != nil:
		return t.err
	case b == nil:
		return kv.ErrBucketNotFound
	}
	t.queue("delete bucket", t.db.q.deleteBucket, b.id)
	b.deleted = true
	delete(t.buckets, string(name))
	return nil
}

// bucket is a bucket as one transaction sees it. Handles of one name in
// one transaction are the same *bucket.
//
// Its sequence, as this transaction sees it, is: seq when seqSet or
// seqRead, plus seqAdd when not seqSet. seqSet: SetSequence was called,
// and COMMIT writes seq (replacing the rows this transaction sees);
// otherwise COMMIT adds seqAdd, the sum of AddSequence's deltas, without
// having read anything. seqRead: seq holds the stored sum, read on the
// first call to Sequence (not before: a read of the sequence conflicts
// with every transaction adding to it).
type bucket struct {
	tx      *tx
	id      int64
	name    []byte
	seq     uint64
	seqRead bool
	seqSet  bool
	seqAdd  uint64 // modulo 2^64
	deleted bool   // by DeleteBucket in this transaction; a dead handle
}

var empty = []byte{}

// split returns a key's columns. kh and krest are empty, never nil, for a
// key of at most prefixLen bytes (nil would be sent as NULL).
func split(key []byte) (kp, kh, krest []byte) {
	if len(key) <= prefixLen {
		return key, empty, empty
	}
	h := sha256.Sum256(key)
	return key[:prefixLen], h[:], key[prefixLen:]
}

// checkWrite returns why a write to b cannot run, or nil.
func (b *bucket) checkWrite() error {
	switch {
	case !b.tx.writable:
		return kv.ErrTxNotWritable
	case b.tx.err != nil:
		return b.tx.err
	case b.deleted:
		return kv.ErrBucketNotFound
	}
	return nil
}

func (b *bucket) Get(key []byte) []byte {
	t := b.tx
	if t.err != nil || b.deleted || len(key) == 0 || len(key) > kv.MaxKeySize {
		return nil
	}
	kp, kh, _ := split(key)
	var v []byte
	found := false
	err := t.query("get", t.db.q.get, []any{b.id, kp, kh}, func(r pgx.Rows) error {
		found = true
		return r.Scan(&v)
	})
	switch {
	case err != nil || !found:
		return nil
	case v == nil:
		return empty
	}
	return v
}

// GetMany reads the keys in one query per kv.MaxGetMany of them (after
// the queued writes, as Get does).
func (b *bucket) GetMany(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for lo := 0; lo < len(keys); lo += kv.MaxGetMany {
		b.getMany(keys[lo:min(lo+kv.MaxGetMany, len(keys))], out[lo:])
	}
	return out
}

// getMany reads keys with one query into out.
func (b *bucket) getMany(keys [][]byte, out [][]byte) {
	t := b.tx
	if t.err != nil || b.deleted {
		return
	}
	type col struct{ kp, kh string }
	at := make(map[col][]int, len(keys)) // the indexes of each key in keys
	kps := make([][]byte, 0, len(keys))
	for i, key := range keys {
		if len(key) == 0 || len(key) > kv.MaxKeySize {
			continue
		}
		kp, kh, _ := split(key)
		c := col{string(kp), string(kh)}
		if at[c] == nil {
			kps = append(kps, kp)
		}
		at[c] = append(at[c], i)
	}
	if len(kps) == 0 {
		return
	}
	t.query("get", t.db.q.getMany, []any{b.id, kps}, func(r pgx.Rows) error {
		var kp, kh, v []byte // each row's own: a value must outlive the next row
		if err := r.Scan(&kp, &kh, &v); err != nil {
			return err
		}
		if v == nil {
			v = empty
		}
		for _, i := range at[col{string(kp), string(kh)}] {
			out[i] = v
		}
		return nil
	})
	if t.err != nil {
		clear(out[:len(keys)])
	}
}

// Put queues the write; the key and value are copied, so the caller may
// reuse them.
func (b *bucket) Put(key, value []byte) error {
	if err := b.checkWrite(); err != nil {
		return err
	}
	switch {
	case len(key) == 0:
		return kv.ErrKeyRequired
	case len(key) > kv.MaxKeySize:
		return kv.ErrKeyTooLarge
	}
	kp, kh, krest := split(bytes.Clone(key))
	b.tx.queue("put", b.tx.db.q.put, b.id, kp, kh, krest, append(make([]byte, 0, len(value)), value...))
	return nil
}

func (b *bucket) Delete(key []byte) error {
	if err := b.checkWrite(); err != nil {
		return err
	}
	if len(key) == 0 || len(key) > kv.MaxKeySize {
		return nil
	}
	b.del(bytes.Clone(key))
	return nil
}

// del queues the deletion of key, which it keeps.
func (b *bucket) del(key []byte) {
	kp, kh, _ := split(key)
	b.tx.queue("delete", b.tx.db.q.del, b.id, kp, kh)
}

func (b *bucket) Sequence() uint64 {
	if b.seqSet {
		return b.seq
	}
	if !b.seqRead && b.id >= 0 {
		t := b.tx
		var s string
		err := t.query("read sequence", t.db.q.readSeq, []any{b.id}, func(r pgx.Rows) error { return r.Scan(&s) })
		n, ok := new(big.Int).SetString(s, 10)
		if err != nil || !ok {
			if err == nil {
				t.fail("read sequence", fmt.Errorf("not a number: %q", s))
			}
			return 0
		}
		// Two's complement: the sum modulo 2^64 is the uint64.
		b.seq, b.seqRead = n.And(n, maxUint64).Uint64(), true
	}
	return b.seq + b.seqAdd
}

var maxUint64 = new(big.Int).SetUint64(^uint64(0))

func (b *bucket) SetSequence(v uint64) error {
	if err := b.checkWrite(); err != nil {
		return err
	}
	b.seq, b.seqSet, b.seqAdd = v, true, 0
	return nil
}

// AddSequence adds delta to the sequence (modulo 2^64) without reading
// it: transactions that only add to a sequence do not conflict
// (kv.AddSequence).
func (b *bucket) AddSequence(delta int64) error {
	if err := b.checkWrite(); err != nil {
		return err
	}
	if b.seqSet {
		b.seq += uint64(delta)
	} else {
		b.seqAdd += uint64(delta)
	}
	return nil
}

func (b *bucket) NextSequence() (uint64, error) {
	if err := b.SetSequence(b.Sequence() + 1); err != nil {
		return 0, err
	}
	return b.seq, nil
}

func (b *bucket) ForEach(fn func(k, v []byte) error) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return b.tx.err
}

func (b *bucket) Cursor() kv.Cursor { return &cursor{b: b} }

// Batch sizes of a cursor's reads: small first, since a Seek is often
// followed by a few Nexts only, then larger.
const (
	firstBatch = 16
	maxBatch   = 256
)

// cursor reads keys ahead in batches, each continuing strictly after the
// last key of the one before. So it returns keys in increasing order, each
// once, and ends, even when the transaction writes the bucket meanwhile;
// what it returns for a key is the key's value when its batch was read:
// a Put or Delete made after that, of a key up to maxBatch keys ahead, is
// not seen, one made further ahead is.
type cursor struct {
	b     *bucket
	rows  []row
	i     int  // the current row of rows; len(rows) when past the end
	more  bool // rows was a full batch: keys after it may exist
	batch int  // the size of the next batch
}

type row struct{ kp, krest, key, value []byte }

func (c *cursor) First() ([]byte, []byte) {
	c.batch = firstBatch
	return c.fetch(c.b.tx.db.q.first, c.b.id)
}

func (c *cursor) Seek(seek []byte) ([]byte, []byte) {
	// In a read transaction the rows read ahead are the snapshot's: a
	// seek forward within them needs no query (a sorted walk of many keys,
	// cas's lookups, seeks mostly there). A write transaction queries, to
	// see its own writes.
	if n := len(c.rows); !c.b.tx.writable && c.i < n &&
		bytes.Compare(seek, c.rows[c.i].key) >= 0 && bytes.Compare(seek, c.rows[n-1].key) <= 0 {
		c.i += sort.Search(n-c.i, func(x int) bool { return bytes.Compare(c.rows[c.i+x].key, seek) >= 0 })
		return c.cur()
	}
	c.batch = firstBatch
	if len(seek) == 0 {
		return c.fetch(c.b.tx.db.q.first, c.b.id)
	}
	kp, _, krest := split(seek)
	return c.fetch(c.b.tx.db.q.seek, c.b.id, kp, krest)
}

func (c *cursor) Next() ([]byte, []byte) {
	if c.i >= len(c.rows) {
		return nil, nil
	}
	c.i++
	if c.i < len(c.rows) {
		return c.cur()
	}
	if !c.more {
		return nil, nil
	}
	last := c.rows[len(c.rows)-1]
	c.batch = min(4*c.batch, maxBatch)
	return c.fetch(c.b.tx.db.q.after, c.b.id, last.kp, last.krest)
}

func (c *cursor) Delete() error {
	if err := c.b.checkWrite(); err != nil {
		return err
	}
	if c.i >= len(c.rows) {
		return nil
	}
	c.b.del(c.rows[c.i].key)
	return nil
}

func (c *cursor) cur() ([]byte, []byte) {
	r := c.rows[c.i]
	return r.key, r.value
}

// fetch reads the next batch with query (args, then the batch size) and
// lands on its first key.
func (c *cursor) fetch(query string, args ...any) ([]byte, []byte) {
	t := c.b.tx
	c.rows, c.i, c.more = c.rows[:0], 0, false
	if t.err != nil || c.b.deleted {
		return nil, nil
	}
	err := t.query("cursor", query, append(args, c.batch), func(rows pgx.Rows) error {
		var r row
		if err := rows.Scan(&r.kp, &r.krest, &r.value); err != nil {
			return err
		}
		r.key = r.kp
		if len(r.krest) > 0 {
			r.key = append(append(make([]byte, 0, len(r.kp)+len(r.krest)), r.kp...), r.krest...)
		}
		if r.value == nil {
			r.value = empty
		}
		c.rows = append(c.rows, r)
		return nil
	})
	if err != nil {
		c.rows = c.rows[:0]
		return nil, nil
	}
	c.more = len(c.rows) == c.batch
	if len(c.rows) == 0 {
		return nil, nil
	}
	return c.cur()
}
