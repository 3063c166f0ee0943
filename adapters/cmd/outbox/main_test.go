package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// recorder is the relay's broker in tests: it records the event ids it
// published, per aggregate, in order.
// relayUntilPublished runs outbox relay on d with --broker url, its
// publisher opened by open, until rec records the event of aggregate "o1"
// that d holds; it stops the relay, checks that it exited 0, and returns
// its logs.
func relayUntilPublished(t *testing.T, d testDB, url string, rec *recorder, open func() (message.Publisher, error)) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	e := &env{ctx: ctx, stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }, openLag: openLagBroker,
		openPublisher: func(context.Context, string, *slog.Logger) (message.Publisher, func() error, error) {
			pub, err := open()
			if err != nil {
				return nil, nil, err
			}
			return pub, func() error { return nil }, nil
		}}
	done := make(chan int, 1)
	go func() { done <- e.run([]string{"relay", "--db", d.url, "--broker", url}) }()
	const wait = 30 * time.Second
	deadline := time.Now().Add(wait)
	for len(rec.sequence("o1")) == 0 {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("nothing published within %s; logs:\n%s", wait, errOut.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the recorder
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	return errOut.String()
}

// pingingRecorder is a recorder whose broker refuses the first fail pings
// (a health.BrokerPinger, as the Kafka publisher is).
type pingingRecorder struct {
	*recorder
	fail, pings atomic.Int32
}

func (p *pingingRecorder) Ping(context.Context) error {
	p.pings.Add(1)
	if p.fail.Add(-1) >= 0 {
		return errors.New("dial tcp 127.0.0.1:9: connect: connection refused")
	}
	return nil
}

type recorder struct {
	mu      sync.Mutex
	byAgg   map[string][]string
	byTopic map[string][]*message.Message
	all     map[string]bool
}

func newRecorder() *recorder {
	return &recorder{byAgg: map[string][]string{}, byTopic: map[string][]*message.Message{}, all: map[string]bool{}}
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byTopic[topic] = append(r.byTopic[topic], msgs...)
	for _, m := range msgs {
		agg := m.Metadata.Get(runtime.MetadataAggregateID)
		r.byAgg[agg] = append(r.byAgg[agg], m.UUID)
		r.all[m.UUID] = true
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) sequence(agg string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.byAgg[agg])
}

// testDB is a database the command is pointed at, and the test's own pool
// and store on it.
type testDB struct {
	url     string
	dialect sqlstore.Dialect
	db      *sql.DB
	store   *sqlstore.Store
}

// forEachDatabase runs fn in a subtest per dialect, on a fresh, migrated
// database (PostgreSQL and MariaDB skip, or fail under
// OUTBOX_TEST_REQUIRE_INTEGRATION=1, when unreachable).
func forEachDatabase(t *testing.T, fn func(t *testing.T, d testDB)) {
	for _, dialect := range []sqlstore.Dialect{sqlstore.SQLite, sqlstore.Postgres, sqlstore.MySQL} {
		t.Run(string(dialect), func(t *testing.T) {
			fn(t, openTestDB(t, dialect))
		})
	}
}

// openTestDB returns a fresh database of dialect, migrated with the inbox.
func openTestDB(t *testing.T, dialect sqlstore.Dialect) testDB {
	t.Helper()
	var url string
	switch dialect {
	case sqlstore.SQLite:
		url = "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
	case sqlstore.Postgres:
		url = hookstest.PostgresDSN(t)
	case sqlstore.MySQL:
		cfg, err := mysql.ParseDSN(hookstest.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		url = "mysql://" + cfg.User + "@" + cfg.Addr + "/" + cfg.DBName
	}
	driver, dsn, _, err := parseDatabaseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if code, _, stderr := runCmd(t, nil, "migrate", "--inbox", "--db", url); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{Dialect: dialect, RetryDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return testDB{url: url, dialect: dialect, db: db, store: store}
}

// TestMain runs more tests at once than CPUs: they wait on databases,
// brokers and timers (see runtimetest.Main).
func TestMain(m *testing.M) { runtimetest.Main(m) }

// runCmd runs the command line with the test's recorder as the broker and
// returns its exit status and output.
func runCmd(t *testing.T, pub *recorder, args ...string) (code int, stdout, stderr string) {
	return runCmdCtx(t, context.Background(), pub, args...)
}

func runCmdCtx(t *testing.T, ctx context.Context, pub *recorder, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{ctx: ctx, stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }, openLag: openLagBroker,
		openPublisher: func(context.Context, string, *slog.Logger) (message.Publisher, func() error, error) {
			if pub == nil {
				return nil, nil, errors.New("no broker in this test")
			}
			return pub, func() error { return nil }, nil
		}}
	code := e.run(args)
	return code, out.String(), errOut.String()
}

// write writes one event per aggregate id (topic orders, or payments for
// ids starting with "p") and returns their event ids.
func (d testDB) write(t *testing.T, aggIDs ...string) []string {
	t.Helper()
	w, err := sqlstore.NewWriter(d.dialect, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range aggIDs {
		topic, typ := "orders", "orders.placed"
		if strings.HasPrefix(a, "p") {
			topic, typ = "payments", "payments.made"
		}
		env := runtime.Envelope{EventID: runtime.NewEventID(), EventType: typ, EventVersion: 1, AggregateType: "order",
			AggregateID: a, OccurredAt: time.Now().UTC(), Payload: []byte(`{"agg":"` + a + `"}`)}
		if _, err := w.Write(context.Background(), databasesql.Executor(d.db), []sqlstore.Row{{Topic: topic, Envelope: env}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, env.EventID.String())
	}
	return ids
}

// settle claims every claimable row once and marks it as fn says:
// published, failed (retrying) or parked, by aggregate id.
func (d testDB) settle(t *testing.T, published, failed, parked []string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	b, err := d.store.Claim(ctx, relay.ClaimRequest{Owner: "test", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	var o relay.Outcome
	for _, m := range b.Messages {
		ids[m.AggregateID] = m.ID
		switch {
		case slices.Contains(published, m.AggregateID):
			o.Published = append(o.Published, m.ID)
		case slices.Contains(failed, m.AggregateID):
			o.Failed = append(o.Failed, relay.Failure{ID: m.ID, Err: errors.New("broker timeout")})
		case slices.Contains(parked, m.AggregateID):
			o.Failed = append(o.Failed, relay.Failure{ID: m.ID, Err: errors.New("message too large"), Permanent: true})
		}
	}
	if err := d.store.Mark(ctx, b, o); err != nil {
		t.Fatal(err)
	}
	if err := d.store.Release(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestMissingSQLiteFile: a command other than migrate given a SQLite
// path that does not exist fails and names the path, instead of creating
// an empty database and reporting an empty outbox; migrate creates it.
func TestMissingSQLiteFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range [][]string{
		{"status"}, {"list"}, {"parked", "list"}, {"janitor", "--once"}, {"relay", "--broker", "memory://", "--allow-local-broker"},
	} {
		code, _, stderr := runCmd(t, nil, append(args, "--db", "sqlite:"+path)...)
		if code != 1 || !strings.Contains(stderr, path+" does not exist") {
			t.Errorf("%v: exit %d, stderr %q; want 1 naming %s", args, code, stderr, path)
		}
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("%v created %s", args, path)
		}
	}
	if code, _, stderr := runCmd(t, nil, "migrate", "--db", "sqlite:"+path); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, nil, "status", "--db", "sqlite:"+path); code != 0 {
		t.Fatalf("status after migrate: exit %d: %s", code, stderr)
	}
}

// TestGlobalFlagsBeforeTheCommand: outbox --db URL --json list is outbox
// list --db URL --json.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	t.Parallel()
	d := sqliteDB(t)
	if code, _, stderr := runCmd(t, nil, "migrate", "--db", d.url); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	d.write(t, "1", "2")
	code1, before, stderr := runCmd(t, nil, "--db", d.url, "--json", "list")
	code2, after, _ := runCmd(t, nil, "list", "--db", d.url, "--json")
	if code1 != 0 || code2 != 0 {
		t.Fatalf("exit %d with the flags before the command, %d after it: %s", code1, code2, stderr)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(before), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("--db URL --json list printed %q (%v), want 2 rows", before, err)
	}
	if before != after {
		t.Errorf("flags before the command printed\n%s\nafter it\n%s", before, after)
	}
}

func TestHelpAndUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout (code 0) or stderr
	}{
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"help"}, 0, "Exit status"},
		{[]string{"help", "status"}, 0, "-fail-if-parked"},
		{[]string{"status", "--help"}, 0, "Usage: outbox status"},
		{[]string{"parked", "-h"}, 0, "parked retry --all"},
		{[]string{"help", "relay"}, 0, "kafka://"},
		{[]string{}, 2, "Commands:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"status", "--no-such-flag"}, 2, "no-such-flag"},
		{[]string{"status"}, 2, "no database"},
		{[]string{"status", "--db", "oracle://x"}, 2, `unsupported database URL scheme "oracle"`},
		{[]string{"parked", "--db", "sqlite:x.db"}, 2, "needs a subcommand"},
		{[]string{"parked", "retry", "--db", "sqlite:x.db"}, 2, "needs row ids"},
		{[]string{"parked", "retry", "abc", "--db", "sqlite:x.db"}, 2, `"abc" is not a row id`},
		{[]string{"purge", "--db", "sqlite:x.db"}, 2, "--published-before"},
		{[]string{"purge", "--published-before", "yesterday", "--db", "sqlite:x.db"}, 2, "neither an RFC 3339 time"},
		{[]string{"replay", "--db", "sqlite:x.db"}, 2, "replay needs --from or --to"},
		{[]string{"replay", "--from", "9", "--to", "3", "--db", "sqlite:x.db"}, 2, "--from 9 is not before --to 3"},
		{[]string{"replay", "--from", "1h", "--to", "2h", "--db", "sqlite:x.db"}, 2, "--from 1h is not before --to 2h"},
		{[]string{"relay", "--db", "sqlite:x.db"}, 2, "no broker"},
		// A relay on memory:// would mark real rows published into a log
		// nobody reads (found by a new user): refused unless asked for.
		{[]string{"relay", "--db", "sqlite:x.db", "--broker", "memory://"}, 2, "--broker memory://: a shared broker, not one only this process can read"},
		{[]string{"status", "--fail-if-older", "soon", "--db", "sqlite:x.db"}, 2, "not a duration"},
		// A zero age would mean the flag's default (7 days) or off: refused.
		{[]string{"janitor", "--once", "--published-age", "0s", "--db", "sqlite:x.db"}, 2, "--published-age 0s: must be more than zero"},
		{[]string{"janitor", "--once", "--published-age", "0d", "--db", "sqlite:x.db"}, 2, "--published-age 0d: must be more than zero"},
		{[]string{"migrate", "--partition-interval", "0s", "--db", "sqlite:x.db"}, 2, "--partition-interval 0s: must be more than zero"},
		{[]string{"parked", "list", "--limit", "-1", "--db", sqliteDB(t).url}, 2, "--limit -1: a number of rows from 1 to 1000"},
		// The global flags may come before the command (found by a new
		// user: "outbox --db URL list" was an unknown command "--db").
		{[]string{"--db", "sqlite:x.db", "parked"}, 2, "needs a subcommand"},
		{[]string{"--db=sqlite:x.db", "--json", "replay"}, 2, "replay needs --from or --to"},
		{[]string{"--limit", "3", "list"}, 2, "flag --limit before the command: only --db, --table and --json"},
		{[]string{"--db"}, 2, "flag --db needs a value"},
		{[]string{"--json"}, 2, "no command after the flags"},
	} {
		code, stdout, stderr := runCmd(t, nil, tc.args...)
		out := stderr
		if tc.code == 0 {
			out = stdout
		}
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("outbox %s: exit %d, want %d with %q in\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, tc.want, stdout, stderr)
		}
	}
}

func TestParseAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "36h": 36 * time.Hour, "7d": 7 * 24 * time.Hour,
		"1.5d": 36 * time.Hour, "10d1h": 241 * time.Hour, "1d30m": 24*time.Hour + 30*time.Minute,
	} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-1d", "1d-1h", "soon", "1dd", "-5m"} {
		if got, err := parseAge(in); err == nil {
			t.Errorf("parseAge(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, driver, dsn string }{
		{"postgres://u:p@h:5432/db?sslmode=disable", "pgx", "postgres://u:p@h:5432/db?sslmode=disable"},
		{"mysql://u:p@h/db", "mysql", "u:p@tcp(h:3306)/db?parseTime=true"},
		{"mysql://u:p%2F%40x@h/db", "mysql", "u:p/@x@tcp(h:3306)/db?parseTime=true"},
		{"mysql://u@h:3307/db?tls=skip-verify", "mysql", "u@tcp(h:3307)/db?parseTime=true&tls=skip-verify"},
		{"sqlite:/tmp/a.db", "sqlite", "file:/tmp/a.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"},
		{"sqlite://rel/a.db", "sqlite", "file:rel/a.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"},
	} {
		driver, dsn, _, err := parseDatabaseURL(tc.url)
		if err != nil || driver != tc.driver || dsn != tc.dsn {
			t.Errorf("parseDatabaseURL(%s) = %s, %s, %v; want %s, %s", tc.url, driver, dsn, err, tc.driver, tc.dsn)
		}
	}
	for _, bad := range []string{"nope", "mysql://h", "sqlite:", "redis://h"} {
		if _, _, _, err := parseDatabaseURL(bad); err == nil {
			t.Errorf("parseDatabaseURL(%s) accepted", bad)
		}
	}
}

