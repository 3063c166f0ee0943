// Package hookstest opens the GORM databases that the tests of gooutbox (and
// of applications using it) run against: a fresh PostgreSQL schema per test
// ([Postgres]), a fresh MySQL/MariaDB database per test ([MariaDB]), or a
// SQLite file per test ([SQLite]).
//
// It wraps the database fixtures of package runtime/runtimetest, which need
// no GORM ([runtimetest.PostgresDSN], [runtimetest.MySQLDSN],
// [runtimetest.SQLiteDSN], ...), with GORM openers; its DSN functions and
// constants are runtimetest's, kept here for the tests that use them. It
// imports GORM's drivers, which register the database/sql drivers "pgx" and
// "mysql" that runtimetest's fixtures connect through.
//
// PostgreSQL comes from OUTBOX_TEST_POSTGRES_DSN, by default the local server
// ([DefaultPostgresDSN]), and MySQL or MariaDB from OUTBOX_TEST_MYSQL_DSN
// ([DefaultMySQLDSN]). When the server does not answer, the test is skipped
// with a message naming the address, unless
// OUTBOX_TEST_REQUIRE_INTEGRATION=1, which CI sets: then the test fails.
//
// This package is a module of its own (go get
// github.com/gooutbox/outbox/hooks/hookstest), so that a program that uses
// the GORM plugin does not require the SQLite and MySQL drivers.
package hookstest

import (
	"path/filepath"
	"testing"

	"github.com/glebarez/sqlite"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// DefaultPostgresDSN is [runtimetest.DefaultPostgresDSN]: the PostgreSQL
// used when OUTBOX_TEST_POSTGRES_DSN is unset.
const DefaultPostgresDSN = runtimetest.DefaultPostgresDSN

// RequireIntegration is [runtimetest.RequireIntegration]: it reports whether
// OUTBOX_TEST_REQUIRE_INTEGRATION=1, in which case a missing service fails a
// test instead of skipping it.
func RequireIntegration() bool { return runtimetest.RequireIntegration() }

// PostgresBaseDSN is [runtimetest.PostgresBaseDSN]: it returns
// OUTBOX_TEST_POSTGRES_DSN or [DefaultPostgresDSN].
func PostgresBaseDSN() string { return runtimetest.PostgresBaseDSN() }

// Unavailable is [runtimetest.Unavailable]: it ends t for a service (what,
// at addr) that does not answer: it skips, naming the address and the
// environment variable that selects another, or, when
// OUTBOX_TEST_REQUIRE_INTEGRATION=1, fails.
func Unavailable(t testing.TB, what, addr, envVar string, err error) {
	t.Helper()
	runtimetest.Unavailable(t, what, addr, envVar, err)
}

// PostgresDSN is [runtimetest.PostgresDSN]: it creates a new schema in the
// test database and returns a DSN whose search_path is that schema, and
// whose sessions take the schema's name as their application_name; the
// schema is dropped when t ends.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return runtimetest.PostgresDSN(t)
}

// Postgres returns a GORM database on a fresh schema of the test PostgreSQL
// (see [PostgresDSN]), closed when t ends.
func Postgres(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return open(t, postgres.Open(runtimetest.PostgresDSN(t)), cfg)
}

// DefaultMySQLDSN is [runtimetest.DefaultMySQLDSN]: the MySQL or MariaDB
// server used when OUTBOX_TEST_MYSQL_DSN is unset. Its database part is
// ignored: each test gets a database of its own.
const DefaultMySQLDSN = runtimetest.DefaultMySQLDSN

// MySQLBaseDSN is [runtimetest.MySQLBaseDSN]: it returns
// OUTBOX_TEST_MYSQL_DSN or [DefaultMySQLDSN].
func MySQLBaseDSN() string { return runtimetest.MySQLBaseDSN() }

// MySQLDSN is [runtimetest.MySQLDSN]: it creates a new database
// (outbox_test_<hex>) on the test MySQL or MariaDB server and returns a DSN
// for it, with parseTime=true and clientFoundRows=true (so that an UPDATE
// reports the rows it matched, and GORM's Save and the plugin do not read
// "no row affected" as "no such row"); the database is dropped when t ends.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	return runtimetest.MySQLDSN(t)
}

// MariaDB returns a GORM database on a fresh database of the test MySQL or
// MariaDB server (see [MySQLDSN]), closed when t ends.
func MariaDB(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return open(t, gormmysql.Open(runtimetest.MySQLDSN(t)), cfg)
}

// SQLite returns a GORM database on a new SQLite file in t.TempDir(), in WAL
// mode with a busy timeout, closed when t ends.
func SQLite(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return open(t, sqlite.Open(runtimetest.SQLiteDSN(filepath.Join(t.TempDir(), "outbox.db"))), cfg)
}

// SQLiteDSN is [runtimetest.SQLiteDSN]: it returns the DSN gooutbox
// recommends for a SQLite file: WAL journal, a busy timeout, and foreign
// keys on.
func SQLiteDSN(path string) string { return runtimetest.SQLiteDSN(path) }

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
