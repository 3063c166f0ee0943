package sqlstore_test

import (
	"context"
	"testing"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestMigrateInCallersTransaction: MigrateOutboxTx and MigrateInboxTx run
// in the caller's transaction (a migration tool's step), so the tables
// exist only if it commits, on the databases whose DDL is transactional;
// MigrateOutbox and MigrateInbox then find them and change nothing.
func TestMigrateInCallersTransaction(t *testing.T) {
	t.Parallel()
	for _, d := range []sqlstore.Dialect{sqlstore.SQLite, sqlstore.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := openSQL(t, d)
			ctx := context.Background()
			exists := func() bool {
				_, err := db.ExecContext(ctx, `SELECT count(*) FROM outbox_messages, outbox_inbox`)
				return err == nil
			}
			for _, commit := range []bool{false, true} {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := sqlstore.MigrateOutboxTx(ctx, databasesql.Executor(tx), d, ""); err != nil {
					t.Fatal(err)
				}
				if err := sqlstore.MigrateInboxTx(ctx, databasesql.Executor(tx), d, ""); err != nil {
					t.Fatal(err)
				}
				if commit {
					err = tx.Commit()
				} else {
					err = tx.Rollback()
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := exists(); got != commit {
					t.Fatalf("tables exist = %v after the transaction (commit %v)", got, commit)
				}
			}
			if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Outbox: true}); err != nil {
				t.Errorf("MigrateOutbox again: %v", err)
			}
			if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Inbox: true}); err != nil {
				t.Errorf("MigrateInbox again: %v", err)
			}
		})
	}
}
