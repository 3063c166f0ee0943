package hooks_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestPayloadKeepsNUL: a NUL character in a string field is valid JSON
// (\u0000) and must neither fail the business save on PostgreSQL (a JSONB
// column refuses it) nor change on its way to the relay.
func TestPayloadKeepsNUL(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		o := &Order{}
		o.Pay("card\x00visa")
		if err := db.Create(o).Error; err != nil {
			t.Fatalf("Create with a NUL in a string field: %v", err)
		}
		got := claimUntil(t, newStore(t, db), "x", 1)
		if want := `"method":"card\u0000visa"`; !strings.Contains(string(got[0].Payload), want) {
			t.Errorf("payload %s does not contain %s", got[0].Payload, want)
		}
	})
}

// TestTableNameLimits: a table name whose derived names would not fit in
// PostgreSQL's 63-byte identifiers is refused up front, naming the limit,
// instead of silently losing indexes (55 bytes) or breaking every write
// (63); the longest accepted name works end to end.
func TestTableNameLimits(t *testing.T) {
	t.Parallel()
	for _, name := range []string{strings.Repeat("t", 50), strings.Repeat("t", 55), strings.Repeat("t", 63), "s." + strings.Repeat("t", 60)} {
		if _, err := sqlstore.OutboxDDL(sqlstore.Postgres, name); !errors.Is(err, sqlstore.ErrInvalidTable) || !strings.Contains(err.Error(), "49") {
			t.Errorf("DDL(%q) = %v, want ErrInvalidTable naming the 49-byte limit", name, err)
		}
		if _, err := hooks.New(hooks.Config{Table: name}); !errors.Is(err, sqlstore.ErrInvalidTable) {
			t.Errorf("New(Table %q) = %v, want ErrInvalidTable", name, err)
		}
	}
	longest := strings.Repeat("t", 49)
	eachDB(t, nil, hooks.Config{Table: longest}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		if err := hooks.Migrate(context.Background(), db, longest); err != nil {
			t.Fatalf("Migrate(%d bytes): %v", len(longest), err)
		}
		var indexes int64
		if db.Dialector.Name() == "postgres" {
			db.Raw(`SELECT count(*) FROM pg_indexes WHERE tablename IN (?, ?)`, longest, longest+"_queue").Scan(&indexes)
			if indexes != 5 { // primary key, event_id, blocked, parked; the queue's primary key
				t.Errorf("%d indexes on %s and its queue, want 5", indexes, longest)
			}
		}
		o := &Order{}
		o.Place(1)
		if err := db.Create(o).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		s, err := sqlstore.NewStore(databasesql.New(sqlDBOf(t, db)), sqlstore.StoreConfig{Table: longest})
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Claim(context.Background(), relay.ClaimRequest{Owner: "x", Limit: 10})
		if err != nil || len(b.Messages) != 1 {
			t.Fatalf("Claim = %v, %v; want the order's event", b.Messages, err)
		}
	})
}

// TestEventTooLarge: an event over MaxEventBytes fails the save with a typed
// error naming the event, and the save rolls back.
func TestEventTooLarge(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{MaxEventBytes: 100}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		o := &Order{}
		o.Pay(strings.Repeat("x", 200))
		err := db.Create(o).Error
		var tooLarge *sqlstore.EventTooLargeError
		if !errors.As(err, &tooLarge) || tooLarge.EventType != "orders.order_paid" || tooLarge.Limit != 100 || tooLarge.Size <= 200 {
			t.Fatalf("Create = %v, want an *EventTooLargeError for orders.order_paid over 100 bytes", err)
		}
		var orders int64
		db.Model(&Order{}).Count(&orders)
		if orders != 0 || len(rows(t, db)) != 0 {
			t.Errorf("after the failed save: %d orders, %d outbox rows; want none", orders, len(rows(t, db)))
		}
		if _, err := p.Enqueue(db, "order", "1", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: strings.Repeat("y", 200)}); !errors.As(err, &tooLarge) {
			t.Errorf("Enqueue = %v, want an *EventTooLargeError", err)
		}
	})
}

// TestInvalidTopicFailsTheSave: with ValidateTopic (here Kafka's rules), a
// save whose event's topic the broker would never take fails with a
// *sqlstore.TopicError naming the event and the topic, and rolls back.
func TestInvalidTopicFailsTheSave(t *testing.T) {
	t.Parallel()
	cfg := hooks.Config{
		Topic:         func(runtime.Envelope) string { return "order events" },
		ValidateTopic: kafka.ValidateTopic,
	}
	eachDB(t, nil, cfg, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		o := &Order{}
		o.Pay("card")
		err := db.Create(o).Error
		var te *sqlstore.TopicError
		var we *hooks.WriteError
		if !errors.As(err, &te) || !errors.As(err, &we) || te.Topic != "order events" || te.EventType != "orders.order_paid" || !errors.Is(err, kafka.ErrInvalidTopic) {
			t.Fatalf("Create = %v, want a *WriteError wrapping a *sqlstore.TopicError for orders.order_paid on %q", err, "order events")
		}
		var orders int64
		db.Model(&Order{}).Count(&orders)
		if orders != 0 || len(rows(t, db)) != 0 {
			t.Errorf("after the failed save: %d orders, %d outbox rows; want none", orders, len(rows(t, db)))
		}
	})
}

// TestMigrateInTransaction: hooks.Migrate in a GORM transaction (a
// migration tool's step) runs in it, as a savepoint, and is undone with it;
// on SQLite a second connection would wait for the transaction's lock.
func TestMigrateInTransaction(t *testing.T) {
	t.Parallel()
	db := openDB(t, "sqlite", nil)
	ctx := context.Background()
	errRollback := errors.New("roll back")
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := hooks.Migrate(ctx, tx, ""); err != nil {
			return err
		}
		if err := tx.Exec(`SELECT count(*) FROM outbox_messages`).Error; err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("Transaction = %v, want the rollback", err)
	}
	if err := db.Exec(`SELECT count(*) FROM outbox_messages`).Error; err == nil {
		t.Errorf("the outbox table outlived the rolled-back transaction that migrated it")
	}
}

// TestMigrateNilDB: a nil *gorm.DB is a typed error, not a panic.
func TestMigrateNilDB(t *testing.T) {
	t.Parallel()
	if err := hooks.Migrate(context.Background(), nil, ""); !errors.Is(err, sqlstore.ErrInvalidConfig) {
		t.Fatalf("Migrate(nil) = %v, want an error wrapping sqlstore.ErrInvalidConfig", err)
	}
}