// TestRelayMySQLDeadlines: the relay command gives a MySQL URL read and
// write deadlines unless it sets them, and leaves other URLs alone.
func TestRelayMySQLDeadlines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, dsn string }{
		{"mysql://u:p@h/db", "u:p@tcp(h:3306)/db?parseTime=true&readTimeout=10s&writeTimeout=10s"},
		{"mariadb://u:p%2F%40x@h/db?readTimeout=3s", "u:p/@x@tcp(h:3306)/db?parseTime=true&readTimeout=3s&writeTimeout=10s"},
		{"mysql://u@h:3307/db?writeTimeout=1s&readTimeout=2s", "u@tcp(h:3307)/db?parseTime=true&readTimeout=2s&writeTimeout=1s"},
	} {
		raw := withMySQLDeadlines(tc.url, 10*time.Second)
		if _, dsn, _, err := parseDatabaseURL(raw); err != nil || dsn != tc.dsn {
			t.Errorf("withMySQLDeadlines(%s) = %s: DSN %s, %v; want %s", tc.url, raw, dsn, err, tc.dsn)
		}
	}
	for _, raw := range []string{"postgres://u:p@h:5432/db?sslmode=disable", "sqlite:/tmp/a.db", "mysql://%zz"} {
		if got := withMySQLDeadlines(raw, time.Second); got != raw {
			t.Errorf("withMySQLDeadlines(%s) = %s; want it unchanged", raw, got)
		}
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		d.write(t, "o1", "o2", "o3", "o4", "o5", "p1")
		d.settle(t, []string{"o1"}, []string{"o2"}, []string{"o3"})

		code, stdout, stderr := runCmd(t, nil, "status", "--db", d.url, "--json")
		if code != 0 {
			t.Fatalf("status: exit %d: %s", code, stderr)
		}
		var st statusJSON
		if err := json.Unmarshal([]byte(stdout), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, stdout)
		}
		if st.Pending != 4 || st.Retrying != 1 || st.Parked != 1 || st.OldestPendingSeconds < 0 || len(st.Groups) != 2 {
			t.Errorf("status: %+v", st)
		}
		if g := st.Groups[0]; g.Topic != "orders" || g.EventType != "orders.placed" || g.Pending != 3 || g.Retrying != 1 || g.Parked != 1 {
			t.Errorf("orders group: %+v", g)
		}
		if g := st.Groups[1]; g.Topic != "payments" || g.Pending != 1 || g.Parked != 0 {
			t.Errorf("payments group: %+v", g)
		}

		code, stdout, _ = runCmd(t, nil, "status", "--db", d.url)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "TOPIC") || !strings.HasPrefix(lines[3], "TOTAL") {
			t.Fatalf("status: exit %d:\n%s", code, stdout)
		}
		// Aligned: every row's PENDING column starts where the header's does.
		col := strings.Index(lines[0], "PENDING")
		for _, l := range lines[1:] {
			if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
				t.Errorf("row %q is not aligned with the header %q", l, lines[0])
			}
		}

		for _, tc := range []struct {
			args []string
			code int
		}{
			{[]string{"--fail-if-parked"}, exitAlert},
			{[]string{"--fail-if-pending", "3"}, exitAlert},
			{[]string{"--fail-if-pending", "4"}, exitOK},
			{[]string{"--fail-if-older", "1h"}, exitOK},
		} {
			if code, _, stderr := runCmd(t, nil, append([]string{"status", "--db", d.url}, tc.args...)...); code != tc.code {
				t.Errorf("status %v: exit %d, want %d (%s)", tc.args, code, tc.code, stderr)
			}
		}
	})
}

