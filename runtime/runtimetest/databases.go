package runtimetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The database fixtures open their admin connections through database/sql
// by driver name, so that this package imports no database driver: the
// test binary registers the driver, by importing it.

// DefaultPostgresDSN is the PostgreSQL used when OUTBOX_TEST_POSTGRES_DSN is
// unset.
const DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// RequireIntegration reports whether OUTBOX_TEST_REQUIRE_INTEGRATION=1, in
// which case a missing service fails a test instead of skipping it.
func RequireIntegration() bool { return os.Getenv("OUTBOX_TEST_REQUIRE_INTEGRATION") == "1" }

// PostgresBaseDSN returns OUTBOX_TEST_POSTGRES_DSN or [DefaultPostgresDSN].
func PostgresBaseDSN() string {
	if dsn := os.Getenv("OUTBOX_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return DefaultPostgresDSN
}

// Unavailable ends t for a service (what, at addr) that does not answer: it
// skips, naming the address and the environment variable that selects
// another, or, when OUTBOX_TEST_REQUIRE_INTEGRATION=1, fails.
func Unavailable(t testing.TB, what, addr, envVar string, err error) {
	t.Helper()
	if RequireIntegration() {
		t.Fatalf("%s at %s is required (OUTBOX_TEST_REQUIRE_INTEGRATION=1) but unreachable: %v", what, addr, err)
	}
	t.Skipf("%s at %s unreachable (set %s to use another): %v", what, addr, envVar, err)
}

// PostgresDSN creates a new schema in the test database and returns a DSN
// whose search_path is that schema, and whose sessions take the schema's
// name as their application_name; the schema is dropped when t ends.
//
// It connects through database/sql's driver "pgx": the test must import
// github.com/jackc/pgx/v5/stdlib (driver "pgx"), or PostgresDSN fails it.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	requireDriver(t, "PostgresDSN", "pgx", "github.com/jackc/pgx/v5/stdlib")
	base := PostgresBaseDSN()
	admin := openAdmin(t, "pgx", base, "PostgreSQL", redact(base), "OUTBOX_TEST_POSTGRES_DSN")
	schema := "outbox_test_" + randomHex(6)
	if _, err := admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		admin.Close()
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		// A store's lease renewal may still run in the background (the
		// test did not release it): the DROP and its transaction can
		// deadlock, and PostgreSQL then aborts one of them. Again, then.
		_, err := admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
		for range 5 {
			if !isDeadlock(err) {
				break
			}
			_, err = admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
		}
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	dsn, err := schemaDSN(base, schema)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// schemaDSN returns base with search_path set to schema; its sessions take
// the schema's name as their application_name (unless base sets one), so
// that a test can tell its own sessions from those of the tests running
// beside it in the database (pg_stat_activity.application_name).
func schemaDSN(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", redact(base), err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	if q.Get("application_name") == "" {
		q.Set("application_name", schema)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// isDeadlock reports whether err is PostgreSQL's deadlock_detected (SQLSTATE
// 40P01), read through the SQLState method of the driver's error (pgx's
// *pgconn.PgError has it), so that this package need not import pgx.
func isDeadlock(err error) bool {
	var st interface{ SQLState() string }
	return errors.As(err, &st) && st.SQLState() == "40P01"
}

// DefaultMySQLDSN is the MySQL or MariaDB server used when
// OUTBOX_TEST_MYSQL_DSN is unset. Its database part is ignored: each test
// gets a database of its own.
const DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/?parseTime=true"

// MySQLBaseDSN returns OUTBOX_TEST_MYSQL_DSN or [DefaultMySQLDSN].
func MySQLBaseDSN() string {
	if dsn := os.Getenv("OUTBOX_TEST_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return DefaultMySQLDSN
}

// MySQLDSN creates a new database (outbox_test_<hex>) on the test MySQL or
// MariaDB server and returns a DSN for it, with what the outbox needs:
// parseTime=true, and clientFoundRows=true, so that an UPDATE reports the
// rows it matched, as on PostgreSQL, and not only those it changed (GORM's
// Save and the plugin read "no row affected" as "no such row"). The
// database is dropped when t ends.
//
// It connects through database/sql's driver "mysql": the test must import
// github.com/go-sql-driver/mysql (driver "mysql"), or MySQLDSN fails it.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	requireDriver(t, "MySQLDSN", "mysql", "github.com/go-sql-driver/mysql")
	base := MySQLBaseDSN()
	adminDSN, err := mysqlDSNFor(base, "")
	if err != nil {
		t.Fatalf("parse OUTBOX_TEST_MYSQL_DSN: %v", err)
	}
	admin := openAdmin(t, "mysql", adminDSN, "MySQL", mysqlAddr(base), "OUTBOX_TEST_MYSQL_DSN")
	name := "outbox_test_" + randomHex(6)
	if _, err := admin.Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4"); err != nil {
		admin.Close()
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		admin.Close()
	})
	dsn, err := mysqlDSNFor(base, name)
	if err != nil {
		t.Fatalf("parse OUTBOX_TEST_MYSQL_DSN: %v", err)
	}
	return dsn
}

