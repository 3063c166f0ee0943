package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// runErr runs the command line args and returns the error its command
// returned, before the exit status and message are made of it.
func runErr(t *testing.T, args ...string) error {
	t.Helper()
	var out, errOut bytes.Buffer
	// A relay the command line does not stop stops after a while, as on
	// SIGINT, with the test's recorder as its broker.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := &env{ctx: ctx, stdout: &out, stderr: &errOut, getenv: func(string) string { return "" },
		openPublisher: func(context.Context, string, *slog.Logger) (message.Publisher, func() error, error) {
			return newRecorder(), func() error { return nil }, nil
		}}
	c := commands()[args[0]]
	if c == nil {
		t.Fatalf("no command %q", args[0])
	}
	return c.run(e, args[1:])
}

// TestBadFlagValues: a flag given a value it does not take is a *flagError
// naming that flag and value, which exits 2 and whose message says what the
// flag takes. Found by new users: "list --limit -1" named --after, and a
// negative --retention-interval was "not a duration".
func TestBadFlagValues(t *testing.T) {
	t.Parallel()
	db := sqliteDB(t).url
	for _, tc := range []struct {
		args        []string
		flag, value string
		want        string // in the message
	}{
		{[]string{"list", "--limit", "-1"}, "--limit", "-1", "from 1 to 1000"},
		{[]string{"list", "--limit", "0"}, "--limit", "0", "from 1 to 1000"},
		{[]string{"parked", "list", "--limit", "-1"}, "--limit", "-1", "from 1 to 1000"},
		{[]string{"list", "--after", "-3"}, "--after", "-3", "0 (the first page) or a row id"},
		{[]string{"parked", "list", "--after", "-3"}, "--after", "-3", "0 (the first page) or a row id"},
		{[]string{"janitor", "--once", "--retention-interval", "-5s"}, "--retention-interval", "-5s", "more than zero"},
		{[]string{"relay", "--broker", "memory://", "--allow-local-broker", "--retention", "7d", "--retention-interval", "-5s"}, "--retention-interval", "-5s", "more than zero"},
		{[]string{"janitor", "--once", "--retention-interval", "0s"}, "--retention-interval", "0s", "more than zero"},
		{[]string{"janitor", "--once", "--published-age", "-1d"}, "--published-age", "-1d", "more than zero"},
		{[]string{"status", "--fail-if-older", "soon"}, "--fail-if-older", "soon", "not a duration"},
		{[]string{"migrate", "--partition-interval", "-1h"}, "--partition-interval", "-1h", "more than zero"},
		// Found by a new user's trial: accepted, or named a Go field.
		{[]string{"status", "--fail-if-pending", "-3"}, "--fail-if-pending", "-3", "0 or more"},
		{[]string{"list", "--state", "weird"}, "--state", "weird", "pending, retrying, parked or published"},
		{[]string{"relay", "--broker", "memory://", "--allow-local-broker", "--max-active-relays", "65"}, "--max-active-relays", "65", "from 1 to 64"},
	} {
		args := append(slices.Clone(tc.args), "--db", db)
		err := runErr(t, args...)
		var fe *flagError
		if !errors.As(err, &fe) || fe.Flag != tc.flag || fe.Value != tc.value || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("outbox %s: error %v (%T); want a *flagError for %s %s saying %q", strings.Join(tc.args, " "), err, err, tc.flag, tc.value, tc.want)
			continue
		}
		code, _, stderr := runCmd(t, nil, args...)
		if want := "outbox: " + tc.flag + " " + tc.value + ": "; code != exitUsage || !strings.HasPrefix(stderr, want) {
			t.Errorf("outbox %s: exit %d, stderr %q; want %d starting %q", strings.Join(tc.args, " "), code, stderr, exitUsage, want)
		}
	}
}