// runRelay runs "outbox relay" until until returns true (polled), then
// stops it as SIGINT would, and checks it exited 0.
func runRelay(t *testing.T, d testDB, pub *recorder, until func() bool, extra ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan [3]string, 1)
	go func() {
		code, stdout, stderr := runCmdCtx(t, ctx, pub, append([]string{"relay", "--db", d.url, "--broker", "memory://", "--allow-local-broker", "--poll", "20ms"}, extra...)...)
		done <- [3]string{strconv.Itoa(code), stdout, stderr}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !until() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling for the outcome
	}
	ok := until()
	cancel()
	res := <-done
	if res[0] != "0" {
		t.Fatalf("relay: exit %s\n%s", res[0], res[2])
	}
	if !ok {
		t.Fatalf("relay: condition not met in 30s\n%s", res[2])
	}
}

func TestParkedListShowRetryDiscard(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		events := d.write(t, "o1", "o2", "o3")
		ids := d.settle(t, []string{"o1"}, nil, []string{"o2", "o3"})

		code, stdout, stderr := runCmd(t, nil, "parked", "list", "--db", d.url, "--json")
		var list []entryJSON
		if err := json.Unmarshal([]byte(stdout), &list); code != 0 || err != nil {
			t.Fatalf("parked list: exit %d, %v: %s%s", code, err, stdout, stderr)
		}
		if len(list) != 2 || list[0].ID != ids["o2"] || list[1].ID != ids["o3"] || list[0].LastError != "message too large" ||
			list[0].State != "parked" || list[0].ParkedAt == nil || list[0].EventID != events[1] {
			t.Errorf("parked list: %+v", list)
		}
		code, stdout, _ = runCmd(t, nil, "parked", "list", "--db", d.url)
		if code != 0 || !strings.Contains(stdout, "message too large") || !strings.Contains(stdout, strconv.FormatInt(ids["o3"], 10)) {
			t.Errorf("parked list: exit %d:\n%s", code, stdout)
		}
		code, stdout, _ = runCmd(t, nil, "parked", "show", strconv.FormatInt(ids["o2"], 10), "--db", d.url, "--json")
		var shown entryJSON
		var payload struct{ Agg string }
		if err := json.Unmarshal([]byte(stdout), &shown); code != 0 || err != nil || json.Unmarshal(shown.Payload, &payload) != nil || payload.Agg != "o2" {
			t.Errorf("parked show: exit %d, %v: %s", code, err, stdout)
		}
		if code, _, stderr := runCmd(t, nil, "parked", "show", "999999", "--db", d.url); code != 1 || !strings.Contains(stderr, "no outbox row 999999") {
			t.Errorf("parked show of a missing row: exit %d: %s", code, stderr)
		}

		// Retry o2 (and o1, which is not parked: exit 1, o2 still retried).
		code, stdout, stderr = runCmd(t, nil, "parked", "retry", strconv.FormatInt(ids["o2"], 10), strconv.FormatInt(ids["o1"], 10), "--db", d.url)
		if code != 1 || !strings.Contains(stdout, "retried 1 of 2") || !strings.Contains(stderr, "1 of the ids were not parked") {
			t.Errorf("parked retry: exit %d: %s %s", code, stdout, stderr)
		}
		// Discard o3.
		code, stdout, _ = runCmd(t, nil, "parked", "discard", strconv.FormatInt(ids["o3"], 10), "--db", d.url, "--json")
		var disc map[string]int64
		if err := json.Unmarshal([]byte(stdout), &disc); code != 0 || err != nil || disc["discarded"] != 1 {
			t.Errorf("parked discard: exit %d, %v: %s", code, err, stdout)
		}
		if _, err := d.store.Entry(context.Background(), ids["o3"]); !errors.Is(err, sqlstore.ErrNotFound) {
			t.Errorf("discarded row: %v", err)
		}
		// The relay publishes the retried o2, and never the discarded o3.
		pub := newRecorder()
		runRelay(t, d, pub, func() bool { return len(pub.sequence("o2")) > 0 })
		if got := pub.sequence("o2"); !slices.Equal(got, []string{events[1]}) {
			t.Errorf("o2 published %v", got)
		}
		if got := pub.sequence("o3"); len(got) != 0 {
			t.Errorf("discarded o3 published %v", got)
		}
		e, err := d.store.Entry(context.Background(), ids["o2"])
		if err != nil || e.State != sqlstore.StatePublished {
			t.Errorf("o2 after the relay: %+v, %v", e, err)
		}
	})
}

