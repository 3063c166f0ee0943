package sqlstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// hooks.Store implements every optional part of the suite, so that every
// case runs on every database.
var (
	_ runtimetest.Parker      = (*hooks.Store)(nil)
	_ runtimetest.Discarder   = (*hooks.Store)(nil)
	_ runtimetest.StatsReader = (*hooks.Store)(nil)
	_ runtimetest.Retainer    = (*hooks.Store)(nil)
)

// TestStoreConformance runs the relay.Store conformance suite on every
// dialect.
func TestStoreConformance(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			runtimetest.TestStore(t, func(t *testing.T) (relay.Store, func(...runtime.OutboxMessage) []int64) {
				db := openDB(t, dialect, nil)
				if err := hooks.Migrate(context.Background(), db, ""); err != nil {
					t.Fatal(err)
				}
				tm := runtimetest.StoreTimings
				store, err := hooks.NewStore(db, hooks.StoreConfig{
					RetryDelay: tm.RetryDelay, MaxRetryDelay: tm.MaxRetryDelay, MaxAttempts: tm.MaxAttempts, LeaseTTL: tm.LeaseTTL,
				})
				if err != nil {
					t.Fatal(err)
				}
				add := func(msgs ...runtime.OutboxMessage) []int64 {
					ids := make([]int64, 0, len(msgs))
					for _, m := range msgs {
						var headers any
						if len(m.Headers) > 0 {
							h, _ := json.Marshal(m.Headers)
							headers = string(h)
						}
						payload := string(m.Payload)
						if payload == "" {
							payload = "{}"
						}
						var id int64
						const insert = `INSERT INTO outbox_messages (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, shard)
							VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
						args := []any{m.EventID.String(), m.EventType, m.EventVersion, m.AggregateType, m.AggregateID, m.Topic, payload, headers, m.OccurredAt,
							hooks.ShardOf(m.AggregateType, m.AggregateID)}
						var err error
						if dialect == "mysql" { // MySQL 8 has no RETURNING
							var res sql.Result
							if res, err = mustSQL(t, db).Exec(insert, args...); err == nil {
								id, err = res.LastInsertId()
							}
						} else {
							err = db.Raw(insert+` RETURNING id`, args...).Scan(&id).Error
						}
						if err != nil {
							t.Fatalf("insert %+v: %v", m, err)
						}
						ids = append(ids, id)
					}
					return ids
				}
				return store, add
			})
		})
	}
}

func mustSQL(t *testing.T, db *gorm.DB) *sql.DB {
	t.Helper()
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	return sqlDB
}
