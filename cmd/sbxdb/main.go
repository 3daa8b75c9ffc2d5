// Command sbxdb inspects an sbxdb checkpoint store, captures workspaces into
// it, restores them, checks the store and collects its garbage.
//
// Usage:
//
//	sbxdb [--db DIR] [--server ADDR] [--json] <command> [flags] [arguments]
//
// The commands are:
//
//	threads               list threads: head, checkpoint count, latest time, writer lease
//	log THREAD            list a thread's chain from the head back through parents
//	ls CHECKPOINT [PATH]  list a checkpoint's entries under PATH: mode, size, path
//	show CHECKPOINT       show one checkpoint: header, files, artifacts, conversation size
//	diff A B              compare the file manifests of checkpoints A and B
//	cat CHECKPOINT PATH   write one file's verified bytes to standard output
//	refs                  list blob keys with their reference counts
//	stats                 metadata and blob bytes, logical and on disk, and the sharing ratio
//	capture DIR           record the workspace DIR as a new checkpoint on --thread's head
//	restore CHECKPOINT DIR
//	                      write a checkpoint's tree (or --thread's head) into DIR
//	check                 check reference counts, heads, chains and blobs (--repair, --verify-blobs)
//	gc                    retention (--keep N), the sweep of unused blobs (--older-than), repacking
//	compact               rewrite the database file without its free pages
//	delete-thread THREAD  delete a thread's checkpoints, head, transcript and lease (--yes)
//	migrate               upgrade a store of an older format to this build's
//	unlock THREAD         remove a thread's writer lease, whoever holds it
//	serve                 serve the store over HTTP to the CLI and to hosts
//	completion SHELL      print the completion script for bash, zsh, fish or powershell
//	version               print the version, commit and store format (also --version)
//	help [COMMAND]        print the command list, or one command's help
//
// The command tree is built with cobra: flags go before or after the
// command and its arguments (--db, --json and --server are global), a
// mistyped command or flag is answered with the nearest ones, and each
// command is one file declaring it (register).
//
// capture, gc, compact, migrate, unlock, delete-thread --yes and check
// --repair open the store for writing (capture creates it if needed;
// capture holds the thread's writer lease while it runs, taking over the
// lease of a writer on this host that no longer runs); the other commands
// open it read-only. --db names the store directory (default $SBXDB_DIR,
// else .sbxdb in the current directory); --json prints JSON instead of a
// table (cat's and serve's output is no report: there it changes only how
// a failure is printed).
// A store that another process holds is reported as busy, naming that
// process, after about a second.
//
// While sbxdb serve runs for the store, every command works through its API
// instead of opening the files, with the same output and exit status. The
// server is --server ADDR, else $SBXDB_SERVER (ADDR is unix:PATH or
// tcp:HOST:PORT; a TCP server is sent the bearer token in $SBXDB_TOKEN),
// else the one answering on DIR/sbxdb.sock (a socket file nobody answers on
// is ignored). A named server must serve the store --db or $SBXDB_DIR
// names, when one is named. A server on a unix socket is used only when it
// runs as the invoking user or root (its peer credentials, checked on
// every connection before anything is written), and DIR/sbxdb.sock only
// when it and DIR are owned by one of them and writable by no one else;
// any other is refused, exit status 1. capture and restore ask the server to read or
// write the directory itself, so file bytes do not cross the socket; capture
// holds and renews the writer lease through the API. compact and migrate
// need the store to themselves and refuse while a server runs.
//
// capture and restore draw a progress line on standard error when it is a
// terminal, and print one summary line on standard output.
//
// Exit status: 0 on success; 1 on failure, with one line "sbxdb: message" on
// standard error; 2 on a usage error; 3 when it finished with warnings; 10
// when there is no store at the path; 11 when the store or the thread's
// writer lease is held; 12 when it found damaged data; 130 when
// interrupted (exitHelp, exitStatus). With --json, a failure is one line
// {"error":{"code","message"}} on standard output and nothing else.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/sbxdb/sbxdb"
)

// The store directory every command uses when --db is not given.
const (
	// dirEnv names the environment variable that sets the default store.
	dirEnv = "SBXDB_DIR"
	// metadataEnv names the environment variable that sets the default
	// metadata database (--metadata).
	metadataEnv = "SBXDB_METADATA"
	// blobsEnv names the environment variable that sets the default
	// bucket of the blob bytes (--blobs).
	blobsEnv = "SBXDB_BLOBS"
	// fallbackDir is the default store, relative to the current directory,
	// when $SBXDB_DIR is unset or empty.
	fallbackDir = ".sbxdb"
)

// defaultDir returns the store directory to use without --db: $SBXDB_DIR if
// set and not empty, else .sbxdb.
func defaultDir() string {
	if d := os.Getenv(dirEnv); d != "" {
		return d
	}
	return fallbackDir
}

// viaServer is the help sentence of a command that works the same through
// a running server.
const viaServer = `While sbxdb serve runs for the store, the command works through it, with
the same output (sbxdb help says how the server is found).`

// lockTimeout bounds how long opening the store waits for a writer that
// holds it. Tests shorten it.
var lockTimeout = time.Second

