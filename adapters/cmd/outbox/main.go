package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// Exit codes.
const (
	exitOK    = 0 // the command did what it was asked
	exitError = 1 // it failed: database unreachable, an id not parked, ...
	exitUsage = 2 // bad command line
	exitAlert = 3 // status: a --fail-if condition holds
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// env is what a command runs with: its output, the process environment and
// the broker opener.
type env struct {
	ctx            context.Context
	stdout, stderr io.Writer
	getenv         func(string) string
	// openPublisher opens the relay's broker (tests replace it).
	openPublisher func(ctx context.Context, url string, log *slog.Logger) (message.Publisher, func() error, error)
	// openLag opens the broker whose consumer lag `outbox lag` reads.
	openLag func(ctx context.Context, url string, log *slog.Logger) (*broker.Broker, error)
	// flags are the running command's, once it made them.
	flags *flagSet
}

// command is one subcommand.
type command struct {
	name, args, summary, help string
	run                       func(e *env, args []string) error
}

// commands returns the subcommands by name.
func commands() map[string]*command {
	cs := []*command{statusCommand(), listCommand(), parkedCommand(), deadLettersCommand(), lagCommand(), purgeCommand(), replayCommand(), relayCommand(), janitorCommand(), migrateCommand(), cdcCommand(), dashboardCommand(), devCommand()}
	m := make(map[string]*command, len(cs))
	for _, c := range cs {
		m[c.name] = c
	}
	return m
}

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// flagError is a flag given a value it does not take: a usage error (exit
// status 2) whose message names the flag, the value and what the flag
// takes.
type flagError struct {
	Flag  string // as on the command line: "--limit"
	Value string // as given
	Want  string // what the flag takes
}

func (f *flagError) Error() string {
	v := f.Value
	if v == "" || strings.ContainsAny(v, " \t") {
		v = strconv.Quote(v)
	}
	return f.Flag + " " + v + ": " + f.Want
}

// alertError is a status check that failed: exit status 3.
type alertError struct{ msg string }

func (a alertError) Error() string { return a.msg }

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return (&env{ctx: ctx, stdout: stdout, stderr: stderr, getenv: getenv, openPublisher: openBroker, openLag: openLagBroker}).run(args)
}

// run runs the command line args in e and returns the exit status.
func (e *env) run(args []string) int {
	stdout, stderr := e.stdout, e.stderr
	cmds := commands()
	if len(args) == 0 {
		printUsage(stderr, cmds)
		return exitUsage
	}
	args, err := globalFlagsFirst(args)
	if err != nil {
		return code(stderr, err)
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			printUsage(stdout, cmds)
			return exitOK
		}
		c := cmds[rest[0]]
		if c == nil {
			fmt.Fprintf(stderr, "outbox: unknown command %q\n", rest[0])
			return exitUsage
		}
		h := *e
		h.stderr = stdout // asked for: the usage goes to stdout
		return code(stderr, c.run(&h, []string{"--help"}))
	}
	c := cmds[name]
	if c == nil {
		fmt.Fprintf(stderr, "outbox: unknown command %q (run \"outbox help\")\n", name)
		return exitUsage
	}
	err = c.run(e, rest)
	if code := code(stderr, err); code != exitError {
		return code
	}
	if hint := e.flags.missingTableHint(err); hint != "" {
		fmt.Fprintln(stderr, "outbox:", hint)
	}
	return exitError
}

// globalFlags are the flags every command takes (see newFlagSet), which
// may also come before the command's name; true for those that take a
// value.
var globalFlags = map[string]bool{"db": true, "table": true, "json": false}

