// Package hookstest opens the databases that the tests of gooutbox (and of
// applications using it) run against: a fresh PostgreSQL schema per test, a
// fresh MySQL/MariaDB database per test, or a SQLite file per test.
//
// PostgreSQL comes from OUTBOX_TEST_POSTGRES_DSN, by default the local server
// ([DefaultPostgresDSN]), and MySQL or MariaDB from OUTBOX_TEST_MYSQL_DSN
// ([DefaultMySQLDSN]). When the server does not answer, the test is skipped
// with a message naming the address, unless
// OUTBOX_TEST_REQUIRE_INTEGRATION=1, which CI sets: then the test fails.
package hookstest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

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

// unavailable skips or fails t for a PostgreSQL that does not answer.
func unavailable(t testing.TB, what, addr string, err error) {
	t.Helper()
	Unavailable(t, what, addr, "OUTBOX_TEST_POSTGRES_DSN", err)
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
func PostgresDSN(t testing.TB) string {
	t.Helper()
	base := PostgresBaseDSN()
	admin, err := gorm.Open(postgres.Open(base), &gorm.Config{Logger: logger.Discard})
	if err == nil {
		var sqlDB interface{ PingContext(context.Context) error }
		if sqlDB, err = admin.DB(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = sqlDB.PingContext(ctx)
			cancel()
		}
	}
	if err != nil {
		unavailable(t, "PostgreSQL", redact(base), err)
	}
	schema := "outbox_test_" + randomHex(6)
	if err := admin.Exec(`CREATE SCHEMA ` + schema).Error; err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		// A store's lease renewal may still run in the background (the
		// test did not release it): the DROP and its transaction can
		// deadlock, and PostgreSQL then aborts one of them. Again, then.
		err := admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`).Error
		for range 5 {
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "40P01" { // deadlock_detected
				break
			}
			err = admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`).Error
		}
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		if db, err := admin.DB(); err == nil {
			db.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", redact(base), err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	// The sessions of one test name the schema too, so that a test can
	// tell its own from those of the tests running beside it in the
	// database (pg_stat_activity.application_name).
	if q.Get("application_name") == "" {
		q.Set("application_name", schema)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Postgres returns a GORM database on a fresh schema of the test PostgreSQL
// (see [PostgresDSN]), closed when t ends.
func Postgres(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return open(t, postgres.Open(PostgresDSN(t)), cfg)
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
func MySQLDSN(t testing.TB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQLBaseDSN())
	if err != nil {
		t.Fatalf("parse OUTBOX_TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = ""
	cfg.ParseTime = true
	cfg.ClientFoundRows = true
	addr := cfg.Addr
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = admin.PingContext(ctx)
		cancel()
	}
	if err != nil {
		Unavailable(t, "MySQL", addr, "OUTBOX_TEST_MYSQL_DSN", err)
	}
	name := "outbox_test_" + randomHex(6)
	if _, err := admin.Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		admin.Close()
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// MariaDB returns a GORM database on a fresh database of the test MySQL or
// MariaDB server (see [MySQLDSN]), closed when t ends.
func MariaDB(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return open(t, gormmysql.Open(MySQLDSN(t)), cfg)
}

// SQLite returns a GORM database on a new SQLite file in t.TempDir(), in WAL
// mode with a busy timeout, closed when t ends.
func SQLite(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return open(t, sqlite.Open(SQLiteDSN(filepath.Join(t.TempDir(), "outbox.db"))), cfg)
}

// SQLiteDSN returns the DSN gooutbox recommends for a SQLite file: WAL
// journal, a busy timeout, and foreign keys on.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
}

func open(t testing.TB, d gorm.Dialector, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	if cfg == nil {
		cfg = &gorm.Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = logger.Discard
	}
	db, err := gorm.Open(d, cfg)
	if err != nil {
		t.Fatalf("open %s: %v", d.Name(), err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("hookstest: random: %v", err))
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
