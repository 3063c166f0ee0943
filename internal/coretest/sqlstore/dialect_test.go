package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

func TestParseDialect(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]sqlstore.Dialect{
		"postgres": sqlstore.Postgres, "pgx": sqlstore.Postgres,
		"mysql":  sqlstore.MySQL,
		"sqlite": sqlstore.SQLite, "sqlite3": sqlstore.SQLite,
	} {
		if got, err := sqlstore.ParseDialect(name); err != nil || got != want {
			t.Errorf("ParseDialect(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"", "sqlserver", "Postgres", "mariadb"} {
		if got, err := sqlstore.ParseDialect(name); !errors.Is(err, sqlstore.ErrUnsupportedDialect) {
			t.Errorf("ParseDialect(%q) = %q, %v; want ErrUnsupportedDialect", name, got, err)
		}
	}
}

// TestDialectOf: the dialect is read from the driver of a real pool, for
// each driver the tests use (sql.Open does not connect, so this needs no
// server), and for GORM's SQLite pool; a driver it does not know is an
// error, not a guess.
func TestDialectOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		driver, dsn string
		want        sqlstore.Dialect
	}{
		{"pgx", "postgres://postgres@127.0.0.1:5432/test", sqlstore.Postgres},
		{"mysql", "root@tcp(127.0.0.1:3306)/test?parseTime=true", sqlstore.MySQL},
		{"sqlite", ":memory:", sqlstore.SQLite},
	} {
		db, err := sql.Open(c.driver, c.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := sqlstore.DialectOf(db); err != nil || got != c.want {
			t.Errorf("DialectOf(%s pool) = %q, %v; want %q", c.driver, got, err, c.want)
		}
		db.Close()
	}
	gormPool, err := hookstest.SQLite(t, nil).DB()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sqlstore.DialectOf(gormPool); err != nil || got != sqlstore.SQLite {
		t.Errorf("DialectOf(GORM's SQLite pool) = %q, %v; want sqlite", got, err)
	}

	unknown := sql.OpenDB(fakeConnector{})
	defer unknown.Close()
	if got, err := sqlstore.DialectOf(unknown); !errors.Is(err, sqlstore.ErrUnsupportedDialect) {
		t.Errorf("DialectOf(unknown driver) = %q, %v; want ErrUnsupportedDialect", got, err)
	}
	if _, err := sqlstore.NewStore(databasesql.New(unknown), sqlstore.StoreConfig{}); !errors.Is(err, sqlstore.ErrUnsupportedDialect) {
		t.Errorf("NewStore(unknown driver) = %v; want ErrUnsupportedDialect", err)
	}
	if _, err := sqlstore.NewStore(databasesql.New(unknown), sqlstore.StoreConfig{Dialect: sqlstore.SQLite}); err != nil {
		t.Errorf("NewStore(unknown driver, Dialect: sqlite) = %v; want a store", err)
	}
}

// fakeConnector is a driver the storage layer cannot know.
type fakeConnector struct{}

func (fakeConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("fake driver: no connections")
}
func (fakeConnector) Driver() driver.Driver { return fakeDriver{} }

type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("fake driver: no connections")
}

// TestCheckTable: the one identifier check of the outbox and inbox tables,
// with their different limits, and every entry point that takes a table
// name refuses what it refuses.
func TestCheckTable(t *testing.T) {
	t.Parallel()
	ok := []struct {
		name string
		max  int
	}{
		{"outbox_messages", sqlstore.MaxOutboxTableName},
		{"events.outbox", sqlstore.MaxOutboxTableName},
		{strings.Repeat("t", 49), sqlstore.MaxOutboxTableName},
		{strings.Repeat("s", 63) + "." + strings.Repeat("t", 49), sqlstore.MaxOutboxTableName},
		{strings.Repeat("t", 63), sqlstore.MaxInboxTableName},
		{"_Inbox2", sqlstore.MaxInboxTableName},
	}
	for _, c := range ok {
		if err := sqlstore.CheckTable(c.name, c.max); err != nil {
			t.Errorf("CheckTable(%q, %d) = %v; want nil", c.name, c.max, err)
		}
	}
	bad := []struct {
		name string
		max  int
		says string
	}{
		{strings.Repeat("t", 50), sqlstore.MaxOutboxTableName, "49"},
		{strings.Repeat("t", 64), sqlstore.MaxInboxTableName, "63"},
		{strings.Repeat("s", 64) + ".t", sqlstore.MaxInboxTableName, "schema"},
		{"a.b.c", sqlstore.MaxInboxTableName, "dot"},
		{"", sqlstore.MaxInboxTableName, "must match"},
		{"1abc", sqlstore.MaxOutboxTableName, "must match"},
		{"outbox; DROP TABLE x", sqlstore.MaxOutboxTableName, "must match"},
		{`"quoted"`, sqlstore.MaxOutboxTableName, "must match"},
	}
	for _, c := range bad {
		err := sqlstore.CheckTable(c.name, c.max)
		if !errors.Is(err, sqlstore.ErrInvalidTable) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("CheckTable(%q, %d) = %v; want ErrInvalidTable saying %q", c.name, c.max, err, c.says)
		}
	}

	outbox50, inbox64 := strings.Repeat("t", 50), strings.Repeat("t", 64)
	for what, err := range map[string]error{
		"OutboxDDL": func() error { _, err := sqlstore.OutboxDDL(sqlstore.Postgres, outbox50); return err }(),
		"NewWriter": func() error {
			_, err := sqlstore.NewWriter(sqlstore.Postgres, outbox50, sqlstore.WriterConfig{})
			return err
		}(),
		"NewStore": func() error {
			_, err := sqlstore.NewStore(databasesql.New(&sql.DB{}), sqlstore.StoreConfig{Dialect: sqlstore.Postgres, Table: outbox50})
			return err
		}(),
		"InboxDDL": func() error { _, err := sqlstore.InboxDDL(sqlstore.MySQL, inbox64); return err }(),
		"NewInbox": func() error { _, err := sqlstore.NewInbox(sqlstore.SQLite, inbox64, time.Second); return err }(),
	} {
		if !errors.Is(err, sqlstore.ErrInvalidTable) {
			t.Errorf("%s with a table name over its limit = %v; want ErrInvalidTable", what, err)
		}
	}
	// The inbox takes the names the outbox refuses for its derived names.
	if _, err := sqlstore.InboxDDL(sqlstore.Postgres, outbox50); err != nil {
		t.Errorf("InboxDDL(50-byte name) = %v; want statements", err)
	}
	for what, err := range map[string]error{
		"OutboxDDL": func() error { _, err := sqlstore.OutboxDDL("sqlserver", ""); return err }(),
		"InboxDDL":  func() error { _, err := sqlstore.InboxDDL("sqlserver", ""); return err }(),
		"NewWriter": func() error { _, err := sqlstore.NewWriter("sqlserver", "", sqlstore.WriterConfig{}); return err }(),
	} {
		if !errors.Is(err, sqlstore.ErrUnsupportedDialect) {
			t.Errorf("%s(sqlserver) = %v; want ErrUnsupportedDialect", what, err)
		}
	}
}
