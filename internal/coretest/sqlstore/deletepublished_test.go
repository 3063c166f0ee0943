package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestDeletePublishedConformance runs the relay.Store conformance suite on
// every dialect with StoreConfig.DeletePublished: marking a message
// published deletes its row, and everything the relay relies on (claims in
// order, retries, parking, leases and their fencing) holds as with the
// UPDATE.
func TestDeletePublishedConformance(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			runtimetest.TestStore(t, func(t *testing.T) (relay.Store, func(...runtime.OutboxMessage) []int64) {
				db := migrated(t, d)
				_, add := conformanceStore(t, d, databasesql.New(db), databasesql.Executor(db))
				tm := runtimetest.StoreTimings
				store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{
					RetryDelay: tm.RetryDelay, MaxRetryDelay: tm.MaxRetryDelay, MaxAttempts: tm.MaxAttempts, LeaseTTL: tm.LeaseTTL,
					DeletePublished: true,
				})

				if err != nil {
					t.Fatal(err)
				}
				return keepsNothing{Store: store}, add
			})
		})
	}
}

// keepsNothing is a store with DeletePublished, for the conformance suite:
// its DeletePublished field hides the Store's method of that name, so that
// the suite does not run its retention case (no published row is kept for
// retention to delete); every other optional part is the Store's.
type keepsNothing struct {
	*sqlstore.Store
	DeletePublished struct{}
}

// TestDeletePublishedDeletesOnlyPublishedRows: with DeletePublished a mark
// deletes the published rows and records the failed ones as usual; the
// table then holds only what is still to be sent.
func TestDeletePublishedDeletesOnlyPublishedRows(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := migrated(t, d)
			store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{DeletePublished: true})
			if err != nil {
				t.Fatal(err)
			}
			writeEvents(t, db, d, "a", "b", "a")
			b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "r1", Limit: 10})
			if err != nil || len(b.Messages) != 3 {
				t.Fatalf("Claim() = %d messages, %v; want 3", len(b.Messages), err)
			}
			var published []int64
			var failed relay.Failure
			for _, m := range b.Messages {
				if m.AggregateID == "a" {
					published = append(published, m.ID)
				} else {
					failed = relay.Failure{ID: m.ID, Err: errors.New("broker down")}
				}
			}
			if err := store.Mark(ctx, b, relay.Outcome{Published: published, Failed: []relay.Failure{failed}}); err != nil {
				t.Fatal(err)
			}
			rows := rowsLeft(t, db)
			if len(rows) != 1 || rows[0].id != failed.ID || rows[0].attempts != 1 {
				t.Fatalf("rows after the mark = %+v, want only the failed row %d with 1 attempt", rows, failed.ID)
			}
		})
	}
}

type leftRow struct {
	id       int64
	attempts int
}

// rowsLeft returns the outbox rows' ids and attempts.
func rowsLeft(t *testing.T, db *sql.DB) []leftRow {
	t.Helper()
	rs, err := db.Query(`SELECT id, attempts FROM outbox_messages ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []leftRow
	for rs.Next() {
		var r leftRow
		if err := rs.Scan(&r.id, &r.attempts); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
