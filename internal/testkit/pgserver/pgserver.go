// Package pgserver runs a throw-away PostgreSQL cluster: initdb in a fresh
// temporary directory, a postmaster on 127.0.0.1 and a free port, run as
// a child of this process and killed if it dies. It is the core of
// internal/testkit/pgtest (a cluster per test binary) and is usable from
// a program too (bench/cmd/sbxbench).
//
// The binaries are PostgreSQL's (initdb, postgres) in $SBXDB_PG_BIN, else
// DefaultBin. PostgreSQL refuses to run as root, so as root the cluster
// runs as the user postgres, in a directory given to it. The server keeps
// fsync on, so that what a client sees after a kill is what a crash
// leaves. It listens on no unix socket outside its directory and trusts
// every local connection.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultBin is where the PostgreSQL binaries are looked for when
// SBXDB_PG_BIN is empty.
const DefaultBin = "/usr/lib/postgresql/15/bin"

// ErrUnavailable is New's error when a cluster cannot run on this machine
// at all (no binaries; as root, no postgres user); the error says why.
var ErrUnavailable = errors.New("PostgreSQL unavailable")

// dirPrefix names the temporary directories; stale ones, whose process is
// gone, are removed by the next cluster made.
const dirPrefix = "sbxdb-pgtest-"

// StartTimeout bounds how long a starting server may take to accept
// connections (crash recovery included).
const StartTimeout = 60 * time.Second

// Cluster is one initialised cluster, running or stopped. Its methods are
// not safe for concurrent use.
type Cluster struct {
	bin  string
	dir  string // temporary directory, owned by the server's user
	data string
	port int
	cred *syscall.Credential // nil: run as the current user
	cmd  *exec.Cmd           // the running postmaster, nil when stopped
	done chan struct{}       // closed when cmd has been waited for
}

// New runs initdb in a new temporary directory. The cluster is stopped:
// Start starts it.
func New() (*Cluster, error) {
	bin := os.Getenv("SBXDB_PG_BIN")
	if bin == "" {
		bin = DefaultBin
	}
	for _, p := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			return nil, fmt.Errorf("%w: no %s in %s (set SBXDB_PG_BIN): %v", ErrUnavailable, p, bin, err)
		}
	}
	c := &Cluster{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("%w: running as root and no user postgres to run the server as: %v", ErrUnavailable, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	removeStale()
	var err error
	c.dir, err = os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(c.dir)
		return nil, err
	}
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			os.RemoveAll(c.dir)
			return nil, err
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
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return c, nil
}

// removeStale removes the directories of earlier clusters whose process
// has exited. Their servers died with it (Pdeathsig).
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

// Running says whether the server runs (Start succeeded, no Stop since).
func (c *Cluster) Running() bool { return c.cmd != nil }

// URL is the connection string of database db on the cluster.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// CreateDatabase creates database name, which must not exist, and returns
// its URL.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	return c.URL(name), nil
}

// Start runs the postmaster as a child of this process, on the cluster's
// port (picking one when it has none yet), and waits until it accepts
// connections. The child is killed if this process dies first. Starting a
// running cluster does nothing.
func (c *Cluster) Start() error {
	if c.cmd != nil {
		return nil
	}
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

func (c *Cluster) startOnce() error {
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

	deadline := time.Now().Add(StartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
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
			return fmt.Errorf("postgres not ready after %v: %v\n%s", StartTimeout, err, tail(logPath))
		}
	}
}

// Stop shuts the server down (fast shutdown: sessions are ended, work is
// checkpointed) and waits for it to exit.
func (c *Cluster) Stop() { c.stop(syscall.SIGINT) }

// Kill stops the server the way a crash does (immediate shutdown: no
// checkpoint; the next Start recovers from the write-ahead log).
func (c *Cluster) Kill() { c.stop(syscall.SIGQUIT) }

// Remove stops the server and removes its directory.
func (c *Cluster) Remove() {
	c.Stop()
	os.RemoveAll(c.dir)
}

// stop sends sig to the postmaster (SIGINT: fast shutdown, SIGQUIT:
// immediate) and waits for it to exit, killing it if it does not.
func (c *Cluster) stop(sig syscall.Signal) {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(StartTimeout):
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