func TestPurge(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		d.write(t, "o1", "o2", "o3", "o4")
		ids := d.settle(t, []string{"o1", "o2", "o3"}, nil, []string{"o4"})
		q := `UPDATE outbox_messages SET published_at = ? WHERE id = ?`
		if d.dialect == sqlstore.Postgres {
			q = `UPDATE outbox_messages SET published_at = $1 WHERE id = $2`
		}
		for agg, ago := range map[string]time.Duration{"o1": 72 * time.Hour, "o2": 3 * time.Hour} {
			if _, err := d.db.Exec(q, time.Now().Add(-ago).UTC(), ids[agg]); err != nil {
				t.Fatal(err)
			}
		}
		purge := func(before string) int64 {
			t.Helper()
			code, stdout, stderr := runCmd(t, nil, "purge", "--published-before", before, "--db", d.url, "--json", "--batch", "1")
			var res struct{ Deleted int64 }
			if err := json.Unmarshal([]byte(stdout), &res); code != 0 || err != nil {
				t.Fatalf("purge %s: exit %d, %v: %s%s", before, code, err, stdout, stderr)
			}
			return res.Deleted
		}
		if n := purge("4d"); n != 0 {
			t.Errorf("purge 4d deleted %d", n)
		}
		if n := purge("2d"); n != 1 {
			t.Errorf("purge 2d deleted %d, want o1", n)
		}
		if n := purge(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)); n != 1 {
			t.Errorf("purge an hour ago deleted %d, want o2", n)
		}
		left, err := d.store.Entries(context.Background(), sqlstore.Query{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range left {
			got = append(got, e.AggregateID)
		}
		if !slices.Equal(got, []string{"o3", "o4"}) { // o3 published just now, o4 parked
			t.Errorf("rows left: %v", got)
		}
	})
}

