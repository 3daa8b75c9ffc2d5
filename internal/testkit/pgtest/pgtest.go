// Package pgtest runs a throw-away PostgreSQL cluster for the tests of one
// package: started on first use, on 127.0.0.1 and a free port, in a fresh
// temporary directory, and stopped and removed when the test binary ends.
//
// A package's TestMain calls Main; each test asks URL for a connection
// string to a database of its own. Stop, Start, Kill and Restart control the
// server for tests of what clients do when it goes away; the server is the
// package's, so tests that use them must not run in parallel with others.
//
// The binaries are PostgreSQL's (initdb, postgres) in $SBXDB_PG_BIN, else
// /usr/lib/postgresql/15/bin. PostgreSQL refuses to run as root, so as root
// the cluster runs as the user postgres, in a directory given to it. The
// server keeps fsync on, so that what a test sees after a kill is what a
// crash leaves. It listens on no unix socket outside its directory and
// trusts every local connection.
//
// When the binaries (or, as root, the postgres user) are missing, URL skips
// the test saying why, unless the environment variable CI is set, when it
// fails it instead.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultBin is where the PostgreSQL binaries are looked for when
// SBXDB_PG_BIN is empty.
const DefaultBin = "/usr/lib/postgresql/15/bin"

// dirPrefix names the temporary directories; stale ones, whose test binary
// is gone, are removed by the next cluster that starts.
const dirPrefix = "sbxdb-pgtest-"

// startTimeout bounds how long a starting server may take to accept
// connections (crash recovery included).
const startTimeout = 60 * time.Second

var (
	mu      sync.Mutex
	inMain  bool
	cl      *cluster
	skipWhy string // why the cluster cannot run here; set once
	dbSeq   int
)

type cluster struct {
	bin  string
	dir  string // temporary directory, owned by the server's user
	data string
	port int
	cred *syscall.Credential // nil: run as the current user
	cmd  *exec.Cmd           // the running postmaster, nil when stopped
	done chan struct{}       // closed when cmd has been waited for
}

// Main runs the tests of m and then stops and removes the cluster, if one
// was started. Call it from TestMain.
func Main(m *testing.M) {
	mu.Lock()
	inMain = true
	mu.Unlock()
	code := m.Run()
	mu.Lock()
	if cl != nil {
		cl.stop(syscall.SIGINT)
		os.RemoveAll(cl.dir)
		cl = nil
	}
	mu.Unlock()
	os.Exit(code)
}

// URL returns a connection string to a new, empty database on the cluster,
// starting the cluster when it is not running.
func URL(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	c := get(t)
	if c.cmd == nil {
		if err := c.start(); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	dbSeq++
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	return c.url(name)
}

// Stop shuts the server down (fast shutdown: sessions are ended, work is
// checkpointed); Start starts it again on the same port and directory.
func Stop(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	get(t).stop(syscall.SIGINT)
}

// Kill stops the server the way a crash does (immediate shutdown: no
// checkpoint; the next Start recovers from the write-ahead log).
func Kill(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	get(t).stop(syscall.SIGQUIT)
}

// Start starts a stopped server and waits until it accepts connections.
func Start(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	c := get(t)
	if c.cmd != nil {
		return
	}
	if err := c.start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Restart stops the server (fast shutdown) and starts it again.
func Restart(t testing.TB) {
	t.Helper()
	Stop(t)
	Start(t)
}

// get returns the cluster, initialising it on first use; it skips or fails
// t when the cluster cannot run here. mu is held.
func get(t testing.TB) *cluster {
	t.Helper()
	if !inMain {
		t.Fatal("pgtest: the package's TestMain must call pgtest.Main")
	}
	if skipWhy != "" {
		unavailable(t, skipWhy)
	}
	if cl != nil {
		return cl
	}
	c, why, err := newCluster()
	if why != "" {
		skipWhy = why
		unavailable(t, why)
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cl = c
	return c
}

// unavailable skips t, or fails it when CI is set.
func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("pgtest: PostgreSQL unavailable (CI is set): %s", why)
	}
	t.Skipf("pgtest: PostgreSQL unavailable: %s", why)
}

// newCluster runs initdb in a new temporary directory. A non-empty why
// says the cluster cannot run on this machine at all.
func newCluster() (c *cluster, why string, err error) {
	bin := os.Getenv("SBXDB_PG_BIN")
	if bin == "" {
		bin = DefaultBin
	}
	for _, p := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			return nil, fmt.Sprintf("no %s in %s (set SBXDB_PG_BIN): %v", p, bin, err), nil
		}
	}
	c = &cluster{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, "running as root and no user postgres to run the server as: " + err.Error(), nil
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	removeStale()
	c.dir, err = os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, "", err
	}
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, "", err
		}
	}
	c.data = filepath.Join(c.dir, "data")
	// --no-sync only skips initdb's own flush of the files it writes; the
	// server runs with fsync on.
	cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", c.data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(c.dir)
		return nil, "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return c, "", nil
}

// removeStale removes the directories of earlier clusters whose test
// binary has exited. Their servers died with it (Pdeathsig).
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
}

func (c *cluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// start runs the postmaster as a child of this process, on the cluster's
// port (picking one when it has none yet), and waits until it accepts
// connections. The child is killed if this process dies first.
func (c *cluster) start() error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		fresh := c.port == 0
		if fresh {
			p, err := freePort()
			if err != nil {
				return err
			}
			c.port = p
		}
		lastErr = c.startOnce()
		if lastErr == nil {
			return nil
		}
		if !fresh {
			// The port was ours before a Stop; another process may have
			// taken it meanwhile, so try again with a new one.
			c.port = 0
		}
	}
	return lastErr
}

func (c *cluster) startOnce() error {
	logPath := filepath.Join(c.dir, "log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.data,
		"-p", strconv.Itoa(c.port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=on",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	c.cmd, c.done = cmd, done

	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.url("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-done:
			c.cmd, c.done = nil, nil
			return fmt.Errorf("postgres exited while starting: %v\n%s", cmd.ProcessState, tail(logPath))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop(syscall.SIGQUIT)
			return fmt.Errorf("postgres not ready after %v: %v\n%s", startTimeout, err, tail(logPath))
		}
	}
}

// stop sends sig to the postmaster (SIGINT: fast shutdown, SIGQUIT:
// immediate) and waits for it to exit, killing it if it does not.
func (c *cluster) stop(sig syscall.Signal) {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(startTimeout):
		c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd, c.done = nil, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the end of the server's log, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
