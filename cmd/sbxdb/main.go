// Command sbxdb inspects an sbxdb checkpoint store, captures workspaces into
// it, restores them, checks the store and collects its garbage.
//
// Usage:
//
//	sbxdb <command> [--db DIR] [--server ADDR] [--json] [arguments]
//
// The commands are:
//
//	threads               list threads: head, checkpoint count, latest time, writer lease
//	log THREAD            list a thread's chain from the head back through parents
//	show CHECKPOINT       show one checkpoint: header, files, artifacts, conversation size
//	refs                  list blob keys with their reference counts
//	stats                 metadata and blob bytes, logical and on disk, and the sharing ratio
//	capture DIR           record the workspace DIR as a new checkpoint on --thread's head
//	restore CHECKPOINT DIR
//	                      write a checkpoint's tree (or --thread's head) into DIR
//	diff A B              compare the file manifests of checkpoints A and B
//	cat CHECKPOINT PATH   write one file's verified bytes to standard output
//	check                 check reference counts, heads, chains and blobs (--repair, --verify-blobs)
//	gc                    retention (--keep N), the sweep of unused blobs (--older-than), repacking
//	compact               rewrite the database file without its free pages
//	migrate               upgrade a store of an older format (1 or 2) to this build's
//	unlock THREAD         remove a thread's writer lease, whoever holds it
//	help [COMMAND]        print the command list, or one command's help
//
// capture, gc, compact, migrate, unlock and check --repair open the store for
// writing (capture creates it if needed; capture holds the thread's writer
// lease while it runs, taking over the lease of a writer on this host that
// no longer runs); the other commands open it read-only. --db names the
// store directory (default $SBXDB_DIR, else .sbxdb in the current
// directory); --json prints JSON instead of a table (cat has no --json).
// Flags may also follow the arguments. A store that another
// process holds is reported as busy, naming that process, after about a
// second.
//
// While sbxdb serve runs for the store, every command works through its API
// instead of opening the files, with the same output and exit status. The
// server is --server ADDR, else $SBXDB_SERVER (ADDR is unix:PATH or
// tcp:HOST:PORT; a TCP server is sent the bearer token in $SBXDB_TOKEN),
// else the one answering on DIR/sbxdb.sock (a socket file nobody answers on
// is ignored). A named server must serve the store --db or $SBXDB_DIR
// names, when one is named. capture and restore ask the server to read or
// write the directory itself, so file bytes do not cross the socket; capture
// holds and renews the writer lease through the API. compact and migrate
// need the store to themselves and refuse while a server runs.
//
// capture and restore draw a progress line on standard error when it is a
// terminal, and print one summary line on standard output.
//
// Exit status: 0 on success; 1 on failure, with one line "sbxdb: message" on
// standard error; 2 on a usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/sbxdb/sbxdb/engine"
)

