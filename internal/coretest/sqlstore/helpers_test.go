package sqlstore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/glebarez/go-sqlite"  // the "sqlite" database/sql driver
	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

// dialects are the databases every store test runs on.
var dialects = []sqlstore.Dialect{sqlstore.SQLite, sqlstore.Postgres, sqlstore.MySQL}

// openSQL opens a fresh database of dialect d through database/sql alone
// (no GORM): a SQLite file, a PostgreSQL schema or a MySQL/MariaDB
// database of its own, closed (and dropped) when t ends.
func openSQL(t testing.TB, d sqlstore.Dialect) *sql.DB {
	t.Helper()
	var driver, dsn string
	switch d {
	case sqlstore.SQLite:
		driver, dsn = "sqlite", runtimetest.SQLiteDSN(filepath.Join(t.TempDir(), "outbox.db"))
	case sqlstore.MySQL:
		driver, dsn = "mysql", runtimetest.MySQLDSN(t)
	default:
		driver, dsn = "pgx", runtimetest.PostgresDSN(t)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", d, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// migrated is openSQL with the outbox table migrated.
func migrated(t testing.TB, d sqlstore.Dialect) *sql.DB {
	t.Helper()
	db := openSQL(t, d)
	if err := sqlstore.Migrate(context.Background(), databasesql.New(db), sqlstore.Schema{Dialect: d, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	return db
}

// migratedPgx opens a fresh PostgreSQL schema through pgx's own pool, the
// native driver, with the outbox table migrated.
func migratedPgx(t testing.TB) *pgxv5.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), runtimetest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	drv := pgxv5.New(pool)
	if err := sqlstore.Migrate(context.Background(), drv, sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	return drv
}

// writeEvents writes one event per aggregate id of aggregate type "order"
// through a Writer on db, outside any transaction.
func writeEvents(t testing.TB, db *sql.DB, d sqlstore.Dialect, aggIDs ...string) []sqlstore.Row {
	t.Helper()
	w, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rows := writeRows(aggIDs...)
	inserted, err := w.Write(context.Background(), databasesql.Executor(db), rows)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if len(inserted) != len(rows) {
		t.Fatalf("Write inserted %d of %d new rows", len(inserted), len(rows))
	}
	return rows
}

// writeRows returns one new event per aggregate id of aggregate type
// "order", to write.
func writeRows(aggIDs ...string) []sqlstore.Row {
	rows := make([]sqlstore.Row, len(aggIDs))
	for i, id := range aggIDs {
		rows[i] = sqlstore.Row{Topic: "orders", Envelope: runtime.Envelope{
			EventID: runtime.NewEventID(), EventType: "orders.placed", EventVersion: 1,
			AggregateType: "order", AggregateID: id, OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
			Payload: []byte(`{"n":1}`),
		}}
	}
	return rows
}
