package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sbxdb/sbxdb/engine"
	"github.com/sbxdb/sbxdb/server"
	"github.com/spf13/pflag"
)

// socketName is the default listener's socket, in the store directory.
const socketName = engine.SocketName

var serveCmd = register(&command{
	name:    "serve",
	group:   groupOther,
	writes:  true,
	creates: true,
	noJSON:  true,
	serves:  true,
	flagsUsage: "[--listen ADDR]... [--token-file FILE | --new-token FILE] [--allow-remote] [--allow-dirs PREFIX]... " +
		"[--log-format text|json] [--grace DUR] [--max-requests N] [--max-conns N] [--max-body-memory SIZE] " +
		"[--cache-size SIZE] " +
		"[--scrub-every DUR [--scrub-rate BYTES/S]] [--idle-exit DUR] [--exit-on-poison] [--test]",
	summary: "Serve the store over HTTP to the CLI, Go hosts and TypeScript hosts",
	detail: `serve opens the store for writing (creating it if it does not exist) and
serves it over HTTP/1.1 + JSON (docs/API.md) until SIGINT or SIGTERM. While
it runs, no other process can open the store; every client goes through
the server.

--listen ADDR (repeatable) is unix:PATH or tcp:HOST:PORT. Without it the
server listens on one unix socket, DIR/sbxdb.sock. A unix socket is made
with mode 0600: only the store's user can connect, and needs no token. A
socket file left by a server that died is replaced; one where a server
answers is an error naming it. A TCP listener requires --token-file FILE,
whose content (trimmed, at least 32 bytes) every request but GET
/v1/health must send as "Authorization: Bearer TOKEN", or --new-token FILE,
which makes FILE (it must not exist) with mode 0600 holding a new random
token (64 hex digits) and serves with it. Failed authentications are slowed
per client address, up to 5 s apart. Its host must be a loopback address
(127.0.0.1, ::1, localhost) unless --allow-remote. Port 0 picks a free
port. One line per listener, "listening on ADDR", goes to standard output
once the server accepts, then one per listener saying where its web UI
is ("ui at http://HOST:PORT/ui/" on TCP: open it in a browser and give
the token once; docs/API.md, UI).

Capture and restore of a directory (POST /v1/capture, /v1/restore) are
served on unix sockets; on TCP only for a directory that, symlinks
resolved, lies below an --allow-dirs PREFIX (repeatable; it must exist).

Each request is logged on standard error (request id, method, route,
status, duration, bytes in and out) as text or, with --log-format json,
JSON. At most --max-requests requests are served at once (default 256); one
more waits up to 5 s, then is refused with 503. At most --max-conns
connections are open at once (default 1024, or half the limit of open
files when less); a TCP connection that sends no authenticated request
within 10 s is closed, and so is the oldest such one when a connection
arrives at the cap. The JSON request bodies held at once are at most
--max-body-memory (default 1GiB; 0: no bound), each counted from its
Content-Length; one that does not fit waits up to 5 s for others to
finish, then is refused with 503 and Retry-After, and one larger than the
bound is refused with 413. GET /metrics serves Prometheus metrics.

--cache-size SIZE bounds the packs a store whose blobs are in a bucket
(--blobs) keeps in its blob directory for reading (default 0: 2GiB or a
tenth of the disk, whichever is smaller); beyond it the least recently
used are removed. A pack being read is never removed.

--scrub-every DUR checks the store in the background every DUR, as check
--verify-blobs does (the page walk, the metadata, every blob read back),
reading blobs at most --scrub-rate bytes per second (default 32 MiB/s) so
that it takes a bounded share of the disk; it repairs nothing. Findings
are logged, counted in GET /metrics (sbxdb_scrub_*) and reported by GET
/v1/health, which stays 200: health says the server serves.

--test serves test stores, for test suites: POST /v1/test/stores opens
a fresh store, with lease timings of its own, in a private temporary
directory, and a request naming it in the X-Sbxdb-Test-Store header is
served by that store, at the clock its X-Sbxdb-Now header sets (epoch ms).
Test stores are deleted when the server stops; those of a server that was
killed are deleted when the next serve --test starts. Without --test, such
requests are refused with 403.

--idle-exit DUR stops the server as SIGTERM does once no client has had a
connection open for DUR: from the start if none connects, and after the
last one closes. A server started for the processes that use a store
(the TypeScript package's open({dir})) exits with it once they are gone.

A failed sync (a full or failing disk) poisons the store: writes are then
refused with 503 SBXDB_POISONED and Retry-After, and GET /v1/health
answers 503 SBXDB_POISONED naming the cause, while reads go on. The
server reopens the store by itself once the cause clears, retrying from
100 ms, doubling to 30 s. With --exit-on-poison it stops instead, as on a
signal, and exits 13, for a supervisor to restart it.

On SIGINT or SIGTERM the server stops accepting, lets the requests in
flight finish for up to --grace (default 30s; 0 cancels them at once),
cancels the rest (a write is one transaction: a cancelled one leaves
nothing), closes the store and the test stores, removes its socket files
and exits 0.`,
	flags: func(fset *pflag.FlagSet, inv *invocation) {
		f := &serveFlags{grace: server.DefaultGrace, maxRequests: server.DefaultMaxRequests, logFormat: "text"}
		fset.Var(&f.listen, "listen", "listen on `ADDR`, unix:PATH or tcp:HOST:PORT (repeatable; default unix:DIR/"+socketName+")")
		fset.StringVar(&f.tokenFile, "token-file", "", "read the bearer token TCP clients must send from `FILE`")
		fset.StringVar(&f.newToken, "new-token", "", "make `FILE` (mode 0600) holding a new random token, and serve with it")
		fset.BoolVar(&f.allowRemote, "allow-remote", false, "allow a TCP listener on a host that is not loopback")
		fset.Var(&f.allowDirs, "allow-dirs", "let TCP clients capture and restore below `PREFIX` (repeatable)")
		fset.StringVar(&f.logFormat, "log-format", f.logFormat, "log requests as `text` or json")
		fset.DurationVar(&f.grace, "grace", f.grace, "on a signal, let requests finish for `DUR` before cancelling them")
		fset.IntVar(&f.maxRequests, "max-requests", f.maxRequests, "serve at most `N` requests at once")
		fset.IntVar(&f.maxConns, "max-conns", 0, "keep at most `N` connections open (default 1024, or half the open-file limit)")
		fset.DurationVar(&f.scrubEvery, "scrub-every", 0, "check the store and its blobs in the background every `DUR` (default never)")
		fset.Int64Var(&f.scrubRate, "scrub-rate", server.DefaultScrubBytesPerSecond, "read blobs back at most `BYTES` per second while scrubbing")
		fset.DurationVar(&f.idleExit, "idle-exit", 0, "stop once no client has been connected for `DUR` (0: never)")
		fset.BoolVar(&f.exitOnPoison, "exit-on-poison", false, "exit with status 13 once the store is poisoned instead of reopening it")
		f.maxBodyMemory = server.DefaultMaxBodyBytesInFlight
		fset.Var(&f.maxBodyMemory, "max-body-memory", "hold at most `SIZE` of JSON request bodies at once (B, KiB, MiB, GiB; 0: no bound)")
		fset.Var(&f.cacheSize, "cache-size", "keep at most `SIZE` of packs from the bucket cached (B, KiB, MiB, GiB; 0: the default)")
		fset.BoolVar(&f.test, "test", false, "serve test stores, each with the clock its requests set (test suites only)")
		inv.ctx = withServeFlags(inv.ctx, f)
	},
	check: func(inv *invocation, args []string) error {
		if err := serveFlagsOf(inv).check(); err != nil {
			return err
		}
		return checkCount(args, 0, "")
	},
	run: runServe,
})