func TestReplayRepublishesInOrder(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		events := d.write(t, "a", "a", "b", "a")
		pub := newRecorder()
		runRelay(t, d, pub, func() bool {
			st, err := d.store.Stats(context.Background())
			return err == nil && st.Pending == 0 && len(pub.sequence("a")) == 3
		})
		want := []string{events[0], events[1], events[3]}
		if got := pub.sequence("a"); !slices.Equal(got, want) {
			t.Fatalf("first publish of a: %v, want %v", got, want)
		}
		all, err := d.store.Entries(context.Background(), sqlstore.Query{})
		if err != nil || len(all) != 4 {
			t.Fatalf("entries: %v, %v", all, err)
		}
		// Replay all but the first row, by id; then the rest by time.
		code, stdout, stderr := runCmd(t, nil, "replay", "--from", strconv.FormatInt(all[1].ID, 10), "--to", strconv.FormatInt(all[3].ID, 10), "--db", d.url, "--json")
		var res map[string]int64
		if err := json.Unmarshal([]byte(stdout), &res); code != 0 || err != nil || res["replayed"] != 3 {
			t.Fatalf("replay: exit %d, %v: %s%s", code, err, stdout, stderr)
		}
		code, stdout, _ = runCmd(t, nil, "replay", "--from", "1h", "--topic", "orders", "--db", d.url)
		if code != 0 || !strings.Contains(stdout, "replayed 1 ") {
			t.Fatalf("replay --from 1h: exit %d: %s", code, stdout)
		}
		runRelay(t, d, pub, func() bool {
			st, err := d.store.Stats(context.Background())
			return err == nil && st.Pending == 0 && len(pub.sequence("a")) == 6 && len(pub.sequence("b")) == 2
		})
		if got := pub.sequence("a"); !slices.Equal(got, append(want, want...)) {
			t.Errorf("a published %v, want %v twice, in order", got, want)
		}
	})
}

func TestJanitorOnce(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		d.write(t, "o1", "o2")
		d.settle(t, []string{"o1"}, nil, nil)
		code, stdout, stderr := runCmd(t, nil, "janitor", "--once", "--db", d.url, "--json")
		// The default age is 7 days: nothing is that old.
		var res map[string]float64
		if err := json.Unmarshal([]byte(stdout), &res); code != 0 || err != nil || res["published_deleted"] != 0 {
			t.Fatalf("janitor: exit %d, %v: %s%s", code, err, stdout, stderr)
		}
		time.Sleep(2 * time.Millisecond) // published_at must be in the past by more than the age below
		code, stdout, stderr = runCmd(t, nil, "janitor", "--once", "--published-age", "1ms", "--inbox-retention", "1d", "--db", d.url, "--json")
		if err := json.Unmarshal([]byte(stdout), &res); code != 0 || err != nil || res["published_deleted"] != 1 {
			t.Fatalf("janitor: exit %d, %v: %s%s", code, err, stdout, stderr)
		}
		if st, err := d.store.Stats(context.Background()); err != nil || st.Pending != 1 {
			t.Errorf("pending after the janitor: %+v, %v", st, err)
		}
	})
}

// TestRelayRetention runs "relay --retention": the relay publishes and the
// retention beside it deletes the published rows.
// outboxRows counts the rows of d's outbox table.
func outboxRows(t *testing.T, d testDB) int {
	t.Helper()
	var n int
	if err := d.db.QueryRow(`SELECT count(*) FROM outbox_messages`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// runRelayUntilEmpty writes three events, runs "outbox relay" with extra
// until the outbox table is empty, and checks that all three were
// published.
func runRelayUntilEmpty(t *testing.T, d testDB, extra ...string) {
	t.Helper()
	d.write(t, "o1", "o2", "o3")
	pub := newRecorder()
	runRelay(t, d, pub, func() bool { return outboxRows(t, d) == 0 }, extra...)
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.all) != 3 {
		t.Errorf("published %d events, want 3", len(pub.all))
	}
}

func TestRelayRetention(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		runRelayUntilEmpty(t, d, "--retention", "1ms", "--retention-interval", "10ms")
	})
}

