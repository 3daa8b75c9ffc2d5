package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// command is one command of sbxdb: its help, its flags and arguments, how
// it opens the store, and what it runs. A command is one file declaring
// its command with register; newTree makes a cobra command of each.
type command struct {
	name    string
	aliases []string // other names that run it, as cobra's Aliases
	group   string   // the heading sbxdb help lists it under: groupInspect, …
	args    string   // positional arguments, as shown in usage
	nargs   int      // exact number of positional arguments, unless check is set
	summary string   // one line for the command list
	detail  string   // the rest of the command's help
	run     func(inv *invocation, args []string) error

	// writes makes the command open the store for writing; the others
	// open it read-only. creates lets it create a store where there is
	// none (capture); other writers refuse a directory without one.
	writes  bool
	creates bool
	// exclusive marks a command that needs the store's files to itself
	// (compact, migrate): it refuses to run while a server holds them.
	exclusive bool
	// serves marks the command that is the server (serve): --server and
	// --json are usage errors there.
	serves bool
	// noJSON marks a command whose output is not a report (cat, serve):
	// --json changes only how a failure is printed (serve refuses it),
	// and its usage line leaves --json out.
	noJSON bool
	// noStore marks a command that opens no store (version): its usage
	// line leaves --db out.
	noStore bool
	// flagsUsage shows the command's own flags in the usage line, between
	// the common flags and the arguments.
	flagsUsage string
	// usageArgs, when set, replaces args in the usage line (args stays in
	// the command list).
	usageArgs string
	// flags binds the command's own flags to inv.
	flags func(fset *pflag.FlagSet, inv *invocation)
	// check, when set, replaces the nargs check: it returns a usage error
	// for positional arguments or flags that do not go together.
	check func(inv *invocation, args []string) error
}

// The groups sbxdb help lists the commands in, in this order.
const (
	groupInspect   = "inspect"
	groupWorkspace = "workspace"
	groupMaintain  = "maintain"
	groupOther     = "other"
)

var groups = []cobra.Group{
	{ID: groupInspect, Title: "inspect the store:"},
	{ID: groupWorkspace, Title: "capture and restore workspaces:"},
	{ID: groupMaintain, Title: "maintain the store:"},
	{ID: groupOther, Title: "serve, complete, version, help:"},
}

// commands holds every registered command; sbxdb help lists them by
// group, each group by name.
var commands []*command