// serveFlags are the flags of serve. They travel in the invocation's
// context (withServeFlags), so that the invocation keeps only the flags
// the other commands share.
type serveFlags struct {
	listen      stringList
	tokenFile   string
	newToken    string
	allowRemote bool
	allowDirs   stringList
	logFormat   string
	grace       time.Duration
	maxRequests int
	maxConns    int
	scrubEvery  time.Duration
	scrubRate   int64
	idleExit    time.Duration
	test        bool
	// exitOnPoison stops the server once the store is poisoned, instead
	// of letting it reopen the store (server.Options.NoRecover).
	exitOnPoison bool
	// maxBodyMemory is server.Options.MaxBodyBytesInFlight; 0 sets no
	// bound.
	maxBodyMemory byteSize
	// cacheSize is engine.Options.CacheSize; 0 is its default.
	cacheSize byteSize
}

type serveFlagsKey struct{}

func withServeFlags(ctx context.Context, f *serveFlags) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, serveFlagsKey{}, f)
}

func serveFlagsOf(inv *invocation) *serveFlags {
	return inv.ctx.Value(serveFlagsKey{}).(*serveFlags)
}

// check reports flags that do not go together: usage errors.
func (f *serveFlags) check() error {
	switch {
	case f.logFormat != "text" && f.logFormat != "json":
		return fmt.Errorf("--log-format %q: want text or json", f.logFormat)
	case f.grace < 0:
		return fmt.Errorf("--grace %s: must not be negative", f.grace)
	case f.maxRequests < 1:
		return fmt.Errorf("--max-requests %d: must be at least 1", f.maxRequests)
	case f.maxConns < 0:
		return fmt.Errorf("--max-conns %d: must be at least 1", f.maxConns)
	case f.tokenFile != "" && f.newToken != "":
		return errors.New("--token-file and --new-token: give one token")
	case f.scrubEvery < 0:
		return fmt.Errorf("--scrub-every %s: must not be negative", f.scrubEvery)
	case f.scrubRate < 1:
		return fmt.Errorf("--scrub-rate %d: must be at least 1", f.scrubRate)
	case f.idleExit < 0:
		return fmt.Errorf("--idle-exit %s: must not be negative", f.idleExit)
	}
	for _, addr := range f.listen {
		network, address, err := server.ParseAddr(addr)
		if err != nil {
			return fmt.Errorf("--listen %s: %s", addr, strings.TrimPrefix(err.Error(), "server: "))
		}
		if network != "tcp" {
			continue
		}
		if f.tokenFile == "" && f.newToken == "" {
			return fmt.Errorf("--listen %s: a TCP listener requires --token-file", addr)
		}
		if !f.allowRemote && !server.IsLoopback(address) {
			return fmt.Errorf("--listen %s: the host is not a loopback address; --allow-remote allows it", addr)
		}
	}
	return nil
}

