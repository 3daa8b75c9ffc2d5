// Command sbxdb inspects an sbxdb checkpoint store.
//
// Usage:
//
//	sbxdb <command> [--db DIR] [--json] [arguments]
//
// The commands are:
//
//	threads          list threads: head, checkpoint count, latest time, writer lease
//	log THREAD       list a thread's chain from the head back through parents
//	show CHECKPOINT  show one checkpoint: header, files, artifacts, conversation size
//	refs             list blob keys with their reference counts
//	help [COMMAND]   print the command list, or one command's help
//
// Every command opens the store read-only. --db names the store directory
// (default $SBXDB_DIR, else .sbxdb in the current directory); --json prints
// JSON instead of a table. Flags may also follow the arguments.
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
	"strconv"
	"strings"
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

// lockTimeout bounds how long opening the store waits for a writer that
// holds it. Tests shorten it.
var lockTimeout = time.Second

// command is one entry of the command table.
type command struct {
	name    string
	args    string // positional arguments, as shown in usage
	nargs   int    // exact number of positional arguments
	summary string // one line for the command list
	detail  string // the rest of the command's help
	run     func(inv *invocation, args []string) error
}

// commands is the command table, in the order `sbxdb help` lists it.
var commands = []*command{threadsCmd, logCmd, showCmd, refsCmd}

// invocation is one run of a command: its common flags and its output.
type invocation struct {
	ctx  context.Context
	dir  string // --db
	json bool   // --json
	out  io.Writer
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes the command line args (without the program name) and returns
// the exit status.
func run(args []string, stdout, stderr io.Writer) int {
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
	inv := &invocation{ctx: context.Background(), out: stdout}
	fset := c.flagSet(inv)
	pos, err := parseArgs(fset, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.printHelp(stdout, fset)
		return 0
	case err != nil:
	case len(pos) < c.nargs:
		err = fmt.Errorf("missing %s", c.args)
	case len(pos) > c.nargs:
		err = fmt.Errorf("unexpected argument %q", pos[c.nargs])
	}
	if err != nil {
		fmt.Fprintf(stderr, "sbxdb %s: %v\nusage: %s\n", c.name, err, c.usage())
		return 2
	}
	if inv.dir == "" {
		inv.dir = defaultDir()
	}
	if err := c.run(inv, pos); err != nil {
		fmt.Fprintf(stderr, "sbxdb: %s\n", message(err))
		return 1
	}
	return 0
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
	fmt.Fprint(w, "sbxdb inspects an sbxdb checkpoint store.\n\nusage: sbxdb <command> [--db DIR] [--json] [arguments]\n\ncommands:\n")
	tw := table(w)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	fmt.Fprintf(tw, "  help [COMMAND]\tPrint this list, or one command's help\n")
	tw.Flush()
	fmt.Fprintf(w, "\nThe store is --db DIR, else $%s, else %s in the current directory.\n", dirEnv, fallbackDir)
}

// flagSet returns the command's flags, bound to inv. It prints nothing:
// run reports parse errors itself.
func (c *command) flagSet(inv *invocation) *flag.FlagSet {
	fset := flag.NewFlagSet("sbxdb "+c.name, flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	fset.StringVar(&inv.dir, "db", "", "the store directory `DIR` (default $"+dirEnv+", else "+fallbackDir+")")
	fset.BoolVar(&inv.json, "json", false, "print JSON instead of a table")
	return fset
}

func (c *command) usage() string {
	return strings.TrimSpace("sbxdb " + c.name + " [--db DIR] [--json] " + c.args)
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

// openStore opens the store read-only and words the failures an operator
// meets: no store, or a writer holding it.
func (inv *invocation) openStore() (*engine.DB, error) {
	db, err := engine.Open(inv.dir, &engine.Options{ReadOnly: true, LockTimeout: lockTimeout})
	if err == nil {
		return db, nil
	}
	switch {
	case errors.Is(err, engine.ErrNoStore):
		return nil, fmt.Errorf("no sbxdb store at %s", inv.dir)
	case errors.Is(err, engine.ErrLocked):
		// The engine says "…: DIR is held by another process (pid N)".
		detail := strings.TrimPrefix(err.Error(), engine.ErrLocked.Error()+": "+inv.dir+" is ")
		return nil, fmt.Errorf("store %s is busy: %s", inv.dir, detail)
	}
	return nil, err
}

// message renders err as one line. Engine errors carry "sbxdb: " prefixes
// of their own, sometimes nested; the report prints the prefix once.
func message(err error) string {
	return strings.NewReplacer("sbxdb: ", "", "\r", " ", "\n", " ").Replace(err.Error())
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