// register adds c to sbxdb's commands and returns it.
func register(c *command) *command {
	commands = append(commands, c)
	return c
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usage is the command's usage line.
func (c *command) usage() string {
	var common []string
	if !c.noStore {
		common = append(common, "[--db DIR]")
	}
	if !c.noJSON {
		common = append(common, "[--json]")
	}
	args := c.args
	if c.usageArgs != "" {
		args = c.usageArgs
	}
	return strings.Join(strings.Fields("sbxdb "+c.name+" "+strings.Join(common, " ")+" "+c.flagsUsage+" "+args), " ")
}

// checkArgs is the usage check of c's positional arguments and flags.
func (c *command) checkArgs(inv *invocation, args []string) error {
	switch {
	case c.serves && inv.server != "":
		return errors.New("--server names a server to work through; serve is the server")
	case c.serves && inv.json:
		return errors.New("--json does not apply to serve: --log-format json logs as JSON")
	}
	if c.check != nil {
		return c.check(inv, args)
	}
	return checkCount(args, c.nargs, c.args)
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

// tree is the command tree of one run, every flag bound to its
// invocation.
type cmdTree struct {
	root *cobra.Command
	inv  *invocation
	spec map[*cobra.Command]*command // the command each cobra command runs
	// helpCmd is sbxdb help, which cobra leaves out of the command list.
	helpCmd *cobra.Command
}

// rootUsage is the usage line of sbxdb itself.
const rootUsage = "sbxdb [--db DIR] [--server ADDR] [--json] <command> [flags] [arguments]"

// newTree builds the command tree for a run of args, its flags bound to
// inv, its output going to inv.out and inv.errOut.
func newTree(inv *invocation, args []string) *cmdTree {
	t := &cmdTree{inv: inv, spec: map[*cobra.Command]*command{}}
	root := &cobra.Command{
		Use:                        "sbxdb",
		Short:                      "Inspect an sbxdb checkpoint store, capture workspaces into it and restore them",
		SilenceErrors:              true,
		SilenceUsage:               true,
		DisableFlagsInUseLine:      true,
		SuggestionsMinimumDistance: 2,
		// With no command, sbxdb prints the command list on standard
		// error and exits 2; a word that is no command is a usage error
		// suggesting the nearest commands.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			err := fmt.Errorf("unknown command %q", args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				err = fmt.Errorf("%w; did you mean %s?", err, strings.Join(s, " or "))
			}
			return &usageError{err: err}
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if inv.version {
				inv.started = true
				return runVersion(inv, nil)
			}
			return &usageError{err: errors.New("missing command"), help: true}
		},
	}
	t.root = root
	root.SetArgs(append([]string{}, args...)) // never nil: nil is os.Args
	root.SetOut(inv.out)
	root.SetErr(inv.errOut)
	for _, g := range groups {
		root.AddGroup(&g)
	}
	root.SetCompletionCommandGroupID(groupOther)
	root.SetFlagErrorFunc(t.flagError)
	root.SetHelpFunc(t.help)

	pf := root.PersistentFlags()
	pf.StringVar(&inv.dir, "db", "", "the store directory `DIR` (default $"+dirEnv+", else "+fallbackDir+")")
	pf.StringVar(&inv.server, "server", "", "work through the sbxdb serve at `ADDR`, unix:PATH or tcp:HOST:PORT (default $"+serverEnv+", else DIR/"+socketName+" when it answers)")
	pf.StringVar(&inv.metadata, "metadata", "", "keep the store's metadata in the PostgreSQL database at `URL`, postgres://USER@HOST:PORT/DB, shared with other servers (default $"+metadataEnv+", else sbx.db in DIR)")
	pf.StringVar(&inv.blobs, "blobs", "", "keep the store's blob bytes in the S3 bucket at `URL`, s3://BUCKET/PREFIX, shared with other servers; needs --metadata; endpoint and keys from $AWS_* (default $"+blobsEnv+", else DIR)")
	pf.BoolVar(&inv.json, "json", false, `print JSON: the report, or a failure as {"error":{"code","message"}}`)
	root.Flags().BoolVar(&inv.version, "version", false, "print the version, as sbxdb version does")
	root.RegisterFlagCompletionFunc("db", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveFilterDirs
	})

	for _, c := range commands {
		root.AddCommand(t.cobraCommand(c))
	}
	t.helpCmd = t.helpCommand()
	root.SetHelpCommand(t.helpCmd)
	root.InitDefaultCompletionCmd()
	for _, cmd := range root.Commands() {
		if cmd.Name() == "completion" {
			cmd.Use = "completion SHELL"
			cmd.Short = "Print the shell completion script for bash, zsh, fish or powershell"
			cmd.Long = `Prints the script that makes SHELL complete sbxdb's commands, flags and
arguments; sbxdb completion SHELL --help says how to load it.`
			cmd.DisableFlagsInUseLine = true
			cmd.Args = cobra.ArbitraryArgs
			cmd.RunE = func(cmd *cobra.Command, args []string) error {
				err := errors.New("missing SHELL")
				if len(args) > 0 {
					err = fmt.Errorf("unknown shell %q: want bash, zsh, fish or powershell", args[0])
				}
				return &usageError{cmd: cmd, err: err}
			}
		}
	}
	return t
}

// cobraCommand makes c a cobra command of the tree.
func (t *cmdTree) cobraCommand(c *command) *cobra.Command {
	inv := t.inv
	cmd := &cobra.Command{
		Use:                   strings.TrimSpace(c.name + " " + c.args),
		Aliases:               c.aliases,
		Short:                 c.summary,
		Long:                  c.detail,
		GroupID:               c.group,
		DisableFlagsInUseLine: true,
		Args: func(cmd *cobra.Command, args []string) error {
			inv.writes, inv.creates = c.writes, c.creates
			if err := c.checkArgs(inv, args); err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			inv.started = true
			err := inv.runCommand(c, args)
			// A usage error found once the command ran (delete-thread
			// without --yes) is about this command.
			var ue *usageError
			if errors.As(err, &ue) && ue.cmd == nil {
				ue.cmd = cmd
			}
			return err
		},
	}
	if c.flags != nil {
		c.flags(cmd.Flags(), inv)
	}
	t.spec[cmd] = c
	return cmd
}