// TestFlagErrorPrintedOnce: a command line the flag package rejects is
// reported once, on one line (the flag package printed it, with the whole
// usage, before the command printed it again).
func TestFlagErrorPrintedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // the whole of stderr
	}{
		{[]string{"status", "--no-such-flag"}, `outbox: flag provided but not defined: -no-such-flag (see "outbox help status")`},
		{[]string{"list", "--limit", "abc"}, `outbox: invalid value "abc" for flag -limit: parse error (see "outbox help list")`},
		{[]string{"list", "--db"}, `outbox: flag needs an argument: -db (see "outbox help list")`},
		{[]string{"janitor", "--retention-interval", "-5s"},
			"outbox: --retention-interval -5s: must be more than zero: an age such as 90s, 15m, 36h, 7d or 10d12h (leave the flag out for the default, 1m)"},
	} {
		code, stdout, stderr := runCmd(t, nil, tc.args...)
		if code != exitUsage || stderr != tc.want+"\n" || stdout != "" {
			t.Errorf("outbox %s: exit %d, stdout %q, stderr %q; want %d and stderr %q", strings.Join(tc.args, " "), code, stdout, stderr, exitUsage, tc.want+"\n")
		}
	}
	// Help asked for still prints the usage, to stdout.
	if code, stdout, stderr := runCmd(t, nil, "status", "--help"); code != 0 || strings.Count(stdout, "Usage: outbox status") != 1 || stderr != "" {
		t.Errorf("status --help: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestParkedDuplicateIDs: an id given twice is one row: it is retried or
// discarded once, counted once, and the command succeeds (it reported
// "discarded 1 of 2" and exited 1, "1 of the ids were not parked rows").
func TestParkedDuplicateIDs(t *testing.T) {
	t.Parallel()
	d := sqliteDB(t)
	d.write(t, "o1", "o2")
	ids := d.settle(t, nil, nil, []string{"o1", "o2"})
	o1, o2 := strconv.FormatInt(ids["o1"], 10), strconv.FormatInt(ids["o2"], 10)

	code, stdout, stderr := runCmd(t, nil, "parked", "discard", o1, o1, "--db", d.url, "--json")
	var res map[string]int64
	if err := json.Unmarshal([]byte(stdout), &res); code != 0 || err != nil || res["discarded"] != 1 || res["requested"] != 1 {
		t.Errorf("parked discard %s %s: exit %d, %v: %s%s; want discarded 1, requested 1", o1, o1, code, err, stdout, stderr)
	}
	code, stdout, stderr = runCmd(t, nil, "parked", "retry", o2, o2, o2, "--db", d.url)
	if code != 0 || stdout != "retried 1 of 1\n" {
		t.Errorf("parked retry %s %s %s: exit %d: %s%s; want \"retried 1 of 1\"", o2, o2, o2, code, stdout, stderr)
	}
	for _, tc := range []struct {
		in   []string
		want []int64
	}{
		{[]string{"6", "6"}, []int64{6}},
		{[]string{"7", "6", "7", "6", "8"}, []int64{7, 6, 8}},
	} {
		if got, err := parseIDs(tc.in); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseIDs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestMissingTableHint: the hint after a missing table names the flag that
// names that table: --table for the outbox, --inbox-table for the inbox
// (it named --table for both).
func TestMissingTableHint(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		for _, tc := range []struct {
			args     []string
			want     string
			dontWant string
		}{
			{[]string{"janitor", "--once", "--inbox-retention", "1d", "--inbox-table", "no_such_inbox"},
				`outbox: is table no_such_inbox there? "outbox migrate --inbox --inbox-table no_such_inbox" creates it; --inbox-table names another`, "; --table"},
			{[]string{"status", "--table", "no_such_outbox"},
				`outbox: is table no_such_outbox there? "outbox migrate --table no_such_outbox" creates it; --table names another`, "--inbox-table"},
		} {
			code, _, stderr := runCmd(t, nil, append(tc.args, "--db", d.url)...)
			if code != exitError || !strings.Contains(stderr, tc.want+"\n") || strings.Contains(stderr, tc.dontWant) {
				t.Errorf("outbox %s: exit %d, stderr:\n%s\nwant %d with %q, without %q", strings.Join(tc.args, " "), code, stderr, exitError, tc.want, tc.dontWant)
			}
		}
	})
	// The default inbox table, which sqliteDB does not create; without
	// --once too, where each pass logged the error, forever.
	for _, once := range []bool{true, false} {
		args := []string{"janitor", "--inbox-retention", "1d", "--db", sqliteDB(t).url}
		if once {
			args = append(args, "--once")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		code, _, stderr := runCmdCtx(t, ctx, nil, args...)
		cancel()
		if want := `outbox: is table outbox_inbox there? "outbox migrate --inbox" creates it; --inbox-table names another` + "\n"; code != exitError || !strings.HasSuffix(stderr, want) {
			t.Errorf("%s without an inbox table: exit %d, stderr:\n%s\nwant %d ending %q", strings.Join(args, " "), code, stderr, exitError, want)
		}
	}
}

// TestMigratePartitionedSQLiteCreatesNothing: migrate --partition-interval
// on a SQLite URL is refused before the database file is created (it left
// an empty file behind).
func TestMigratePartitionedSQLiteCreatesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "new.db")
	err := runErr(t, "migrate", "--partition-interval", "24h", "--db", "sqlite:"+path)
	var fe *flagError
	if !errors.As(err, &fe) || fe.Flag != "--partition-interval" || fe.Value != "24h" || !strings.Contains(err.Error(), "PostgreSQL only") {
		t.Errorf("migrate --partition-interval on SQLite: error %v (%T); want a *flagError for --partition-interval saying PostgreSQL only", err, err)
	}
	code, _, stderr := runCmd(t, nil, "migrate", "--partition-interval", "24h", "--db", "sqlite:"+path)
	if code != exitUsage || !strings.Contains(stderr, "--partition-interval") {
		t.Errorf("migrate --partition-interval on SQLite: exit %d, %q; want %d naming the flag", code, stderr, exitUsage)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("migrate --partition-interval on SQLite left %s behind (stat: %v)", path, err)
	}
}

// TestMissingTableHintText: the table is read from each database's
// message, and the hint names the flag of that table; a missing table that
// neither flag names (one migrate creates beside the outbox) is named as
// it is.
func TestMissingTableHintText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string // the command's flags
		err  string
		want string
	}{
		{[]string{"--inbox-retention", "1d"}, `sqlstore: inbox consumers: ERROR: relation "outbox_inbox" does not exist (SQLSTATE 42P01)`,
			`is table outbox_inbox there? "outbox migrate --inbox" creates it; --inbox-table names another`},
		{[]string{"--inbox-table", "app.markers"}, `inbox consumers: Error 1146 (42S02): Table 'shop.markers' doesn't exist`,
			`is table app.markers there? "outbox migrate --inbox --inbox-table app.markers" creates it; --inbox-table names another`},
		{nil, `stats: SQL logic error: no such table: outbox_messages (1)`,
			`is table outbox_messages there? "outbox migrate" creates it; --table names another`},
		{[]string{"--table", "orders_outbox"}, `claim: SQL logic error: no such table: orders_outbox_leases (1)`,
			`is table orders_outbox_leases there? "outbox migrate --table orders_outbox" creates the outbox's tables; --table names another outbox`},
		{[]string{"--table", "app.orders_outbox"}, `relay: table app.orders_outbox_relays: ERROR: relation "app.orders_outbox_relays" does not exist (SQLSTATE 42P01)`,
			`is table app.orders_outbox_relays there? "outbox migrate --table app.orders_outbox" creates the outbox's tables; --table names another outbox`},
		{nil, `relay: table outbox_messages_relays: Error 1146 (42S02): Table 'shop.outbox_messages_relays' doesn't exist`,
			`is table shop.outbox_messages_relays there? "outbox migrate" creates the outbox's tables; --table names another outbox`},
		{nil, `connect to the postgres database: unreachable: dial tcp: connection refused`, ""},
	} {
		var out, errOut bytes.Buffer
		e := &env{ctx: context.Background(), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
		fs := newFlagSet(e, janitorCommand())
		var rf retentionFlags
		rf.register(fs, "published-age", "the default, 7d", "")
		if _, err := fs.parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := e.flags.missingTableHint(errors.New(tc.err)); got != tc.want {
			t.Errorf("missingTableHint(%q) with flags %q = %q, want %q", tc.err, tc.args, got, tc.want)
		}
	}
}