func runServe(inv *invocation, _ []string) error {
	f := serveFlagsOf(inv)
	opts := server.Options{MaxRequests: f.maxRequests, MaxConns: f.maxConns, Grace: f.grace, Version: version(), TestStores: f.test,
		NoRecover: f.exitOnPoison, MaxBodyBytesInFlight: int64(f.maxBodyMemory)}
	if f.maxBodyMemory == 0 {
		opts.MaxBodyBytesInFlight = -1 // Options' 0 is the default; no bound is negative
	}
	if f.grace == 0 {
		opts.Grace = -1 // Options.Grace 0 is the default; none is negative
	}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		switch opts.Token = strings.TrimSpace(string(b)); {
		case opts.Token == "":
			return &usageError{err: fmt.Errorf("--token-file %s: the file holds no token", f.tokenFile)}
		case len(opts.Token) < minTokenBytes:
			return &usageError{err: fmt.Errorf("--token-file %s: the token is %d bytes, fewer than %d; --new-token FILE makes one",
				f.tokenFile, len(opts.Token), minTokenBytes)}
		}
	}
	for _, d := range f.allowDirs {
		if st, err := os.Stat(d); err != nil {
			return fmt.Errorf("--allow-dirs: %w", err)
		} else if !st.IsDir() {
			return fmt.Errorf("--allow-dirs %s: not a directory", d)
		}
		opts.AllowDirs = append(opts.AllowDirs, d)
	}
	if f.newToken != "" {
		token, err := writeNewToken(f.newToken)
		if err != nil {
			return fmt.Errorf("--new-token: %w", err)
		}
		opts.Token = token
	}
	var h slog.Handler = slog.NewTextHandler(inv.errOut, nil)
	if f.logFormat == "json" {
		h = slog.NewJSONHandler(inv.errOut, nil)
	}
	opts.Logger = slog.New(h)

	// The test stores of servers that were killed, gone before this one
	// says it listens.
	abandoned := 0
	if f.test {
		abandoned = server.RemoveAbandonedTestStores("")
	}
	db, err := inv.openStore()
	if err != nil {
		return err
	}
	addrs := f.listen
	if len(addrs) == 0 {
		addrs = stringList{"unix:" + filepath.Join(inv.dir, socketName)}
	}
	var ls []net.Listener
	closeAll := func() {
		for _, l := range ls {
			l.Close()
		}
	}
	for _, addr := range addrs {
		l, err := server.Listen(addr)
		if err != nil {
			closeAll()
			db.Close()
			return errors.New(strings.TrimPrefix(err.Error(), "server: "))
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		fmt.Fprintf(inv.out, "listening on %s\n", server.AddrString(l))
	}
	// The UI's address, after every "listening on" line: a browser reaches
	// a TCP listener; a unix socket's UI needs a client of the socket.
	for _, l := range ls {
		if a, ok := l.Addr().(*net.TCPAddr); ok {
			fmt.Fprintf(inv.out, "ui at http://%s/ui/\n", a)
		} else {
			fmt.Fprintf(inv.out, "ui at /ui/ on %s (for a browser, add --listen tcp:127.0.0.1:PORT)\n", server.AddrString(l))
		}
	}
	attrs := []any{"store", db.Dir(), "version", opts.Version}
	if f.test {
		attrs = append(attrs, "testStores", true)
		if abandoned > 0 {
			attrs = append(attrs, "abandonedTestStoresRemoved", abandoned)
		}
	}
	if f.scrubEvery > 0 {
		attrs = append(attrs, "scrubEvery", f.scrubEvery, "scrubRate", f.scrubRate)
	}
	ctx := inv.ctx
	if f.idleExit > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		idle := server.NewIdleExit(f.idleExit, func() {
			opts.Logger.Info("no client connected", "for", f.idleExit.String())
			stop()
		})
		for i, l := range ls {
			ls[i] = idle.Listener(l)
		}
		idle.Start()
		attrs = append(attrs, "idleExit", f.idleExit.String())
	}
	opts.Logger.Info("serving", attrs...)
	var poisoned <-chan struct{}
	if f.exitOnPoison {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		poisoned = db.PoisonNotify()
		go func() {
			select {
			case <-poisoned:
				opts.Logger.Error("store poisoned; stopping (--exit-on-poison)", "err", db.Poisoned())
				cancel() // Serve stops as on a signal, letting requests finish
			case <-ctx.Done():
			}
		}()
	}
	srv := server.New(db, opts)
	scrubCtx, stopScrub := context.WithCancel(ctx)
	scrubbed := make(chan struct{})
	go func() { defer close(scrubbed); srv.Scrub(scrubCtx, f.scrubEvery, f.scrubRate) }()
	err = srv.Serve(ctx, ls...)
	stopScrub()
	<-scrubbed // before the store closes
	if perr := db.Poisoned(); err == nil && poisoned != nil && perr != nil && inv.ctx.Err() == nil {
		err = fmt.Errorf("stopped (--exit-on-poison): %w", perr)
	}
	closeAll()
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	opts.Logger.Info("stopped")
	return err
}

// minTokenBytes is the shortest token serve takes: 32 bytes, as many as
// the random ones --new-token makes hold.
const minTokenBytes = 32

// writeNewToken makes the file path, which must not exist, with mode 0600,
// holding a new token: 32 random bytes in hex, and a newline. It returns
// the token.
func writeNewToken(path string) (string, error) {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	token := hex.EncodeToString(b[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(token + "\n")
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", err
	}
	return token, nil
}

// byteSize is a flag's count of bytes: a non-negative integer, optionally
// followed by B, KiB, MiB or GiB.
type byteSize int64

func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Set(s string) error {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}} {
		if v, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(v), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return fmt.Errorf("%q: want a number of bytes, optionally with B, KiB, MiB or GiB", s)
	}
	*b = byteSize(n << shift)
	return nil
}

func (b *byteSize) Type() string { return "size" }