// runCommand runs c, once its flags and arguments were found good.
//
// With --json, a failure is one JSON line on standard output and nothing
// else: what the command would have said on standard error before it
// failed (a lease taken over, a quarantine found at open) is held back
// and printed only when it succeeds, and there is no progress line.
func (inv *invocation) runCommand(c *command, args []string) (err error) {
	inv.dirGiven = inv.dir != "" || os.Getenv(dirEnv) != ""
	if inv.dir == "" {
		inv.dir = defaultDir()
	}
	if inv.metadata == "" {
		inv.metadata = os.Getenv(metadataEnv)
	}
	if inv.blobs == "" {
		inv.blobs = os.Getenv(blobsEnv)
	}
	if inv.json {
		var notes strings.Builder
		stderr := inv.errOut
		inv.errOut, inv.progress = &notes, false
		defer func() {
			if err == nil || errors.Is(err, errWarnings) {
				io.WriteString(stderr, notes.String())
			}
			inv.errOut = stderr
		}()
	}
	if c.exclusive {
		if err := inv.refuseServer(); err != nil {
			return err
		}
	}
	return c.run(inv, args)
}

// helpCommand is sbxdb help [COMMAND]: a command that is none is a usage
// error, not a help topic.
func (t *cmdTree) helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "help [COMMAND]",
		Short:   "Print the command list, or one command's help",
		GroupID: groupOther,
		Long: `With no COMMAND, prints the command list, the global flags, how the store
and the server are found, and the exit statuses. sbxdb COMMAND --help
prints the same as sbxdb help COMMAND.`,
		DisableFlagsInUseLine: true,
		ValidArgsFunction: func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			target, rest, err := t.root.Find(args)
			if err != nil || len(rest) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []string
			for _, c := range target.Commands() {
				if c.IsAvailableCommand() && strings.HasPrefix(c.Name(), prefix) {
					names = append(names, c.Name()+"\t"+c.Short)
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := t.root.Find(args)
			if err != nil || len(rest) > 0 || (target == t.root && len(args) > 0) {
				return &usageError{cmd: cmd, err: fmt.Errorf("unknown command %q", strings.Join(args, " "))}
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	}
}

// usageError is a command line that does not parse: a bad flag, a missing
// or extra argument, an unknown command. The exit status is 2.
type usageError struct {
	cmd  *cobra.Command // the command it is about; nil for sbxdb itself
	err  error
	help bool // print the command list instead of the usage line
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// name is "sbxdb" or "sbxdb COMMAND", as the error line starts.
func (e *usageError) name() string {
	if e.cmd == nil || !e.cmd.HasParent() {
		return "sbxdb"
	}
	return e.cmd.CommandPath()
}

// usageLine is the usage the error line is followed by.
func (t *cmdTree) usageLine(e *usageError) string {
	switch {
	case e.cmd == nil || !e.cmd.HasParent():
		return "sbxdb <command> [flags] [arguments]; run 'sbxdb help' for the list"
	case t.spec[e.cmd] != nil:
		return t.spec[e.cmd].usage()
	}
	return e.cmd.UseLine()
}

// flagError makes a flag that does not parse a usage error: an unknown
// flag names the command's nearest flags, and a long flag given one dash
// is told to take two.
func (t *cmdTree) flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		if s := flagSuggestions(cmd, name); len(s) > 0 {
			err = fmt.Errorf("%w; did you mean %s?", err, strings.Join(s, " or "))
		}
	} else if strings.HasPrefix(msg, "unknown shorthand flag: ") {
		if _, arg, ok := strings.Cut(msg, " in -"); ok {
			name, _, _ := strings.Cut(arg, "=")
			if cmd.Flags().Lookup(name) != nil {
				err = fmt.Errorf("unknown flag -%s: long flags take two dashes, --%s", arg, name)
			}
		}
	}
	if cmd == t.root {
		cmd = nil
	}
	return &usageError{cmd: cmd, err: err}
}

