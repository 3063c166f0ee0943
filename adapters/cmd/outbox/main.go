// Command outbox operates an outbox table: it shows the backlog, lists,
// retries and discards parked events, purges published rows, replays a range
// of published events after a broker lost them, runs a relay process and its
// retention, and creates the tables.
//
//	go run github.com/gooutbox/outbox/adapters/cmd/outbox@latest status --db postgres://postgres@127.0.0.1:5432/shop
//	outbox parked list --db mysql://root@127.0.0.1:3306/shop
//	outbox list --aggregate-type order --aggregate-id 42
//	outbox parked retry 1042 1043
//	outbox replay --from 2026-11-30T10:00:00Z --to 2026-11-30T11:00:00Z --topic orders
//	outbox relay --broker kafka://127.0.0.1:9092 --retention 7d
//
// The database comes from --db or $OUTBOX_DATABASE_URL: postgres://
// (pgx), mysql://user:pass@host:3306/db (go-sql-driver/mysql; MariaDB
// too) or sqlite:path/to/file.db. Every command takes --json for output a
// program reads, and exits 0 when it succeeded, 1 on an error, 2 on a usage
// error, and 3 when "status" found what one of its --fail-if flags names.
//
// It lives under adapters (not beside the runtime) because "relay" opens any
// broker by URL through package adapters/broker, which compiles every
// broker client; the other commands need only the database drivers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/ThreeDotsLabs/watermill/message"

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
}

// command is one subcommand.
type command struct {
	name, args, summary, help string
	run                       func(e *env, args []string) error
}

// commands returns the subcommands by name.
func commands() map[string]*command {
	cs := []*command{statusCommand(), listCommand(), parkedCommand(), purgeCommand(), replayCommand(), relayCommand(), janitorCommand(), migrateCommand(), dashboardCommand()}
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

// alertError is a status check that failed: exit status 3.
type alertError struct{ msg string }

func (a alertError) Error() string { return a.msg }

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return (&env{ctx: ctx, stdout: stdout, stderr: stderr, getenv: getenv, openPublisher: openBroker}).run(args)
}

// run runs the command line args in e and returns the exit status.
func (e *env) run(args []string) int {
	stdout, stderr := e.stdout, e.stderr
	cmds := commands()
	if len(args) == 0 {
		printUsage(stderr, cmds)
		return exitUsage
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
	return code(stderr, c.run(e, rest))
}

// code prints err and returns its exit status.
func code(stderr io.Writer, err error) int {
	var u usageError
	var a alertError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &u), errors.Is(err, sqlstore.ErrInvalidQuery):
		fmt.Fprintln(stderr, "outbox:", err)
		return exitUsage
	case errors.As(err, &a):
		fmt.Fprintln(stderr, "outbox:", err)
		return exitAlert
	}
	fmt.Fprintln(stderr, "outbox:", err)
	if missingTable(err) {
		fmt.Fprintln(stderr, `outbox: is the table there? "outbox migrate" creates it; --table names another`)
	}
	return exitError
}

// missingTable reports whether err is a database's "no such table".
func missingTable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "SQLSTATE 42P01") || strings.Contains(s, "Error 1146") || strings.Contains(s, "no such table")
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
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprint(w, `  help      outbox help <command> describes a command and its flags

Every command takes:
  --db URL      database: postgres://..., mysql://user:pass@host:3306/db, sqlite:file.db
                (default: $OUTBOX_DATABASE_URL)
  --table NAME  outbox table (default: outbox_messages)
  --json        print JSON instead of tables

Exit status: 0 ok, 1 error, 2 usage error, 3 a "status --fail-if-..." condition holds.
`)
}

// flagSet returns a flag set for command c with the flags every command
// takes, and parses args into it. Flags and positional arguments may be
// interleaved ("parked retry 12 --json 13").
type flagSet struct {
	*flag.FlagSet
	e         *env
	db, table string
	json      bool
	// createDB lets openDatabase create a SQLite file that does not
	// exist (migrate); every other command refuses one.
	createDB bool
}

func newFlagSet(e *env, c *command) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("outbox "+c.name, flag.ContinueOnError), e: e}
	fs.SetOutput(e.stderr)
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

// isSet reports whether the flag name was given on the command line.
func (fs *flagSet) isSet(name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parse parses args, flags anywhere, and returns the positional arguments.
func (fs *flagSet) parse(args []string) ([]string, error) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(fs.e.stdout) // asked for: the usage goes to stdout
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
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
