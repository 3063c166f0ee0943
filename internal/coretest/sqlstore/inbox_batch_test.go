package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestInboxRecordBatch: RecordBatch inserts the markers it has not seen,
// reports each entry's, and reports false for an event applied before, for
// a repeat within the batch, and for another consumer's event only under
// that consumer; a rolled-back batch leaves no marker.
func TestInboxRecordBatch(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openSQL(t, d)
			if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: d, Inbox: true}); err != nil {
				t.Fatal(err)
			}
			inbox, err := sqlstore.NewInbox(d, "", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]uuid.UUID, 4)
			for i := range ids {
				ids[i] = uuid.Must(uuid.NewV7())
			}
			entry := func(i int) sqlstore.InboxEntry { return sqlstore.InboxEntry{EventID: ids[i], EventType: "t"} }
			mark := func(consumer string, commit bool, entries ...sqlstore.InboxEntry) []bool {
				t.Helper()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := inbox.RecordBatch(ctx, databasesql.Executor(tx), consumer, entries, time.Now())
				if err != nil {
					tx.Rollback()
					t.Fatalf("RecordBatch: %v", err)
				}
				end := tx.Rollback
				if commit {
					end = tx.Commit
				}
				if err := end(); err != nil && !errors.Is(err, sql.ErrTxDone) {
					t.Fatal(err)
				}
				return got
			}
			if diff := cmp.Diff([]bool{true, true}, mark("c", false, entry(0), entry(1))); diff != "" {
				t.Errorf("rolled-back batch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]bool{true, false}, mark("c", true, entry(0), entry(0))); diff != "" {
				t.Errorf("repeat within a batch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]bool{false, true, true, false}, mark("c", true, entry(0), entry(1), entry(2), entry(1))); diff != "" {
				t.Errorf("after a commit (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]bool{true, true}, mark("other", true, entry(0), entry(3))); diff != "" {
				t.Errorf("another consumer (-want +got):\n%s", diff)
			}
			var n int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+sqlstore.InboxDefaultTable).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 5 {
				t.Errorf("markers = %d, want 5", n)
			}
			if _, err := inbox.RecordBatch(ctx, databasesql.Executor(db), "c", make([]sqlstore.InboxEntry, sqlstore.MaxInboxBatch+1), time.Now()); err == nil {
				t.Error("RecordBatch over MaxInboxBatch: no error")
			}
		})
	}
}