// TestJanitorInboxOnly: a consumer's database holding only its inbox is
// pruned with --inbox-only (a new user's trial had no way: the janitor
// always wanted the outbox table there too); --inbox-only needs
// --inbox-retention and takes no --published-age.
func TestJanitorInboxOnly(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "billing.db")
	driver, dsn, _, err := parseDatabaseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := sqlstore.Migrate(context.Background(), databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.SQLite, Inbox: true}); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour).UTC()
	if _, err := db.Exec(`INSERT INTO outbox_inbox (consumer, event_id, event_type, processed_at) VALUES ('billing', ?, 't', ?), ('billing', ?, 't', ?)`,
		uuid.NewString(), old, uuid.NewString(), time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, nil, "janitor", "--once", "--inbox-only", "--inbox-retention", "1d", "--db", url)
	if code != 0 || !strings.Contains(stdout, "deleted 1 inbox markers in") || strings.Contains(stdout, "published") {
		t.Errorf("janitor --inbox-only: exit %d, stdout %q, stderr %q; want 1 inbox marker deleted", code, stdout, stderr)
	}
	for _, args := range [][]string{
		{"janitor", "--once", "--inbox-only", "--db", url},
		{"janitor", "--once", "--inbox-only", "--inbox-retention", "1d", "--published-age", "7d", "--db", url},
	} {
		if code, _, stderr := runCmd(t, nil, args...); code != 2 || !strings.Contains(stderr, "--inbox-only") {
			t.Errorf("outbox %s: exit %d, stderr %q; want a usage error naming --inbox-only", strings.Join(args, " "), code, stderr)
		}
	}
}