// TestRelayDeletePublished: with --delete-published, every published row
// is gone, and --retention beside it is refused.
func TestRelayDeletePublished(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		runRelayUntilEmpty(t, d, "--delete-published")
		code, _, stderr := runCmd(t, nil, "relay", "--db", d.url, "--broker", "memory://", "--allow-local-broker", "--delete-published", "--retention", "7d")
		if code != exitUsage || !strings.Contains(stderr, "nothing to delete") {
			t.Errorf("--delete-published with --retention: exit %d, %q; want %d and a usage error", code, stderr, exitUsage)
		}
	})
}

// TestRelayThroughBrokerURL runs the relay with a real broker URL
// (memory://, through package adapters/broker).
func TestRelayThroughBrokerURL(t *testing.T) {
	t.Parallel()
	d := sqliteDB(t)
	url, store := d.url, d.store
	d.write(t, "o1")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"relay", "--db", url, "--broker", "memory://", "--allow-local-broker", "--json"}, &out, &errOut, func(string) string { return "" })
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := store.Stats(context.Background()); err == nil && st.Pending == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay: exit %d: %s", code, errOut.String())
	}
	if st, err := store.Stats(context.Background()); err != nil || st.Pending != 0 {
		t.Errorf("after the relay: %+v, %v", st, err)
	}
	// --json logs are JSON lines.
	for _, l := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("log line is not JSON: %s", l)
		}
	}
}

// TestMainExitStatus runs main in a child process (this test binary,
// re-executed) and checks the process's exit status.
func TestMainExitStatus(t *testing.T) {
	t.Parallel()
	if args := os.Getenv("OUTBOX_TEST_MAIN_ARGS"); args != "" {
		os.Args = append([]string{"outbox"}, strings.Split(args, "\x1f")...)
		main()
		return
	}
	url := "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"status", "--help"}, 0, "Usage: outbox status"},
		{[]string{"status"}, 2, "no database"},
		{[]string{"migrate", "--db", url}, 0, "migrated outbox_messages"},
		{[]string{"status", "--db", url, "--json", "--fail-if-pending", "0"}, 0, `"pending": 0`},
		{[]string{"parked", "retry", "7", "--db", url}, 1, "not parked"},
		{[]string{"status", "--db", "sqlite:" + filepath.Join(t.TempDir(), "missing.db")}, 1, "outbox migrate"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMainExitStatus$")
		cmd.Env = append(os.Environ(), "OUTBOX_TEST_MAIN_ARGS="+strings.Join(tc.args, "\x1f"), "OUTBOX_DATABASE_URL=")
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("outbox %s: exit %d, want %d with %q:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.want, out)
		}
	}
}

// TestRelayStopsOnSIGTERM runs "outbox relay" in a child process (this test
// binary, re-executed), waits until it published the outbox, sends it
// SIGTERM and expects exit status 0.
func TestRelayStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	d := sqliteDB(t)
	url, store := d.url, d.store
	d.write(t, "o1", "o2")

	cmd := exec.Command(os.Args[0], "-test.run=^TestMainExitStatus$")
	cmd.Env = append(os.Environ(), "OUTBOX_TEST_MAIN_ARGS="+strings.Join([]string{"relay", "--db", url, "--broker", "memory://", "--allow-local-broker", "--poll", "20ms"}, "\x1f"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := store.Stats(context.Background()); err == nil && st.Pending == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling for the outcome
	}
	if st, err := store.Stats(context.Background()); err != nil || st.Pending != 0 {
		_ = cmd.Process.Kill()
		t.Fatalf("the relay process did not publish: %+v, %v\n%s", st, err, out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relay after SIGTERM: %v, want exit status 0\n%s", err, out.String())
	}
	// One stop line, from the relay, saying what became of the last batch:
	// none was in flight, or (when SIGTERM came between the last batch's
	// mark and the next, empty, claim) it was published and marked.
	// Nothing was left unmarked.
	l := out.String()
	if n := strings.Count(l, "stopped"); n != 1 || !(strings.Contains(l, "relay: stopped; no batch was in flight") || strings.Contains(l, "relay: stopped; the last batch was published and marked")) {
		t.Errorf("want one stop logged, saying nothing was left in flight; got %d:\n%s", n, l)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		events := d.write(t, "o1", "o2", "o3", "p1")
		d.settle(t, []string{"o1"}, []string{"o2"}, []string{"o3"})
		list := func(args ...string) []string {
			t.Helper()
			code, stdout, stderr := runCmd(t, nil, append([]string{"list", "--db", d.url, "--json"}, args...)...)
			var es []entryJSON
			if err := json.Unmarshal([]byte(stdout), &es); code != 0 || err != nil {
				t.Fatalf("list %v: exit %d, %v: %s%s", args, code, err, stdout, stderr)
			}
			var aggs []string
			for _, e := range es {
				aggs = append(aggs, e.AggregateID+":"+string(e.State))
			}
			return aggs
		}
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{nil, []string{"o1:published", "o2:retrying", "o3:parked", "p1:pending"}},
			{[]string{"--state", "published"}, []string{"o1:published"}},
			{[]string{"--state", "pending"}, []string{"o2:retrying", "p1:pending"}},
			{[]string{"--event-id", events[2]}, []string{"o3:parked"}},
			{[]string{"--aggregate-type", "order", "--aggregate-id", "p1"}, []string{"p1:pending"}},
			{[]string{"--topic", "payments"}, []string{"p1:pending"}},
			{[]string{"--limit", "2"}, []string{"o1:published", "o2:retrying"}},
		} {
			if got := list(tc.args...); !slices.Equal(got, tc.want) {
				t.Errorf("list %v: %v, want %v", tc.args, got, tc.want)
			}
		}
		code, stdout, stderr := runCmd(t, nil, "list", "--db", d.url, "--limit", "2")
		if code != 0 || !strings.HasPrefix(stdout, "ID") || !strings.Contains(stdout, "retrying") || !strings.Contains(stderr, "more may follow: --after") {
			t.Errorf("list: exit %d:\n%s%s", code, stdout, stderr)
		}
		for _, bad := range [][]string{{"--state", "stuck"}, {"--event-id", "nope"}} {
			if code, _, _ := runCmd(t, nil, append([]string{"list", "--db", d.url}, bad...)...); code != exitUsage {
				t.Errorf("list %v: exit %d, want 2", bad, code)
			}
		}
	})
}