// invocation is one run of a command: its common flags, the command's own
// flags, and its output.
type invocation struct {
	ctx      context.Context
	dir      string // --db
	dirGiven bool   // --db or $SBXDB_DIR named the store
	server   string // --server
	metadata string // --metadata, else $SBXDB_METADATA: a PostgreSQL URL, or empty for sbx.db
	blobs    string // --blobs, else $SBXDB_BLOBS: an s3:// URL, or empty for the blob directory
	served   string // the address of the server the command went through
	json     bool   // --json: print JSON, and a failure as JSON
	out      io.Writer
	errOut   io.Writer // standard error, for the progress line
	progress bool      // draw a progress line on errOut (it is a terminal)
	writes   bool      // open the store for writing (command.writes)
	creates  bool      // create the store if there is none (command.creates)

	// The flags of capture and restore.
	thread            string     // --thread
	id                string     // --id
	label             string     // --label
	excludes          stringList // --exclude
	includes          stringList // --include
	secretEnvs        stringList // --secret-env
	allowEscaping     bool       // --allow-escaping-symlinks
	rehash            bool       // --rehash
	overwrite         bool       // restore --overwrite
	deleteExtra       bool       // restore --delete
	keepGoing         bool       // restore --keep-going
	noDefaultExcludes bool       // --no-default-excludes
	skipUnsupported   bool       // --skip-unsupported
	allowEmpty        bool       // --allow-empty
	paths             stringList // --path (restore)
	outFile           string     // -o, --output (export)
	format            string     // --format (export)

	// The flags of check, gc and compact.
	verifyBlobs     bool           // --verify-blobs
	repair          bool           // --repair
	keep            *int           // --keep; nil when not given
	olderThan       *time.Duration // --older-than; nil when not given
	threads         stringList     // --thread (gc)
	dryRun          bool           // --dry-run
	repackThreshold float64        // --repack-threshold
	noRecompress    bool           // --no-recompress
	verbose         bool           // -v, --verbose

	// The flags of delete-thread.
	yes   bool // --yes
	force bool // --force

	version bool // --version, of sbxdb itself
	// started is set once the command runs: an error before it is a
	// usage error.
	started bool

	// status is the progress line on errOut, once a command drew one
	// (invocation.statusLine).
	status *statusLine
}

func main() {
	// An interrupt cancels the command's context, so that capture releases
	// its writer lease and restore removes its staging directory. Once it
	// has, the default handling is back: a second interrupt kills the
	// process as usual.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	code := runContext(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args (without the program name) and returns
// the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is run under ctx, which an interrupt cancels.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	inv := &invocation{ctx: ctx, out: stdout, errOut: stderr, progress: isTerminal(stderr)}
	t := newTree(inv, args)
	cmd, err := t.root.ExecuteC()
	var ue *usageError
	if err != nil && !inv.started && !errors.As(err, &ue) {
		// cobra's own check of a command it made (completion bash)
		if cmd == t.root {
			cmd = nil
		}
		if m := extraArgRE.FindStringSubmatch(err.Error()); m != nil {
			err = reword(err, "unexpected argument %s", m[1])
		}
		err = &usageError{cmd: cmd, err: err}
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = errInterrupted
	}
	err = inv.serverError(err)
	inv.clearStatus()
	return t.report(err, inv.json || (errors.As(err, &ue) && jsonRequested(args)), stdout, stderr)
}

// extraArgRE matches cobra's error for an argument a command it made
// does not take.
var extraArgRE = regexp.MustCompile(`^unknown command ("[^"]*") for "[^"]*"$`)

// openError words a failure to open the store. A store path that is not
// a directory is said to be so, whatever the failure.
func openError(inv *invocation, err error) error {
	if nd := notADirectory(inv); nd != nil {
		return nd
	}
	switch {
	case isSharedDir(err):
		return sharedDirError(err)
	case errors.Is(err, sbxdb.ErrNoStore):
		return reword(err, "no sbxdb store at %s", inv.dir)
	case errors.Is(err, sbxdb.ErrLocked):
		// The engine says "…: DIR is held by another process (pid N)".
		detail := strings.TrimPrefix(err.Error(), sbxdb.ErrLocked.Error()+": "+inv.dir+" is ")
		return reword(err, "store %s is busy: %s", inv.dir, detail)
	}
	return err
}

// message renders err as one line. Engine errors carry "sbxdb: " prefixes
// of their own, sometimes nested; the report prints the prefix once, so
// each is removed where a prefix stands, at the start or after a ": " that
// wraps it, and nowhere else (a URL's path may end in "/sbxdb: "). Paths
// longer than maxPathRunes are shortened in the middle (shortenPaths).
func message(err error) string {
	s := strings.NewReplacer("\r", " ", "\n", " ").Replace(err.Error())
	return shortenPaths(nestedPrefix.ReplaceAllString(s, "$1"))
}

// nestedPrefix matches the "sbxdb: " prefixes message removes.
var nestedPrefix = regexp.MustCompile(`(^|: )(?:sbxdb: )+`)

// stringList is a repeatable string flag: each use appends a value.
type stringList []string

func (l *stringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ", ")
}

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// Type names the flag's kind for pflag.
func (l *stringList) Type() string { return "strings" }

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// table returns a writer that aligns tab-separated columns; Flush it.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// timeText renders epoch milliseconds as an RFC 3339 time in UTC.
func timeText(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// cell renders a stored string for a table: "-" when empty, quoted when it
// holds a tab, newline or other unprintable character that would break the
// line or its columns.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// count renders n things, as in "1 message" or "3 messages".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// nullable returns nil for "", for JSON null.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
