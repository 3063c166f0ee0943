package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestGooseMigrationApplies: the goose migration `outbox migrate --out DIR`
// writes, applied as goose applies an annotated SQL file (each statement
// between StatementBegin and StatementEnd, the Up section then the Down
// one), works on each database: after Up a relay's store claims what a
// writer wrote and the inbox answers; after Down the tables are gone. (goose
// itself is not a dependency: it would raise the SQLite driver's modules
// for every module of the workspace.)
func TestGooseMigrationApplies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ dialect sqlstore.Dialect }{{sqlstore.SQLite}, {sqlstore.Postgres}, {sqlstore.MySQL}} {
		t.Run(string(c.dialect), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := freshDB(t, c.dialect)
			dir := t.TempDir()
			code, stdout, stderr := runCmd(t, nil, "migrate", "--out", dir, "--format", "goose", "--version", "1", "--inbox", "--dialect", string(c.dialect))
			if code != 0 {
				t.Fatalf("migrate --out: exit %d: %s", code, stderr)
			}
			if want := filepath.Join(dir, "1_gooutbox.sql"); !strings.Contains(stdout, want) {
				t.Fatalf("stdout %q does not name %s", stdout, want)
			}
			data, err := os.ReadFile(filepath.Join(dir, "1_gooutbox.sql"))
			if err != nil {
				t.Fatal(err)
			}
			up, down := gooseSections(t, string(data))
			for _, q := range up {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("up: %s: %v", q, err)
				}
			}
			w, err := sqlstore.NewWriter(c.dialect, "", sqlstore.WriterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			env := runtime.Envelope{EventID: runtime.NewEventID(), EventType: "t", EventVersion: 1, AggregateType: "order", AggregateID: "1", Payload: []byte(`{}`)}
			if _, err := w.Write(ctx, databasesql.Executor(db), []sqlstore.Row{{Topic: "orders", Envelope: env}}); err != nil {
				t.Fatal(err)
			}
			store, err := sqlstore.NewStore(databasesql.NewWithDialect(db, c.dialect), sqlstore.StoreConfig{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "a", Limit: 10})
			if err != nil || len(b.Messages) != 1 {
				t.Fatalf("Claim after goose up = %v, %v; want the written event", b.Messages, err)
			}
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			inbox, err := sqlstore.NewInbox(c.dialect, "", 5e9)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := inbox.Count(ctx, databasesql.Executor(db), "c"); err != nil {
				t.Fatalf("inbox after goose up: %v", err)
			}
			for _, q := range down {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("down: %s: %v", q, err)
				}
			}
			for _, table := range []string{"outbox_messages", "outbox_messages_leases", "outbox_messages_relays", "outbox_inbox"} {
				if _, err := db.ExecContext(ctx, `SELECT 1 FROM `+table); err == nil {
					t.Errorf("table %s is still there after goose down", table)
				}
			}
		})
	}
}

// TestMigrationFiles: --print writes the schema's statements (sql, or a
// goose file), --out with golang-migrate its up and down files, and
// neither opens a database; what cannot be printed is a flag error.
func TestMigrationFiles(t *testing.T) {
	t.Parallel()
	up, err := sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}.DDL()
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, nil, "migrate", "--print", "--db", "postgres://nobody@127.0.0.1:1/none")
	if code != 0 {
		t.Fatalf("--print: exit %d: %s", code, stderr)
	}
	if stdout != sqlFile(up) {
		t.Errorf("--print wrote\n%s\nwant the schema's DDL", stdout)
	}
	dir := t.TempDir()
	if code, _, stderr := runCmd(t, nil, "migrate", "--out", dir, "--format", "golang-migrate", "--version", "000001", "--dialect", "mysql", "--inbox"); code != 0 {
		t.Fatalf("--out golang-migrate: exit %d: %s", code, stderr)
	}
	for _, name := range []string{"000001_gooutbox.up.sql", "000001_gooutbox.down.sql"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.Contains(string(data), "outbox_inbox") {
			t.Errorf("%s: %v, %q; want a file naming the inbox table", name, err, data)
		}
	}
	if code, _, stderr := runCmd(t, nil, "migrate", "--out", dir, "--format", "golang-migrate", "--version", "000001", "--dialect", "mysql"); code == 0 {
		t.Error("--out over an existing migration: exit 0, want a failure (it is not rewritten)")
	} else if !strings.Contains(stderr, "exists") {
		t.Errorf("--out over an existing migration: stderr %q, want it to say the file exists", stderr)
	}
	for _, args := range [][]string{
		{"--print", "--format", "golang-migrate", "--dialect", "sqlite"},
		{"--print", "--dialect", "oracle"},
		{"--print"},
		{"--print", "--dialect", "postgres", "--partition-interval", "24h"},
	} {
		if code, _, _ := runCmd(t, nil, append([]string{"migrate"}, args...)...); code == 0 {
			t.Errorf("migrate %v: exit 0, want a usage error", args)
		}
	}
}

// gooseSections returns the statements of a goose file's Up and Down
// sections, as goose reads an annotated file: "-- +goose Up" and
// "-- +goose Down" start the sections, and each statement stands between
// "-- +goose StatementBegin" and "-- +goose StatementEnd".
func gooseSections(t *testing.T, file string) (up, down []string) {
	t.Helper()
	var section *[]string
	var stmt *strings.Builder
	for _, line := range strings.Split(file, "\n") {
		switch strings.TrimSpace(line) {
		case "-- +goose Up":
			section = &up
		case "-- +goose Down":
			section = &down
		case "-- +goose StatementBegin":
			stmt = &strings.Builder{}
		case "-- +goose StatementEnd":
			if section == nil || stmt == nil {
				t.Fatalf("a statement outside a section or never begun:\n%s", file)
			}
			*section = append(*section, strings.TrimSuffix(strings.TrimSpace(stmt.String()), ";"))
			stmt = nil
		default:
			if stmt != nil {
				stmt.WriteString(line + "\n")
			} else if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "--") {
				t.Fatalf("SQL outside StatementBegin/End: %q", line)
			}
		}
	}
	if len(up) == 0 || len(down) == 0 {
		t.Fatalf("a goose file with %d up and %d down statements:\n%s", len(up), len(down), file)
	}
	return up, down
}

// freshDB opens a new, empty database of dialect d.
func freshDB(t *testing.T, d sqlstore.Dialect) *sql.DB {
	t.Helper()
	var driver, dsn string
	switch d {
	case sqlstore.SQLite:
		driver, dsn = "sqlite", filepath.Join(t.TempDir(), "outbox.db")
	case sqlstore.Postgres:
		driver, dsn = "pgx", hookstest.PostgresDSN(t)
	case sqlstore.MySQL:
		cfg, err := mysql.ParseDSN(hookstest.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		driver, dsn = "mysql", cfg.FormatDSN()
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
