package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// sqlstore.Store implements every optional part of the suite, so that every
// case runs on every database.
var (
	_ runtimetest.Parker      = (*sqlstore.Store)(nil)
	_ runtimetest.Discarder   = (*sqlstore.Store)(nil)
	_ runtimetest.StatsReader = (*sqlstore.Store)(nil)
	_ runtimetest.Retainer    = (*sqlstore.Store)(nil)
)

// TestStoreConformance runs the relay.Store conformance suite on every
// dialect through the database/sql driver (a pool opened without GORM),
// and on PostgreSQL through the native pgx driver too.
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			runtimetest.TestStore(t, func(t *testing.T) (relay.Store, func(...runtime.OutboxMessage) []int64) {
				db := migrated(t, d)
				return conformanceStore(t, d, databasesql.New(db), databasesql.Executor(db))
			})
		})
	}
	t.Run("postgres-pgx", func(t *testing.T) {
		t.Parallel()
		runtimetest.TestStore(t, func(t *testing.T) (relay.Store, func(...runtime.OutboxMessage) []int64) {
			pool := migratedPgx(t)
			return conformanceStore(t, sqlstore.Postgres, pool, pool)
		})
	})
}

// conformanceStore returns a store on db, with the suite's timings, and
// the suite's insert function, which inserts through ex.
func conformanceStore(t *testing.T, d sqlstore.Dialect, db sqlstore.DB, ex sqlstore.Executor) (relay.Store, func(...runtime.OutboxMessage) []int64) {
	tm := runtimetest.StoreTimings
	store, err := sqlstore.NewStore(db, sqlstore.StoreConfig{
		RetryDelay: tm.RetryDelay, MaxRetryDelay: tm.MaxRetryDelay, MaxAttempts: tm.MaxAttempts, LeaseTTL: tm.LeaseTTL,
	})

	if err != nil {
		t.Fatal(err)
	}
	// Released before the pool closes: pgxpool's Close waits for the
	// connections the store holds (a relay's session lock).
	t.Cleanup(func() { store.Close() })
	add := func(msgs ...runtime.OutboxMessage) []int64 {
		ids := make([]int64, 0, len(msgs))
		for _, m := range msgs {
			var headers any
			if h, err := sqlstore.EncodeHeaders(m.Headers); err != nil {
				t.Fatal(err)
			} else if h != "" {
				headers = h
			}
			payload := string(m.Payload)
			if payload == "" {
				payload = "{}"
			}
			insert := `INSERT INTO outbox_messages (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, shard)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
			if d == sqlstore.Postgres {
				insert = `INSERT INTO outbox_messages (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, shard)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`
			}
			args := []any{m.EventID.String(), m.EventType, m.EventVersion, m.AggregateType, m.AggregateID, m.Topic, payload, headers, m.OccurredAt,
				sqlstore.ShardOf(m.AggregateType, m.AggregateID)}
			var id int64
			var err error
			if d == sqlstore.MySQL { // MySQL 8 has no RETURNING
				var res sqlstore.Result
				if res, err = ex.ExecContext(context.Background(), insert, args...); err == nil {
					id, err = res.(sql.Result).LastInsertId()
				}
			} else {
				err = ex.QueryRowContext(context.Background(), insert+` RETURNING id`, args...).Scan(&id)
			}
			if err != nil {
				t.Fatalf("insert %+v: %v", m, err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	return store, add
}
