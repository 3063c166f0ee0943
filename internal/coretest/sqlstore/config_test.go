package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestInvalidConfigIsTyped: every configuration the package rejects, and a
// nil *sql.DB, is an error wrapping ErrInvalidConfig that names the field;
// none panics (NewStore(nil, ...) used to, in DialectOf).
func TestInvalidConfigIsTyped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	retention := func(cfg sqlstore.RetentionConfig) error {
		_, err := sqlstore.NewRetention(nil, cfg)
		return err
	}
	cases := []struct {
		name, field string
		err         error
	}{
		{"NewStore nil db", "nil database", func() error { _, err := sqlstore.NewStore(databasesql.New(nil), sqlstore.StoreConfig{}); return err }()},
		{"DialectOf nil db", "nil database", func() error { _, err := sqlstore.DialectOf(nil); return err }()},
		{"MigrateOutbox nil db", "nil database", sqlstore.Migrate(ctx, databasesql.New(nil), sqlstore.Schema{Outbox: true})},
		{"MigrateOutbox nil db with dialect", "nil database", sqlstore.Migrate(ctx, databasesql.New(nil), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true})},
		{"MigrateInbox nil db", "nil database", sqlstore.Migrate(ctx, databasesql.New(nil), sqlstore.Schema{Dialect: sqlstore.SQLite, Inbox: true})},
		{"MigratePartitionedOutbox nil db", "nil database", sqlstore.Migrate(ctx, databasesql.New(nil), sqlstore.Schema{Outbox: true, Partitioned: &sqlstore.PartitionConfig{}})},
		{"negative LeaseTTL", "LeaseTTL", sqlstore.StoreConfig{LeaseTTL: -time.Second}.Validate()},
		{"negative MaxActiveRelays", "MaxActiveRelays", sqlstore.StoreConfig{MaxActiveRelays: -1}.Validate()},
		{"short LeaseTTL", "LeaseTTL", sqlstore.StoreConfig{LeaseTTL: time.Millisecond}.Validate()},
		{"partition Interval", "Interval", sqlstore.PartitionConfig{Interval: time.Second}.Validate()},
		{"partition Ahead", "Ahead", sqlstore.PartitionConfig{Ahead: -1}.Validate()},
		{"retention nothing to prune", "neither a store nor an inbox", retention(sqlstore.RetentionConfig{})},
		{"retention negative age", "PublishedAge", retention(sqlstore.RetentionConfig{PublishedAge: -time.Hour, Inbox: &sqlstore.Inbox{}, InboxDB: databasesql.New(&sql.DB{})})},
	}
	for _, c := range cases {
		if !errors.Is(c.err, sqlstore.ErrInvalidConfig) || !strings.Contains(c.err.Error(), c.field) {
			t.Errorf("%s: error %v; want one wrapping ErrInvalidConfig that names %q", c.name, c.err, c.field)
		}
	}
}

// TestCanNotify: only PostgreSQL stores can wake a relay; the relay polls
// the others from the start.
func TestCanNotify(t *testing.T) {
	t.Parallel()
	for d, want := range map[sqlstore.Dialect]bool{sqlstore.Postgres: true, sqlstore.MySQL: false, sqlstore.SQLite: false} {
		s, err := sqlstore.NewStore(databasesql.New(&sql.DB{}), sqlstore.StoreConfig{Dialect: d})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CanNotify(); got != want {
			t.Errorf("%s: CanNotify() = %v, want %v", d, got, want)
		}
	}
}