// globalFlagsFirst moves the global flags given before the command's name
// (outbox --db URL list) after it (outbox list --db URL), where the
// command's flag set parses them. Another flag before the name is a usage
// error naming it.
func globalFlagsFirst(args []string) ([]string, error) {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "-" {
		a := args[i]
		switch a {
		case "-h", "-help", "--help":
			if i == 0 {
				return args, nil // outbox --help
			}
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue, ok := globalFlags[name]
		if !ok {
			return nil, usagef("flag %s before the command: only --db, --table and --json may come before it (run \"outbox help\")", a)
		}
		i++
		if takesValue && !hasValue {
			if i == len(args) {
				return nil, usagef("flag %s needs a value", a)
			}
			i++
		}
	}
	if i == 0 {
		return args, nil
	}
	if i == len(args) {
		return nil, usagef("no command after the flags (run \"outbox help\")")
	}
	out := make([]string, 0, len(args))
	out = append(out, args[i])
	out = append(out, args[:i]...)
	return append(out, args[i+1:]...), nil
}

// code prints err and returns its exit status.
func code(stderr io.Writer, err error) int {
	var (
		u usageError
		f *flagError
		a alertError
	)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &u), errors.As(err, &f), errors.Is(err, sqlstore.ErrInvalidQuery):
		fmt.Fprintln(stderr, "outbox:", err)
		return exitUsage
	case errors.As(err, &a):
		fmt.Fprintln(stderr, "outbox:", err)
		return exitAlert
	}
	fmt.Fprintln(stderr, "outbox:", err)
	return exitError
}

// missingTable returns the table of err when it is a database's "no such
// table" (as the database names it: maybe schema-qualified, maybe ""
// when the message did not say), and whether it is one.
func missingTable(err error) (table string, ok bool) {
	s := err.Error()
	between := func(start, end string) string {
		_, rest, found := strings.Cut(s, start)
		if !found {
			return ""
		}
		name, _, _ := strings.Cut(rest, end)
		return name
	}
	switch {
	case strings.Contains(s, "SQLSTATE 42P01"): // PostgreSQL: relation "t" does not exist
		return between(`relation "`, `"`), true
	case strings.Contains(s, "Error 1146"): // MySQL, MariaDB: Table 'db.t' doesn't exist
		return between("Table '", "'"), true
	case strings.Contains(s, "no such table"): // SQLite: no such table: t
		return between("no such table: ", " "), true
	}
	return "", false
}

// sameTable reports whether the table names a and b, either maybe
// qualified by a schema or database, name the same table.
func sameTable(a, b string) bool {
	unqualified := func(s string) string { return s[strings.LastIndexByte(s, '.')+1:] }
	return unqualified(a) == unqualified(b)
}

// missingTableHint returns the hint to print after err, a command's error,
// when err is a missing table: which command creates it and which flag
// names another. It returns "" for any other error, and when fs is nil.
func (fs *flagSet) missingTableHint(err error) string {
	table, ok := missingTable(err)
	if !ok || fs == nil {
		return ""
	}
	if f := fs.Lookup("inbox-table"); f != nil {
		inbox := cmp.Or(f.Value.String(), sqlstore.InboxDefaultTable)
		if table != "" && sameTable(table, inbox) {
			create := "outbox migrate --inbox"
			if f.Value.String() != "" {
				create += " --inbox-table " + inbox
			}
			return fmt.Sprintf("is table %s there? %q creates it; --inbox-table names another", inbox, create)
		}
	}
	outbox := cmp.Or(fs.table, sqlstore.DefaultTable)
	create := "outbox migrate"
	if fs.table != "" {
		create += " --table " + fs.table
	}
	if table != "" && !sameTable(table, outbox) {
		// Neither table the flags name: one of the outbox's own (its
		// <table>_leases or <table>_relays, say), which migrate creates
		// beside it.
		return fmt.Sprintf("is table %s there? %q creates the outbox's tables; --table names another outbox", table, create)
	}
	return fmt.Sprintf("is table %s there? %q creates it; --table names another", outbox, create)
}

func printUsage(w io.Writer, cmds map[string]*command) {
	fmt.Fprint(w, `outbox operates a gooutbox outbox table.

Usage:
  outbox <command> [flags] [arguments]

Commands:
`)
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, cmds[n].summary)
	}
	fmt.Fprint(w, `  help      outbox help <command> describes a command and its flags

Every command takes, after its name or before it (outbox --db URL list):
  --db URL      database: postgres://..., mysql://user:pass@host:3306/db, sqlite:file.db
                (default: $OUTBOX_DATABASE_URL)
  --table NAME  outbox table (default: outbox_messages)
  --json        print JSON instead of tables

Exit status: 0 ok, 1 error, 2 usage error, 3 a --fail-if-... condition holds (status, lag).
`)
}

