package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

func TestMySQLDSNFor(t *testing.T) {
	cases := []struct{ dsn, dbname, want, addr string }{
		{DefaultMySQLDSN, "outbox_test_1",
			"root@tcp(127.0.0.1:3306)/outbox_test_1?parseTime=true&clientFoundRows=true", "127.0.0.1:3306"},
		{DefaultMySQLDSN, "",
			"root@tcp(127.0.0.1:3306)/?parseTime=true&clientFoundRows=true", "127.0.0.1:3306"},
		{"user:pa/ss@word@tcp(db:3307)/app", "x",
			"user:pa/ss@word@tcp(db:3307)/x?parseTime=true&clientFoundRows=true", "db:3307"},
		{"u@tcp(h:1)/app?charset=utf8mb4&parseTime=false&loc=Europe%2FParis&clientFoundRows=false&", "x",
			"u@tcp(h:1)/x?charset=utf8mb4&parseTime=true&loc=Europe%2FParis&clientFoundRows=true", "h:1"},
		{"root@unix(/var/run/mysqld/mysqld.sock)/app?timeout=5s", "x",
			"root@unix(/var/run/mysqld/mysqld.sock)/x?timeout=5s&parseTime=true&clientFoundRows=true", "/var/run/mysqld/mysqld.sock"},
		{"/", "x", "/x?parseTime=true&clientFoundRows=true", "127.0.0.1:3306"},
		{"root@tcp/app", "x", "root@tcp/x?parseTime=true&clientFoundRows=true", "127.0.0.1:3306"},
	}
	for _, c := range cases {
		got, err := mysqlDSNFor(c.dsn, c.dbname)
		if err != nil || got != c.want {
			t.Errorf("mysqlDSNFor(%q, %q) = %q, %v; want %q", c.dsn, c.dbname, got, err, c.want)
		}
		if got := mysqlAddr(c.dsn); got != c.addr {
			t.Errorf("mysqlAddr(%q) = %q; want %q", c.dsn, got, c.addr)
		}
	}
	if got, err := mysqlDSNFor("root@tcp(127.0.0.1:3306)", "x"); err == nil {
		t.Errorf("mysqlDSNFor without a '/' = %q, nil; want an error", got)
	}
}

type sqlStateError string

func (e sqlStateError) Error() string    { return "SQLSTATE " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

func TestIsDeadlock(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("40P01"), false},
		{sqlStateError("40001"), false},
		{sqlStateError("40P01"), true},
		{fmt.Errorf("drop: %w", sqlStateError("40P01")), true},
	} {
		if got := isDeadlock(c.err); got != c.want {
			t.Errorf("isDeadlock(%v) = %v; want %v", c.err, got, c.want)
		}
	}
}

// fatalRecorder records the message of Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
}

// This package's test binary registers no database/sql driver.
func TestRequireDriverNamesTheImport(t *testing.T) {
	r := &fatalRecorder{TB: t}
	requireDriver(r, "PostgresDSN", "pgx", "github.com/jackc/pgx/v5/stdlib")
	want := `runtimetest.PostgresDSN: no database/sql driver "pgx" is registered: the test must import github.com/jackc/pgx/v5/stdlib (import _ "github.com/jackc/pgx/v5/stdlib")`
	if r.msg != want {
		t.Errorf("requireDriver failed with %q; want %q", r.msg, want)
	}
}

// TestTimedOut: dial asks a server again only after a timeout; a refused
// connection (nothing listens) must end it at once, or every local run
// without the service would wait a minute per test before skipping.
func TestTimedOut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, refused := net.Dial("tcp", addr)
	if refused == nil {
		t.Skip("something listens again on the port just closed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_, deadline := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	cases := []struct {
		err  error
		want bool
	}{
		{refused, false},
		{fmt.Errorf("failed to connect: %w", refused), false},
		{errors.New("FATAL: password authentication failed for user \"x\" (SQLSTATE 28P01)"), false},
		{deadline, true},
		{fmt.Errorf("failed to connect: %w", context.DeadlineExceeded), true},
		{errors.New("failed to connect to `user=postgres database=test`: 127.0.0.1:5432 (127.0.0.1): failed to receive message: timeout: context deadline exceeded"), true},
	}
	for _, c := range cases {
		if got := timedOut(c.err); got != c.want {
			t.Errorf("timedOut(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