// flagSuggestions returns the names of cmd's flags within two edits of
// name, or that it is a prefix of, each with its two dashes.
func flagSuggestions(cmd *cobra.Command, name string) []string {
	var s []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && (editDistance(name, f.Name) <= 2 || strings.HasPrefix(f.Name, name)) {
			s = append(s, "--"+f.Name)
		}
	})
	return s
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// help prints cmd's help on its standard output: for sbxdb itself the
// command list (rootHelp), for a command its usage line, summary,
// detail and flags.
func (t *cmdTree) help(cmd *cobra.Command, _ []string) {
	w := cmd.OutOrStdout()
	if cmd == t.root {
		t.rootHelp(w)
		return
	}
	c := t.spec[cmd]
	usage, summary := cmd.UseLine(), cmd.Short
	if c != nil {
		usage = c.usage()
	}
	fmt.Fprintf(w, "usage: %s\n\n%s\n", usage, sentence(summary))
	if cmd.Long != "" && cmd.Long != summary {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(cmd.Long, "\n"))
	}
	if subs := available(cmd); len(subs) > 0 {
		fmt.Fprint(w, "\ncommands:\n")
		listCommands(w, subs, useWidth(subs))
	}
	if fs := cmd.LocalFlags(); fs.HasAvailableFlags() {
		fmt.Fprintf(w, "\nflags:\n%s", fs.FlagUsagesWrapped(flagColumns))
	}
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !(c != nil && c.serves && (f.Name == "server" || f.Name == "json")) {
			global.AddFlag(f)
		}
	})
	if global.HasAvailableFlags() {
		fmt.Fprintf(w, "\nglobal flags:\n%s", global.FlagUsagesWrapped(flagColumns))
	}
}

// flagColumns is the width flag usages are wrapped to.
const flagColumns = 80

// sentence ends s with a period.
func sentence(s string) string {
	if s == "" || strings.HasSuffix(s, ".") {
		return s
	}
	return s + "."
}

// available returns cmd's subcommands that help lists: not hidden, not
// help itself.
func available(cmd *cobra.Command) []*cobra.Command {
	var cs []*cobra.Command
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			cs = append(cs, c)
		}
	}
	return cs
}

// listCommands writes one line per command: its name and arguments, and
// its summary, the summaries starting at column width+4.
func listCommands(w io.Writer, cs []*cobra.Command, width int) {
	for _, c := range cs {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.Use, c.Short)
	}
}

// useWidth is the width of the longest name and arguments of cs.
func useWidth(cs []*cobra.Command) int {
	n := 0
	for _, c := range cs {
		n = max(n, len(c.Use))
	}
	return n
}

// rootHelp is sbxdb help: the command list by group, the global flags,
// how the store and a server are found, and the exit statuses.
func (t *cmdTree) rootHelp(w io.Writer) {
	fmt.Fprintf(w, "sbxdb inspects an sbxdb checkpoint store, captures workspaces into it,\nrestores them, checks the store and collects its garbage.\n\nusage: %s\n", rootUsage)
	all := append(available(t.root), t.helpCmd)
	width := useWidth(all)
	for _, g := range t.root.Groups() {
		cs := slices.DeleteFunc(slices.Clone(all), func(c *cobra.Command) bool { return c.GroupID != g.ID })
		if len(cs) > 0 {
			fmt.Fprintf(w, "\n%s\n", g.Title)
			listCommands(w, cs, width)
		}
	}
	fmt.Fprintf(w, "\nglobal flags, before or after the command:\n%s", t.root.LocalFlags().FlagUsagesWrapped(flagColumns))
	fmt.Fprintf(w, "\nThe store is --db DIR, else $%s, else %s in the current directory.\n", dirEnv, fallbackDir)
	fmt.Fprint(w, `
While sbxdb serve runs for the store, every command works through it, with
the same output and exit status. The server is --server ADDR, else
$SBXDB_SERVER (ADDR is unix:PATH or tcp:HOST:PORT; a TCP server is sent the
token in $SBXDB_TOKEN), else the one answering on DIR/sbxdb.sock. A server
on a unix socket must run as you or root, and DIR/sbxdb.sock must be a
socket in a directory, both owned by you or root and writable by no one
else; any other is refused (exit status 1) before anything is sent to it.
compact and migrate need the store to themselves and refuse while a server
runs.
`)
	fmt.Fprintf(w, "\n%s", exitHelp)
}
