package sqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestSchemaDDLIsAMigration: the printed DDL, run as a migration tool runs
// it (statement by statement, once), creates tables a store and an inbox
// work on; the printed drops remove every one of them, and the DDL runs
// again after them: an up and a down migration, on each database.
func TestSchemaDDLIsAMigration(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openSQL(t, d)
			s := sqlstore.Schema{Dialect: d, Outbox: true, Inbox: true}
			up, err := s.DDL()
			if err != nil {
				t.Fatal(err)
			}
			down, err := s.DropDDL()
			if err != nil {
				t.Fatal(err)
			}
			exec := func(stmts []string) {
				t.Helper()
				for _, q := range stmts {
					if _, err := db.ExecContext(ctx, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
			}
			exec(up)
			writeEvents(t, db, d, "a")
			inbox, err := sqlstore.NewInbox(d, "", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := inbox.Count(ctx, databasesql.Executor(db), "c"); err != nil || n != 0 {
				t.Fatalf("inbox Count on the migrated table = %d, %v", n, err)
			}
			exec(down)
			if _, err := db.ExecContext(ctx, `SELECT 1 FROM outbox_messages`); err == nil {
				t.Fatal("the outbox table is still there after the drops")
			}
			exec(up) // the down migration left nothing behind that the up one trips on
		})
	}
}

// TestSchemaRefusesWhatItCannotDo: an empty schema, and printed DDL of a
// partitioned outbox (its partitions are made at run time), are typed
// errors.
func TestSchemaRefusesWhatItCannotDo(t *testing.T) {
	if _, err := (sqlstore.Schema{Dialect: sqlstore.Postgres}).DDL(); !errors.Is(err, sqlstore.ErrInvalidConfig) {
		t.Errorf("DDL of an empty schema = %v, want ErrInvalidConfig", err)
	}
	if err := sqlstore.Migrate(context.Background(), databasesql.New(openSQL(t, sqlstore.SQLite)), sqlstore.Schema{}); !errors.Is(err, sqlstore.ErrInvalidConfig) {
		t.Errorf("Migrate of an empty schema = %v, want ErrInvalidConfig", err)
	}
	s := sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true, Partitioned: &sqlstore.PartitionConfig{}}
	if _, err := s.DDL(); !errors.Is(err, sqlstore.ErrInvalidConfig) {
		t.Errorf("DDL of a partitioned outbox = %v, want ErrInvalidConfig", err)
	}
	s.Dialect = sqlstore.SQLite
	if err := sqlstore.Migrate(context.Background(), databasesql.New(openSQL(t, sqlstore.SQLite)), s); !errors.Is(err, sqlstore.ErrInvalidConfig) {
		t.Errorf("Migrate of a partitioned outbox on SQLite = %v, want ErrInvalidConfig", err)
	}
}
