package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/hooks/hookstest"
)

// relayWithin runs "outbox relay" with args, stopping it as SIGINT would
// after d: a relay that should have exited by itself then exits 0.
func relayWithin(t *testing.T, d time.Duration, args ...string) (code int, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	code, _, stderr = runCmdCtx(t, ctx, newRecorder(), append([]string{"relay"}, args...)...)
	return code, stderr
}

// TestRelayMissingTable: a relay whose outbox table, or one of the tables
// migrate creates beside it, is missing exits 1 at start with the error
// and the hint the other commands print (found by a new user's trial: it
// logged "relation "outbox_nope_relays" does not exist" as a WARN per
// claim, forever, with no hint).
func TestRelayMissingTable(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		code, stderr := relayWithin(t, 20*time.Second, "--db", d.url, "--broker", "memory://", "--allow-local-broker", "--table", "outbox_nope")
		want := `outbox: is table outbox_nope there? "outbox migrate --table outbox_nope" creates it; --table names another` + "\n"
		if code != exitError || !strings.HasSuffix(stderr, want) || strings.Contains(stderr, "batch failed") {
			t.Errorf("relay --table outbox_nope: exit %d, stderr:\n%s\nwant %d ending %q", code, stderr, exitError, want)
		}
		// The outbox is there, its relays table is not (dropped, or
		// never made by an older migrate).
		if _, err := d.db.Exec("DROP TABLE outbox_messages_relays"); err != nil {
			t.Fatal(err)
		}
		code, stderr = relayWithin(t, 20*time.Second, "--db", d.url, "--broker", "memory://", "--allow-local-broker")
		// (MySQL names it with its database.)
		want = `outbox_messages_relays there? "outbox migrate" creates the outbox's tables; --table names another outbox` + "\n"
		if code != exitError || !strings.HasSuffix(stderr, want) || !strings.Contains(stderr, "outbox: is table ") || strings.Contains(stderr, "batch failed") {
			t.Errorf("relay without its relays table: exit %d, stderr:\n%s\nwant %d ending %q", code, stderr, exitError, want)
		}
		// --migrate creates them: the relay publishes what was written
		// before it started, and stops cleanly.
		ids := d.write(t, "a1")
		rec := newRecorder()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			code, _, stderr = runCmdCtx(t, ctx, rec, "relay", "--db", d.url, "--broker", "memory://", "--allow-local-broker", "--migrate")
		}()
		for deadline := time.Now().Add(30 * time.Second); ; {
			rec.mu.Lock()
			published := rec.all[ids[0]]
			rec.mu.Unlock()
			if published {
				break
			}
			select {
			case <-done:
				cancel()
				t.Fatalf("relay --migrate returned before publishing: exit %d:\n%s", code, stderr)
			case <-time.After(20 * time.Millisecond): // polling the recorder
			}
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("relay --migrate published nothing in 30s: exit %d:\n%s", code, stderr)
			}
		}
		cancel()
		<-done
		if code != 0 {
			t.Errorf("relay --migrate: exit %d:\n%s", code, stderr)
		}
		// The inbox table --inbox-retention prunes: every pass would fail
		// on it (it logged an ERROR per pass while the relay ran on).
		code, stderr = relayWithin(t, 20*time.Second, "--db", d.url, "--broker", "memory://", "--allow-local-broker",
			"--inbox-retention", "7d", "--inbox-table", "inbox_nope")
		want = `inbox_nope there? "outbox migrate --inbox --inbox-table inbox_nope" creates it; --inbox-table names another` + "\n"
		if code != exitError || !strings.HasSuffix(stderr, want) || strings.Contains(stderr, "relay starting") {
			t.Errorf("relay --inbox-retention without its inbox table: exit %d, stderr:\n%s\nwant %d ending %q", code, stderr, exitError, want)
		}
	})
}