// The store directory every command uses when --db is not given.
const (
	// dirEnv names the environment variable that sets the default store.
	dirEnv = "SBXDB_DIR"
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

// command is one entry of the command table.
type command struct {
	name    string
	args    string // positional arguments, as shown in usage
	nargs   int    // exact number of positional arguments, unless check is set
	summary string // one line for the command list
	detail  string // the rest of the command's help
	run     func(inv *invocation, args []string) error

	// writes makes the command open the store for writing; the others
	// open it read-only. creates lets it create a store where there is
	// none (capture); other writers refuse a directory without one.
	writes  bool
	creates bool
	// exclusive marks a command that needs the store's files to itself
	// (compact, migrate): it refuses to run while a server holds them.
	exclusive bool
	// serves marks the command that is the server (serve): it has no
	// --server flag.
	serves bool
	// noJSON leaves out the --json flag, for a command whose output is not
	// a report (cat).
	noJSON bool
	// flagsUsage shows the command's own flags in the usage line, between
	// the common flags and the arguments.
	flagsUsage string
	// usageArgs, when set, replaces args in the usage line (args stays in
	// the command list).
	usageArgs string
	// flags binds the command's own flags to inv.
	flags func(fset *flag.FlagSet, inv *invocation)
	// check, when set, replaces the nargs check: it returns a usage error
	// for positional arguments or flags that do not go together.
	check func(inv *invocation, args []string) error
}

// commands is the command table, in the order `sbxdb help` lists it.
var commands = []*command{threadsCmd, logCmd, showCmd, refsCmd, statsCmd, captureCmd, restoreCmd, diffCmd, catCmd, checkCmd, gcCmd, compactCmd, migrateCmd, unlockCmd, serveCmd}

// invocation is one run of a command: its common flags, the command's own
// flags, and its output.
type invocation struct {
	ctx      context.Context
	dir      string // --db
	dirGiven bool   // --db or $SBXDB_DIR named the store
	server   string // --server
	served   string // the address of the server the command went through
	json     bool   // --json
	out      io.Writer
	errOut   io.Writer // standard error, for the progress line
	progress bool      // draw a progress line on errOut (it is a terminal)
	writes   bool      // open the store for writing (command.writes)
	creates  bool      // create the store if there is none (command.creates)

	// The flags of capture and restore.
	thread        string     // --thread
	id            string     // --id
	label         string     // --label
	excludes      stringList // --exclude
	includes      stringList // --include
	secretEnvs    stringList // --secret-env
	allowEscaping bool       // --allow-escaping-symlinks
	rehash        bool       // --rehash

	// The flags of check, gc and compact.
	verifyBlobs     bool           // --verify-blobs
	repair          bool           // --repair
	keep            *int           // --keep; nil when not given
	olderThan       *time.Duration // --older-than; nil when not given
	threads         stringList     // --thread (gc)
	dryRun          bool           // --dry-run
	repackThreshold float64        // --repack-threshold
	verbose         bool           // -v

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
	if len(args) == 0 {
		printCommands(stderr)
		return 2
	}
	name, args := args[0], args[1:]
	if name == "help" || name == "-h" || name == "-help" || name == "--help" {
		if len(args) == 0 {
			printCommands(stdout)
			return 0
		}
		if c := lookup(args[0]); c != nil && len(args) == 1 {
			c.printHelp(stdout, c.flagSet(&invocation{}))
			return 0
		}
		fmt.Fprintf(stderr, "sbxdb: help: unknown command %q\nusage: sbxdb help [COMMAND]\n", strings.Join(args, " "))
		return 2
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "sbxdb: unknown command %q\nusage: sbxdb <command> [flags] [arguments]; run 'sbxdb help' for the list\n", name)
		return 2
	}
	inv := &invocation{ctx: ctx, out: stdout, errOut: stderr, progress: isTerminal(stderr), writes: c.writes, creates: c.creates}
	fset := c.flagSet(inv)
	pos, err := parseArgs(fset, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.printHelp(stdout, fset)
		return 0
	case err != nil:
	case c.check != nil:
		err = c.check(inv, pos)
	default:
		err = checkCount(pos, c.nargs, c.args)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sbxdb %s: %v\nusage: %s\n", c.name, err, c.usage())
		return 2
	}
	inv.dirGiven = inv.dir != "" || os.Getenv(dirEnv) != ""
	if inv.dir == "" {
		inv.dir = defaultDir()
	}
	if c.exclusive {
		err = inv.refuseServer()
	}
	if err == nil {
		err = c.run(inv, pos)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			err = errors.New("interrupted")
		}
		err = inv.serverError(err)
		inv.clearStatus()
		fmt.Fprintf(stderr, "sbxdb: %s\n", message(err))
		return 1
	}
	return 0
}