// flagSet returns a flag set for command c with the flags every command
// takes, and parses args into it. Flags and positional arguments may be
// interleaved ("parked retry 12 --json 13").
type flagSet struct {
	*flag.FlagSet
	e         *env
	name      string // the command's
	db, table string
	json      bool
	// createDB lets openDatabase create a SQLite file that does not
	// exist (migrate); every other command refuses one.
	createDB bool
	// mysqlDeadlines, when set, is the readTimeout and writeTimeout
	// openDatabase gives a MySQL connection (see withMySQLDeadlines);
	// db stays as given, for messages.
	mysqlDeadlines time.Duration
	// valueErr is the *flagError of the last flag value an ageFlag
	// refused: the flag package keeps only its text.
	valueErr error
}

// newFlagSet returns the flag set of command c, which is also e's (for
// the hint after a missing table).
func newFlagSet(e *env, c *command) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("outbox "+c.name, flag.ContinueOnError), e: e, name: c.name}
	e.flags = fs
	// The flag package would print a bad flag's error, and the whole
	// usage, before the command prints the error again: it prints
	// nothing, and parse prints the usage when asked for it.
	fs.SetOutput(io.Discard)
	fs.StringVar(&fs.db, "db", "", "database `URL`: postgres://..., mysql://user:pass@host:3306/db or sqlite:file.db (default: $OUTBOX_DATABASE_URL)")
	fs.StringVar(&fs.table, "table", "", "outbox `table` (default: outbox_messages)")
	fs.BoolVar(&fs.json, "json", false, "print JSON")
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: outbox %s [flags] %s\n\n%s\n\nFlags:\n", c.name, c.args, strings.TrimSpace(c.help))
		fs.PrintDefaults()
	}
	return fs
}

// ageVar defines a flag of an age (an ageFlag) stored in p; unset means
// what def says, for the message of a value it refuses.
func (fs *flagSet) ageVar(p *time.Duration, name, def, usage string) *ageFlag {
	a := &ageFlag{d: p, name: name, def: def, fs: fs}
	fs.Var(a, name, usage)
	return a
}

// durationVar defines a flag of a duration more than zero (an ageFlag
// that names what it takes as a duration) stored in p; unset means what
// def says.
func (fs *flagSet) durationVar(p *time.Duration, name, def, usage string) *ageFlag {
	a := fs.ageVar(p, name, def, usage)
	a.example = "a duration such as 100ms, 1s, 30s or 5m"
	return a
}

// countVar defines a flag of a whole number from least to most (no upper
// bound when most is 0; a countFlag) stored in p, counting what; unset
// means what def says.
func (fs *flagSet) countVar(p *int, name string, least, most int, what, def, usage string) {
	fs.Var(&countFlag{n: p, name: name, min: least, max: most, what: what, def: def, fs: fs}, name, usage)
}

// parse parses args, flags anywhere, and returns the positional arguments.
// A flag value an ageFlag refuses is its *flagError; the flag package's
// other errors are usage errors that point to the command's help. Asked
// for help, it prints the usage to stdout and returns flag.ErrHelp.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			switch {
			case errors.Is(err, flag.ErrHelp):
				fs.SetOutput(fs.e.stdout) // asked for: the usage goes to stdout
				fs.Usage()
				return nil, err
			case fs.valueErr != nil:
				return nil, fs.valueErr
			}
			return nil, usagef("%v (see \"outbox help %s\")", err, fs.name)
		}
		args = fs.Args()
		if len(args) == 0 {
			if fs.db == "" {
				fs.db = fs.e.getenv("OUTBOX_DATABASE_URL") // not the flag's default: help would print it
			}
			return pos, nil
		}
		if args[0] == "--" {
			args = args[1:]
			pos = append(pos, args...)
			args = nil
			continue
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