// TestRelayServesMetricsAndHealth runs "outbox relay --listen" and reads
// its /metrics, /livez and /readyz while it relays.
// freeAddr returns a local address with a port free now, for a relay's
// --listen.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestRelayServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	d := sqliteDB(t)
	url := d.url
	d.write(t, "o1", "o2")
	addr := freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"relay", "--db", url, "--broker", "memory://", "--allow-local-broker", "--listen", addr}, &out, &errOut, func(string) string { return "" })
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("relay: exit %d: %s", code, errOut.String())
		}
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Poll until both events are counted as published and the relay is
	// ready.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get("/metrics")
		ready, _ := get("/readyz")
		if code == http.StatusOK && ready == http.StatusOK &&
			strings.Contains(body, `outbox_relay_published_total{event_type="orders.placed",topic="orders"} 2`) &&
			strings.Contains(body, "outbox_pending_messages 0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: /metrics %d, /readyz %d; metrics:\n%s", code, ready, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez = %d %s, want 200", code, body)
	}
}

// sqliteDB returns a migrated SQLite outbox in a temporary file, opened as
// the command opens a sqlite: URL, closed when t ends.
func sqliteDB(t *testing.T) testDB {
	t.Helper()
	url := "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
	if code, _, stderr := runCmd(t, nil, "migrate", "--db", url); code != 0 {
		t.Fatal(stderr)
	}
	driver, dsn, _, _ := parseDatabaseURL(url)
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return testDB{url: url, dialect: sqlstore.SQLite, db: db, store: store}
}

// TestMigratePartitioned: migrate --partition-interval creates a
// partitioned outbox on PostgreSQL, and is a usage error on SQLite.
func TestMigratePartitioned(t *testing.T) {
	t.Parallel()
	url := hookstest.PostgresDSN(t)
	if code, _, stderr := runCmd(t, nil, "migrate", "--partition-interval", "24h", "--db", url); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	driver, dsn, _, _ := parseDatabaseURL(url)
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var partitions int
	if err := db.QueryRow(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_messages'::regclass`).Scan(&partitions); err != nil {
		t.Fatal(err)
	}
	if partitions != 5 { // DEFAULT, today, 3 ahead
		t.Errorf("%d partitions, want 5", partitions)
	}
	// janitor drops an old, published partition.
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(-10 * 24 * time.Hour)
	if _, err := db.Exec(`CREATE TABLE outbox_messages_old PARTITION OF outbox_messages FOR VALUES FROM ('` +
		sqlstore.EventIDBound(day).String() + `') TO ('` + sqlstore.EventIDBound(day.Add(24*time.Hour)).String() + `')`); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCmd(t, nil, "janitor", "--once", "--published-age", "7d", "--db", url); code != 0 || !strings.Contains(stdout, "partitions: 1 dropped") {
		t.Errorf("janitor --once: exit %d: %s%s", code, stdout, stderr)
	}
	if code, _, _ := runCmd(t, nil, "migrate", "--partition-interval", "24h", "--db", "sqlite:"+filepath.Join(t.TempDir(), "o.db")); code != 2 {
		t.Errorf("migrate --partition-interval on SQLite: exit %d, want 2", code)
	}
}