// checkCount is the usage check of a command that takes exactly n
// positional arguments, named by what.
func checkCount(pos []string, n int, what string) error {
	switch {
	case len(pos) < n:
		return fmt.Errorf("missing %s", strings.Join(strings.Fields(what)[len(pos):], " "))
	case len(pos) > n:
		return fmt.Errorf("unexpected argument %q", pos[n])
	}
	return nil
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// printCommands writes the command list.
func printCommands(w io.Writer) {
	fmt.Fprint(w, "sbxdb inspects an sbxdb checkpoint store, captures workspaces into it,\nrestores them, checks the store and collects its garbage.\n\nusage: sbxdb <command> [--db DIR] [--server ADDR] [--json] [arguments]\n\ncommands:\n")
	tw := table(w)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	fmt.Fprintf(tw, "  help [COMMAND]\tPrint this list, or one command's help\n")
	tw.Flush()
	fmt.Fprintf(w, "\nThe store is --db DIR, else $%s, else %s in the current directory.\n", dirEnv, fallbackDir)
	fmt.Fprint(w, `
While sbxdb serve runs for the store, every command works through it, with
the same output and exit status. The server is --server ADDR, else
$SBXDB_SERVER (ADDR is unix:PATH or tcp:HOST:PORT; a TCP server is sent the
token in $SBXDB_TOKEN), else the one answering on DIR/sbxdb.sock. compact
and migrate need the store to themselves and refuse while a server runs.
`)
}

// flagSet returns the command's flags, bound to inv. It prints nothing:
// run reports parse errors itself.
func (c *command) flagSet(inv *invocation) *flag.FlagSet {
	fset := flag.NewFlagSet("sbxdb "+c.name, flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	fset.StringVar(&inv.dir, "db", "", "the store directory `DIR` (default $"+dirEnv+", else "+fallbackDir+")")
	if !c.serves {
		fset.StringVar(&inv.server, "server", "", "work through the sbxdb serve at `ADDR`, unix:PATH or tcp:HOST:PORT (default $"+serverEnv+", else DIR/"+socketName+" when it answers)")
	}
	if !c.noJSON {
		fset.BoolVar(&inv.json, "json", false, "print JSON instead of a table")
	}
	if c.flags != nil {
		c.flags(fset, inv)
	}
	return fset
}

func (c *command) usage() string {
	common := "[--db DIR] [--json]"
	if c.noJSON {
		common = "[--db DIR]"
	}
	args := c.args
	if c.usageArgs != "" {
		args = c.usageArgs
	}
	return strings.Join(strings.Fields("sbxdb "+c.name+" "+common+" "+c.flagsUsage+" "+args), " ")
}

func (c *command) printHelp(w io.Writer, fset *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n%s.\n", c.usage(), c.summary)
	if c.detail != "" {
		fmt.Fprintf(w, "\n%s\n", c.detail)
	}
	fmt.Fprint(w, "\nflags:\n")
	fset.SetOutput(w)
	fset.PrintDefaults()
}

// parseArgs parses flags wherever they stand among the positional
// arguments, which it returns in order. Everything after "--" is positional.
func parseArgs(fset *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fset.Parse(args); err != nil {
			return nil, err
		}
		rest := fset.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := args[:len(args)-len(rest)]; len(used) > 0 && used[len(used)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// openError words a failure to open the store. A store path that is not
// a directory is said to be so, whatever the failure.
func openError(inv *invocation, err error) error {
	if nd := notADirectory(inv); nd != nil {
		return nd
	}
	switch {
	case errors.Is(err, engine.ErrNoStore):
		return fmt.Errorf("no sbxdb store at %s", inv.dir)
	case errors.Is(err, engine.ErrLocked):
		// The engine says "…: DIR is held by another process (pid N)".
		detail := strings.TrimPrefix(err.Error(), engine.ErrLocked.Error()+": "+inv.dir+" is ")
		return fmt.Errorf("store %s is busy: %s", inv.dir, detail)
	}
	return err
}

// message renders err as one line. Engine errors carry "sbxdb: " prefixes
// of their own, sometimes nested; the report prints the prefix once. Paths
// longer than maxPathRunes are shortened in the middle (shortenPaths).
func message(err error) string {
	return shortenPaths(strings.NewReplacer("sbxdb: ", "", "\r", " ", "\n", " ").Replace(err.Error()))
}

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