// TestRelayBadBrokerURL: a --broker the relay cannot open for what it
// says (no scheme, an unknown one, a parameter its scheme does not take)
// is a usage error naming --broker, the URL without its password and the
// schemes it takes; the scheme is checked before the database is waited
// for. It exited 1 naming no flag.
func TestRelayBadBrokerURL(t *testing.T) {
	t.Parallel()
	db := sqliteDB(t).url
	down := "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1"
	schemes := strings.Join(broker.Schemes(), ", ")
	for _, tc := range []struct {
		db, broker string
		value      string // the flag's value in the message
		want       string // in the message
	}{
		{db, "kafak://x", "kafak://x", `unknown scheme "kafak"`},
		{db, "127.0.0.1:19092", "127.0.0.1:19092", "no scheme"},
		{db, "127.0.0.1", "127.0.0.1", "no scheme"},
		{db, "kafak://u:secret@x", "kafak://u:xxxxx@x", `unknown scheme "kafak"`},
		{db, "kafka://u:secret@[::1:9092", "kafka://u:xxxxx@[::1:9092", "missing ']' in host"},
		{db, "nats://127.0.0.1:4222?replicas=x", "nats://127.0.0.1:4222?replicas=x", "replicas"},
		{down, "kafak://x", "kafak://x", `unknown scheme "kafak"`},
	} {
		args := []string{"relay", "--db", tc.db, "--broker", tc.broker}
		e := &env{ctx: context.Background(), stdout: &strings.Builder{}, stderr: &strings.Builder{},
			getenv: func(string) string { return "" }, openPublisher: openBroker}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e.ctx = ctx
		err := commands()["relay"].run(e, args[1:])
		cancel()
		var fe *flagError
		if !errors.As(err, &fe) || fe.Flag != "--broker" || fe.Value != tc.value || !strings.Contains(fe.Want, tc.want) || !strings.Contains(fe.Want, schemes) {
			t.Errorf("relay --broker %s: error %v (%T); want a *flagError for --broker %s saying %q and the schemes", tc.broker, err, err, tc.value, tc.want)
			continue
		}
		var stderr strings.Builder
		code := code(&stderr, err)
		if want := "outbox: --broker " + tc.value + ": "; code != exitUsage || !strings.HasPrefix(stderr.String(), want) || strings.Contains(stderr.String(), "secret") {
			t.Errorf("relay --broker %s: exit %d, stderr %q; want %d starting %q, without the password", tc.broker, code, stderr.String(), exitUsage, want)
		}
	}
}

// TestRelayFlagValues: each relay flag that sets a field of the relay's
// or the store's configuration refuses, naming itself, a value the
// configuration would refuse or misread (it said "relay: invalid config:
// BatchSize is negative", the Go field).
func TestRelayFlagValues(t *testing.T) {
	t.Parallel()
	db := sqliteDB(t).url
	for _, tc := range []struct {
		args        []string
		flag, value string
		want        string // in the message
	}{
		{[]string{"--batch", "-5"}, "--batch", "-5", "a number of messages per claim, 1 or more"},
		{[]string{"--batch", "0"}, "--batch", "0", "1 or more"},
		{[]string{"--batch", "many"}, "--batch", "many", "not a number"},
		{[]string{"--poll", "-1s"}, "--poll", "-1s", "more than zero"},
		{[]string{"--poll", "0s"}, "--poll", "0s", "more than zero"},
		{[]string{"--max-attempts", "-1"}, "--max-attempts", "-1", "a number of failed attempts from 0 to 2147483647 (leave the flag out for 0, never park)"},
		{[]string{"--max-attempts", "3000000000"}, "--max-attempts", "3000000000", "a number of failed attempts from 0 to 2147483647 (leave the flag out for 0, never park)"},
		{[]string{"--retry-delay", "-1s"}, "--retry-delay", "-1s", "more than zero"},
		{[]string{"--max-retry-delay", "-1s"}, "--max-retry-delay", "-1s", "more than zero"},
		{[]string{"--retry-delay", "1m"}, "--retry-delay", "1m", "at most --max-retry-delay (30s)"},
		{[]string{"--retry-delay", "10s", "--max-retry-delay", "5s"}, "--retry-delay", "10s", "at most --max-retry-delay (5s)"},
		{[]string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout", "-1s", "more than zero"},
		{[]string{"--shutdown-timeout", "0s"}, "--shutdown-timeout", "0s", "more than zero"},
		{[]string{"--max-active-relays", "-1"}, "--max-active-relays", "-1", "from 1 to 64"},
		{[]string{"--max-active-relays", "0"}, "--max-active-relays", "0", "from 1 to 64"},
		{[]string{"--max-backlog-age", "-1m"}, "--max-backlog-age", "-1m", "more than zero"},
		{[]string{"--retention", "7d", "--retention-batch", "-1"}, "--retention-batch", "-1", "1 or more"},
	} {
		args := append([]string{"relay", "--broker", "memory://", "--allow-local-broker", "--db", db}, tc.args...)
		err := runErr(t, args...)
		var fe *flagError
		if !errors.As(err, &fe) || fe.Flag != tc.flag || fe.Value != tc.value || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("outbox relay %s: error %v (%T); want a *flagError for %s %s saying %q", strings.Join(tc.args, " "), err, err, tc.flag, tc.value, tc.want)
			continue
		}
		code, _, stderr := runCmd(t, nil, args...)
		if want := "outbox: " + tc.flag + " " + tc.value + ": "; code != exitUsage || !strings.HasPrefix(stderr, want) {
			t.Errorf("outbox relay %s: exit %d, stderr %q; want %d starting %q", strings.Join(tc.args, " "), code, stderr, exitUsage, want)
		}
	}
	// The janitor's --retention-batch too.
	if err := runErr(t, "janitor", "--once", "--retention-batch", "0", "--db", db); !strings.Contains(fmt.Sprint(err), "--retention-batch 0: ") {
		t.Errorf("janitor --retention-batch 0: error %v, want one naming the flag", err)
	}
}