// TestRelayWaitsForItsBrokerAndDatabase: a relay started while its broker
// or database does not answer logs a WARN per try and keeps trying (it
// exited 1 at once, found by a new user's trial: a relay restarted during
// a NATS outage died); a bad broker URL still fails at once.
func TestRelayWaitsForItsBrokerAndDatabase(t *testing.T) {
	t.Parallel()
	t.Run("broker", func(t *testing.T) {
		d := sqliteDB(t)
		d.write(t, "o1")
		pub := newRecorder()
		var opens atomic.Int32
		logs := relayUntilPublished(t, d, "nats://127.0.0.1:1", pub, func() (message.Publisher, error) {
			if opens.Add(1) <= 2 {
				return nil, errors.New("nats: no servers available for connection")
			}
			return pub, nil
		})
		if n := opens.Load(); n != 3 {
			t.Errorf("broker opened %d times, want 3", n)
		}
		if n := strings.Count(logs, `level=WARN msg="relay: cannot reach the broker; retrying"`); n != 2 {
			t.Errorf("%d WARN lines about the broker, want 2:\n%s", n, logs)
		}
	})
	t.Run("broker that opens but does not answer", func(t *testing.T) {
		// kafka:// opens without contacting the broker: the relay pings it
		// and takes no shard until it answers (found by a new user: a
		// closed port took the shards and /readyz said 200).
		d := sqliteDB(t)
		d.write(t, "o1")
		pub := &pingingRecorder{recorder: newRecorder()}
		pub.fail.Store(2)
		logs := relayUntilPublished(t, d, "kafka://127.0.0.1:9", pub.recorder, func() (message.Publisher, error) { return pub, nil })
		if n := pub.pings.Load(); n != 3 {
			t.Errorf("broker pinged %d times, want 3 (two refused, then one answered)", n)
		}
		if n := strings.Count(logs, `level=WARN msg="relay: cannot reach the broker; retrying"`); n != 2 {
			t.Errorf("%d WARN lines about the broker, want 2:\n%s", n, logs)
		}
		if i, j := strings.Index(logs, "cannot reach the broker"), strings.LastIndex(logs, "relay: started"); i < 0 || j < i {
			t.Errorf("the relay started before its broker answered:\n%s", logs)
		}
	})
	t.Run("database", func(t *testing.T) {
		// --listen answers while it waits: alive (a restart would not
		// help), not ready (found by a new user's trial: nothing listened,
		// so a liveness probe would restart it again and again).
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			code   int
			stderr string
		}
		done := make(chan result, 1)
		go func() {
			code, _, stderr := runCmdCtx(t, ctx, newRecorder(), "relay", "--db", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1",
				"--broker", "memory://", "--allow-local-broker", "--listen", addr)
			done <- result{code, stderr}
		}()
		status := func(path string) int {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				return 0
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		deadline := time.Now().Add(30 * time.Second)
		for status("/livez") != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatal("/livez not 200 within 30s while the relay waits for its database")
			}
			time.Sleep(10 * time.Millisecond) // polling the server
		}
		if got := status("/readyz"); got != http.StatusServiceUnavailable {
			t.Errorf("/readyz = %d while waiting, want 503", got)
		}
		// Tries are 1s apart: give it two, then a signal. It must not
		// return by itself meanwhile.
		select {
		case r := <-done:
			t.Fatalf("relay returned while its database is down: exit %d: %s", r.code, r.stderr)
		case <-time.After(1500 * time.Millisecond):
		}
		cancel()
		r := <-done
		if r.code != 0 {
			t.Errorf("exit %d after a signal while waiting, want 0: %s", r.code, r.stderr)
		}
		if n := strings.Count(r.stderr, `level=WARN msg="relay: cannot reach the database; retrying"`); n < 2 {
			t.Errorf("%d WARN lines about the database, want at least 2:\n%s", n, r.stderr)
		}
	})
	t.Run("bad broker URL", func(t *testing.T) {
		d := sqliteDB(t)
		var out, errOut bytes.Buffer
		e := &env{ctx: context.Background(), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" },
			openPublisher: openBroker}
		if code := e.run([]string{"relay", "--db", d.url, "--broker", "nats://127.0.0.1:4222?replicas=x"}); code == 0 {
			t.Fatalf("exit 0 with a bad broker URL")
		}
		if strings.Contains(errOut.String(), "retrying") || !strings.Contains(errOut.String(), "replicas") {
			t.Errorf("a bad URL was retried or not named:\n%s", errOut.String())
		}
	})
}

// TestPublishedRowsEarlierError: a published row keeps the error of its
// last failed attempt; "list" leaves it out of the row, which it does not
// describe any more, and "show" labels it as earlier (a new user's trial
// read "published ... last error NO_ROUTE" as a failure).
func TestPublishedRowsEarlierError(t *testing.T) {
	t.Parallel()
	d := sqliteDB(t)
	d.write(t, "o1")
	ids := d.settle(t, []string{"o1"}, nil, nil)
	if _, err := d.db.Exec(`UPDATE outbox_messages SET last_error = 'amqp: NO_ROUTE' WHERE id = ?`, ids["o1"]); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, nil, "list", "--db", d.url)
	if code != 0 || !strings.Contains(stdout, "published") || strings.Contains(stdout, "NO_ROUTE") {
		t.Errorf("list: exit %d, stdout:\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCmd(t, nil, "parked", "show", strconv.FormatInt(ids["o1"], 10), "--db", d.url)
	if code != 0 || !strings.Contains(stdout, "last error before it was published") || !strings.Contains(stdout, "NO_ROUTE") {
		t.Errorf("parked show: exit %d, stdout:\n%s%s", code, stdout, stderr)
	}
}

// TestListSaysWhatAHeldRowWaitsFor: a pending row behind a parked row of its
// aggregate says, in list, show and --json, which row holds it back and
// how to free it (found by a new user: it showed 0 attempts and no error).
func TestListSaysWhatAHeldRowWaitsFor(t *testing.T) {
	t.Parallel()
	d := sqliteDB(t)
	d.write(t, "o1")
	ids := d.settle(t, nil, nil, []string{"o1"})
	held := d.write(t, "o1")
	parked := ids["o1"]
	want := fmt.Sprintf("waits for parked row %d", parked)
	code, stdout, stderr := runCmd(t, nil, "list", "--db", d.url, "--state", "pending")
	if code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("list: exit %d, stdout:\n%s\nstderr: %s\nwant %q", code, stdout, stderr, want)
	}
	code, stdout, _ = runCmd(t, nil, "list", "--db", d.url, "--event-id", held[0], "--json")
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf(`"blocked_by": %d`, parked)) {
		t.Errorf("list --json: exit %d, want blocked_by %d:\n%s", code, parked, stdout)
	}
	var heldID int64
	entries, err := d.store.Entries(context.Background(), sqlstore.Query{State: sqlstore.StatePending})
	if err != nil || len(entries) != 1 {
		t.Fatalf("pending entries: %v, %v", entries, err)
	}
	heldID = entries[0].ID
	code, stdout, _ = runCmd(t, nil, "parked", "show", strconv.FormatInt(heldID, 10), "--db", d.url)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("outbox parked retry %d", parked)) {
		t.Errorf("parked show %d: exit %d, want the retry hint for row %d:\n%s", heldID, code, parked, stdout)
	}
}