// mysqlDSNFor returns dsn, a DSN of github.com/go-sql-driver/mysql
// ([user[:password]@][net[(addr)]]/dbname[?param1=value1&...]), with the
// database dbname and the parameters parseTime=true and
// clientFoundRows=true; its other parameters are kept. It splits the DSN
// as the driver does: the database name follows the last '/' (a password
// or a socket path may hold one) and ends at the first '?' after it.
func mysqlDSNFor(dsn, dbname string) (string, error) {
	slash := strings.LastIndexByte(dsn, '/')
	if slash < 0 {
		return "", fmt.Errorf("invalid MySQL DSN: no '/' before the database name")
	}
	var params []string
	if _, query, ok := strings.Cut(dsn[slash+1:], "?"); ok {
		for p := range strings.SplitSeq(query, "&") {
			if p != "" {
				params = append(params, p)
			}
		}
	}
	for _, key := range []string{"parseTime", "clientFoundRows"} {
		i := slices.IndexFunc(params, func(p string) bool {
			k, _, _ := strings.Cut(p, "=")
			return k == key
		})
		if i < 0 {
			params = append(params, key+"=true")
		} else {
			params[i] = key + "=true"
		}
	}
	return dsn[:slash+1] + dbname + "?" + strings.Join(params, "&"), nil
}

// mysqlAddr returns the address of a go-sql-driver/mysql DSN, for messages
// (the driver's default when the DSN names none), without its password.
func mysqlAddr(dsn string) string {
	slash := strings.LastIndexByte(dsn, '/')
	if slash < 0 {
		return "(unparsable DSN)"
	}
	rest := dsn[:slash]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	netw, addr, ok := strings.Cut(rest, "(")
	if ok {
		return strings.TrimSuffix(addr, ")")
	}
	if netw == "unix" {
		return "/tmp/mysql.sock"
	}
	return "127.0.0.1:3306"
}

// SQLiteDSN returns the DSN gooutbox recommends for a SQLite file: WAL
// journal, a busy timeout, and foreign keys on.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
}

// requireDriver fails t, from the fixture fn, when no database/sql driver
// is registered under name: the test binary registers it by importing
// importPath.
func requireDriver(t testing.TB, fn, name, importPath string) {
	t.Helper()
	if !slices.Contains(sql.Drivers(), name) {
		t.Fatalf("runtimetest.%s: no database/sql driver %q is registered: the test must import %s (import _ %q)", fn, name, importPath, importPath)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("runtimetest: random: %v", err))
	}
	return hex.EncodeToString(b)
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}

// openAdmin opens the administrative connection of a test server (what, at
// addr, chosen by envVar) through driver, and ends t through [Unavailable]
// when the server does not answer within 5s.
func openAdmin(t testing.TB, driver, dsn, what, addr, envVar string) *sql.DB {
	t.Helper()
	admin, err := dial(driver, dsn)
	if err != nil {
		Unavailable(t, what, addr, envVar, err)
	}
	return admin
}

// dial opens a database through driver and pings it. A ping that fails
// otherwise than by a timeout (nothing listens at the address, a login the
// server refuses) is reported at once. One that times out (5s) is tried
// again until dialPatience has passed: a server that is there can take that
// long to answer a new connection under the load of the whole test run (two
// test binaries under the race detector and their relay processes on two
// cores), and a test that fails or skips on that would report the machine's
// load as a missing service. The database is closed again when the ping
// fails.
func dial(driver, dsn string) (*sql.DB, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(dialPatience)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return db, nil
		}
		if !timedOut(err) || !time.Now().Add(time.Second).Before(deadline) {
			db.Close()
			return nil, err
		}
		time.Sleep(time.Second) // the server answered nothing in time: ask again
	}
}

// dialPatience is how long dial keeps asking a server that does not answer.
const dialPatience = time.Minute

// timedOut reports whether err is a timeout (the context's deadline, or a
// network timeout), as opposed to an answer such as a refused connection.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) ||
		strings.Contains(err.Error(), "timeout")
}