// TestRelayDatabaseRefused: a database server that answers but refuses
// the connection (no such database, a bad password) fails the relay at
// once, naming the URL without its password; only a server that does not
// answer is waited for. It retried "cannot reach the database" forever.
func TestRelayDatabaseRefused(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		hookstest.PostgresDSN(t) // skips when the server does not answer
		u, err := url.Parse(hookstest.PostgresBaseDSN())
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(u.User.Username(), "secret")
		u.Path = "/outbox_no_such_db"
		code, stderr := relayWithin(t, 20*time.Second, "--db", u.String(), "--broker", "memory://", "--allow-local-broker")
		if code != exitError || strings.Contains(stderr, "retrying") || strings.Contains(stderr, "secret") ||
			!strings.Contains(stderr, u.Redacted()) || !strings.Contains(stderr, "3D000") {
			t.Errorf("relay on a database that does not exist: exit %d, stderr:\n%s\nwant %d at once naming %s and SQLSTATE 3D000", code, stderr, exitError, u.Redacted())
		}
	})
	t.Run("mysql", func(t *testing.T) {
		hookstest.MySQLDSN(t) // skips when the server does not answer
		cfg, err := mysql.ParseDSN(hookstest.MySQLBaseDSN())
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			url  *url.URL
			want string
		}{
			{&url.URL{Scheme: "mysql", User: url.User(cfg.User), Host: cfg.Addr, Path: "/outbox_no_such_db"}, "Error 1049"},
			{&url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd+"wrong"), Host: cfg.Addr, Path: "/outbox_no_such_db"}, "Error 1045"},
		} {
			code, stderr := relayWithin(t, 20*time.Second, "--db", tc.url.String(), "--broker", "memory://", "--allow-local-broker")
			if code != exitError || strings.Contains(stderr, "retrying") || strings.Contains(stderr, "wrong") ||
				!strings.Contains(stderr, tc.url.Redacted()) || !strings.Contains(stderr, tc.want) {
				t.Errorf("relay --db %s: exit %d, stderr:\n%s\nwant %d at once naming the URL and %q", tc.url.Redacted(), code, stderr, exitError, tc.want)
			}
		}
	})
}

// TestUnreachable: which connection errors the relay waits out at start.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("failed to connect: %w", refused), true},
		{&net.DNSError{Err: "no such host", Name: "db.invalid", IsNotFound: true}, true},
		{fmt.Errorf("timeout: %w", context.DeadlineExceeded), true},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}, true},
		{&mysql.MySQLError{Number: 1040, Message: "Too many connections"}, true},
		{mysql.ErrInvalidConn, true},
		{&pgconn.PgError{Code: "3D000", Message: `database "x" does not exist`}, false},
		{&pgconn.PgError{Code: "28P01", Message: "password authentication failed"}, false},
		{&pgconn.PgError{Code: "28000", Message: "no pg_hba.conf entry"}, false},
		{&mysql.MySQLError{Number: 1049, Message: "Unknown database 'x'"}, false},
		{&mysql.MySQLError{Number: 1045, Message: "Access denied"}, false},
		{errors.New("tls: failed to verify certificate"), false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestRedactURL: a URL's password is hidden even when the URL does not
// parse.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:secret@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"kafka://u:secret@[::1:9092", "kafka://u:xxxxx@[::1:9092"},
		{"kafka://u:secret@[::1:9092/x?y=1", "kafka://u:xxxxx@[::1:9092/x?y=1"},
		{"kafka://u@[::1:9092", "kafka://u@[::1:9092"},
		{"127.0.0.1:19092", "127.0.0.1:19092"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
