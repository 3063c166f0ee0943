package hooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// OrderPlaced is a hand-written event, shaped like outboxgen's output.
type OrderPlaced struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Amount       float64   `json:"amount"`
}

func (OrderPlaced) EventKey() runtime.Key {
	return runtime.Key{Type: "orders.order_placed", Version: 1}
}
func (e OrderPlaced) EventTime() time.Time { return e.OccurredAt }
func (e OrderPlaced) Validate() error      { return nil }

type OrderPaid struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Method       string    `json:"method"`
}

func (OrderPaid) EventKey() runtime.Key  { return runtime.Key{Type: "orders.order_paid", Version: 2} }
func (e OrderPaid) EventTime() time.Time { return e.OccurredAt }
func (e OrderPaid) Validate() error {
	if e.Method == "" {
		return errors.New("method is required")
	}
	return nil
}

// Leak carries a channel: it cannot be marshalled.
type Leak struct {
	OccurredAt time.Time `json:"occurred_at"`
	C          chan int  `json:"c"`
}

func (Leak) EventKey() runtime.Key  { return runtime.Key{Type: "orders.leak", Version: 1} }
func (e Leak) EventTime() time.Time { return e.OccurredAt }
func (Leak) Validate() error        { return nil }

type Order struct {
	ID        int64 `gorm:"primaryKey"`
	Status    string
	DeletedAt gorm.DeletedAt `gorm:"index"`
	runtime.Recorder
}

func (o *Order) Place(amount float64) {
	o.Status = "placed"
	o.Record(OrderPlaced{EventVersion: 1, OccurredAt: now(), Amount: amount})
}

func (o *Order) Pay(method string) {
	o.Status = "paid"
	o.Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: method})
}

// Customer has a custom aggregate identity.
type Customer struct {
	Email string `gorm:"primaryKey"`
	Name  string
	runtime.Recorder
}

func (Customer) AggregateType() string { return "crm.customer" }

func now() time.Time { return runtime.OccurredAt(time.Now()) }

type row struct {
	ID            int64
	EventID       string
	EventType     string
	EventVersion  int
	AggregateType string
	AggregateID   string
	Topic         string
	Payload       string
	Headers       *string
}

func rows(t *testing.T, db *gorm.DB) []row {
	t.Helper()
	var out []row
	if err := db.Raw(`SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers FROM outbox_messages ORDER BY id`).Scan(&out).Error; err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	return out
}

func count(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Table(table).Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

type summary struct{ Type, Agg string }

func summarize(rs []row) []summary {
	out := make([]summary, 0, len(rs))
	for _, r := range rs {
		out = append(out, summary{r.EventType, r.AggregateType + "/" + r.AggregateID})
	}
	return out
}

// setup opens each database, migrates and registers a plugin.
func eachDB(t *testing.T, gcfg func() *gorm.Config, pcfg hooks.Config, fn func(t *testing.T, db *gorm.DB, p *hooks.Plugin)) {
	for _, name := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var c *gorm.Config
			if gcfg != nil {
				c = gcfg()
			}
			db := openDB(t, name, c)
			if err := hooks.Migrate(context.Background(), db, ""); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			if err := db.AutoMigrate(&Order{}, &Customer{}); err != nil {
				t.Fatalf("AutoMigrate: %v", err)
			}
			p, err := hooks.New(pcfg)
			if err != nil {
				t.Fatalf("hooks.New: %v", err)
			}
			if err := db.Use(p); err != nil {
				t.Fatalf("db.Use: %v", err)
			}
			fn(t, db, p)
		})
	}
}

// openDB opens a fresh database of a dialect: "sqlite", "postgres" or
// "mysql" (MariaDB here).
func openDB(t *testing.T, dialect string, c *gorm.Config) *gorm.DB {
	t.Helper()
	switch dialect {
	case "sqlite":
		return hookstest.SQLite(t, c)
	case "mysql":
		return hookstest.MariaDB(t, c)
	}
	return hookstest.Postgres(t, c)
}

func TestCommitWritesRows(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		ctx := runtime.WithCorrelationID(context.Background(), "corr-1")
		o := &Order{}
		o.Place(12.5)
		if err := db.WithContext(ctx).Create(o).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		if n := len(o.Events()); n != 0 {
			t.Errorf("pending events after committed Create = %d, want 0", n)
		}
		got := rows(t, db)
		if len(got) != 1 {
			t.Fatalf("outbox rows = %d, want 1", len(got))
		}
		r := got[0]
		want := row{ID: r.ID, EventID: r.EventID, EventType: "orders.order_placed", EventVersion: 1,
			AggregateType: "order", AggregateID: "1", Topic: "order", Payload: r.Payload, Headers: r.Headers}
		if diff := cmp.Diff(want, r); diff != "" {
			t.Errorf("row (-want +got):\n%s", diff)
		}
		var payload OrderPlaced
		if err := json.Unmarshal([]byte(r.Payload), &payload); err != nil {
			t.Fatalf("payload %q: %v", r.Payload, err)
		}
		if payload.Amount != 12.5 || payload.EventVersion != 1 || payload.OccurredAt.IsZero() {
			t.Errorf("payload = %+v", payload)
		}
		if r.Headers == nil || !json.Valid([]byte(*r.Headers)) {
			t.Fatalf("headers = %v, want JSON with the correlation id", r.Headers)
		}
		var h map[string]string
		_ = json.Unmarshal([]byte(*r.Headers), &h)
		if h[runtime.MetadataCorrelationID] != "corr-1" {
			t.Errorf("headers = %v, want correlation_id corr-1", h)
		}

		// A second event on the same aggregate, through Save.
		o.Pay("card")
		if err := db.Save(o).Error; err != nil {
			t.Fatalf("Save: %v", err)
		}
		want2 := []summary{{"orders.order_placed", "order/1"}, {"orders.order_paid", "order/1"}}
		if diff := cmp.Diff(want2, summarize(rows(t, db))); diff != "" {
			t.Errorf("rows after Save (-want +got):\n%s", diff)
		}
	})
}

func TestRollbackWritesNothingAndRetryWritesOnce(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		o := &Order{}
		o.Place(1)
		boom := errors.New("boom")
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(o).Error; err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Transaction = %v, want boom", err)
		}
		if n := count(t, db, "outbox_messages"); n != 0 {
			t.Fatalf("outbox rows after rollback = %d, want 0", n)
		}
		if n := count(t, db, "orders"); n != 0 {
			t.Fatalf("orders after rollback = %d, want 0", n)
		}
		if n := len(o.Events()); n != 1 {
			t.Fatalf("pending events after rollback = %d, want 1 (kept for the retry)", n)
		}
		// Retry the same in-memory aggregate: GORM kept the id it assigned.
		o.ID = 0
		if err := db.Create(o).Error; err != nil {
			t.Fatalf("retry Create: %v", err)
		}
		// And save again: nothing new.
		if err := db.Save(o).Error; err != nil {
			t.Fatalf("Save: %v", err)
		}
		got := rows(t, db)
		if len(got) != 1 {
			t.Fatalf("outbox rows = %d, want 1: %+v", len(got), got)
		}
	})
}

func TestTransactionTwoSavesWriteOnceAndCommitConfirms(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		o := &Order{}
		o.Place(3)
		stale := *o // a copy made before the save: same pending event, same id
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(o).Error; err != nil {
				return err
			}
			o.Status = "checked"
			return tx.Save(o).Error
		})
		if err != nil {
			t.Fatalf("Transaction: %v", err)
		}
		if n := count(t, db, "outbox_messages"); n != 1 {
			t.Fatalf("outbox rows = %d, want 1", n)
		}
		// The plugin sees db.Transaction commit: the event is confirmed.
		if n := len(o.Events()); n != 0 {
			t.Fatalf("pending events after db.Transaction = %d, want 0", n)
		}
		o.Pay("cash")
		if err := db.Save(o).Error; err != nil {
			t.Fatalf("Save: %v", err)
		}
		want := []summary{{"orders.order_placed", "order/1"}, {"orders.order_paid", "order/1"}}
		if diff := cmp.Diff(want, summarize(rows(t, db))); diff != "" {
			t.Errorf("rows (-want +got):\n%s", diff)
		}
		if n := len(o.Events()); n != 0 {
			t.Errorf("pending events after a committed Save = %d, want 0", n)
		}
		// The stale copy still holds the first event; saving it finds the
		// committed row, writes nothing and drops the event.
		stale.ID = o.ID
		if err := db.Save(&stale).Error; err != nil {
			t.Fatalf("Save(stale copy): %v", err)
		}
		if n := count(t, db, "outbox_messages"); n != 2 {
			t.Errorf("outbox rows = %d, want 2", n)
		}
		if n := len(stale.Events()); n != 0 {
			t.Errorf("stale copy pending = %d, want 0", n)
		}
	})
}

func TestNestedSavepointRollback(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		outer, inner := &Order{}, &Order{}
		outer.Place(1)
		inner.Place(2)
		boom := errors.New("inner failed")
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(outer).Error; err != nil {
				return err
			}
			if err := tx.Transaction(func(tx2 *gorm.DB) error {
				if err := tx2.Create(inner).Error; err != nil {
					return err
				}
				return boom
			}); !errors.Is(err, boom) {
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Transaction: %v", err)
		}
		want := []summary{{"orders.order_placed", "order/1"}}
		if diff := cmp.Diff(want, summarize(rows(t, db))); diff != "" {
			t.Errorf("rows (-want +got):\n%s", diff)
		}
		if n := count(t, db, "orders"); n != 1 {
			t.Errorf("orders = %d, want 1", n)
		}
	})
}

func TestSavepointRolledBackThenSavedAgainInOuter(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		o := &Order{}
		o.Place(1)
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(o).Error; err != nil {
				return err
			}
			_ = tx.Transaction(func(tx2 *gorm.DB) error {
				o.Pay("card")
				if err := tx2.Save(o).Error; err != nil {
					return err
				}
				return errors.New("undo the payment")
			})
			// The in-memory aggregate still says paid; saving it in the outer
			// transaction must write the payment event again.
			return tx.Save(o).Error
		})
		if err != nil {
			t.Fatalf("Transaction: %v", err)
		}
		want := []summary{{"orders.order_placed", "order/1"}, {"orders.order_paid", "order/1"}}
		if diff := cmp.Diff(want, summarize(rows(t, db))); diff != "" {
			t.Errorf("rows (-want +got):\n%s", diff)
		}
	})
}

func TestCreateSliceUpdatesDelete(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		orders := make([]Order, 3)
		for i := range orders {
			orders[i].Place(float64(i))
		}
		if err := db.Create(&orders).Error; err != nil {
			t.Fatalf("Create slice: %v", err)
		}
		more := []*Order{{}, {}}
		for _, o := range more {
			o.Place(9)
		}
		if err := db.CreateInBatches(more, 1).Error; err != nil {
			t.Fatalf("CreateInBatches: %v", err)
		}
		orders[0].Pay("card")
		if err := db.Model(&orders[0]).Updates(map[string]any{"status": "paid"}).Error; err != nil {
			t.Fatalf("Updates: %v", err)
		}
		orders[1].Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "refund"})
		if err := db.Delete(&orders[1]).Error; err != nil { // soft delete
			t.Fatalf("soft Delete: %v", err)
		}
		orders[2].Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "void"})
		if err := db.Unscoped().Delete(&orders[2]).Error; err != nil { // hard delete
			t.Fatalf("hard Delete: %v", err)
		}
		want := []summary{
			{"orders.order_placed", "order/1"}, {"orders.order_placed", "order/2"}, {"orders.order_placed", "order/3"},
			{"orders.order_placed", "order/4"}, {"orders.order_placed", "order/5"},
			{"orders.order_paid", "order/1"}, {"orders.order_paid", "order/2"}, {"orders.order_paid", "order/3"},
		}
		if diff := cmp.Diff(want, summarize(rows(t, db))); diff != "" {
			t.Errorf("rows (-want +got):\n%s", diff)
		}
		for i := range orders {
			if n := len(orders[i].Events()); n != 0 {
				t.Errorf("orders[%d] pending = %d, want 0", i, n)
			}
		}
	})
}

func TestUpdateMatchingNothingKeepsEvents(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		o := &Order{ID: 42}
		o.Pay("card")
		res := db.Model(o).Where("status = ?", "never").Updates(map[string]any{"status": "paid"})
		if res.Error != nil || res.RowsAffected != 0 {
			t.Fatalf("Updates = %v, %d rows", res.Error, res.RowsAffected)
		}
		if n := count(t, db, "outbox_messages"); n != 0 {
			t.Errorf("outbox rows = %d, want 0 for an update that changed nothing", n)
		}
		if n := len(o.Events()); n != 1 {
			t.Errorf("pending = %d, want 1", n)
		}
	})
}

func TestSkipDefaultTransactionStaysAtomic(t *testing.T) {
	t.Parallel()
	cfg := func() *gorm.Config { return &gorm.Config{SkipDefaultTransaction: true} }
	eachDB(t, cfg, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		o := &Order{}
		o.Place(1)
		if err := db.Create(o).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		if n := count(t, db, "outbox_messages"); n != 1 {
			t.Fatalf("outbox rows = %d, want 1", n)
		}
		if n := len(o.Events()); n != 0 {
			t.Errorf("pending = %d, want 0 (the plugin's own transaction committed)", n)
		}
		// A failing event: the business row must not stay behind.
		bad := &Order{}
		bad.Record(OrderPaid{EventVersion: 2, OccurredAt: now()}) // Method missing: invalid
		err := db.Create(bad).Error
		var ee *runtime.EncodeError
		if !errors.As(err, &ee) || ee.Key.Type != "orders.order_paid" {
			t.Fatalf("Create(invalid event) = %v, want *runtime.EncodeError naming orders.order_paid", err)
		}
		if n := count(t, db, "orders"); n != 1 {
			t.Errorf("orders = %d, want 1 (the failed save rolled back)", n)
		}
		// Without events, no transaction is needed and none is started.
		plain := &Order{Status: "quiet"}
		if err := db.Create(plain).Error; err != nil {
			t.Fatalf("Create without events: %v", err)
		}
	})
}

func TestUnmarshalablePayloadFailsSave(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		for _, tc := range []struct {
			name string
			evt  runtime.Event
			typ  string
		}{
			{"NaN", OrderPlaced{EventVersion: 1, OccurredAt: now(), Amount: math.NaN()}, "orders.order_placed"},
			{"channel", Leak{OccurredAt: now(), C: make(chan int)}, "orders.leak"},
		} {
			o := &Order{}
			o.Record(tc.evt)
			err := db.Create(o).Error
			var ee *runtime.EncodeError
			if !errors.As(err, &ee) || ee.Key.Type != tc.typ {
				t.Errorf("%s: Create = %v, want *runtime.EncodeError for %s", tc.name, err, tc.typ)
			}
			var we *hooks.WriteError
			if !errors.As(err, &we) {
				t.Errorf("%s: Create = %v, want a *hooks.WriteError", tc.name, err)
			}
		}
		if n := count(t, db, "orders"); n != 0 {
			t.Errorf("orders = %d, want 0", n)
		}
		if n := count(t, db, "outbox_messages"); n != 0 {
			t.Errorf("outbox rows = %d, want 0", n)
		}
	})
}

func TestCustomAggregateAndTopic(t *testing.T) {
	t.Parallel()
	pcfg := hooks.Config{Topic: func(env runtime.Envelope) string { return "events." + env.AggregateType }}
	eachDB(t, nil, pcfg, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		c := &Customer{Email: "a@example.com", Name: "A"}
		c.Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "x"})
		if err := db.Create(c).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		got := rows(t, db)
		if len(got) != 1 || got[0].AggregateType != "crm.customer" || got[0].AggregateID != "a@example.com" || got[0].Topic != "events.crm.customer" {
			t.Errorf("rows = %+v", got)
		}
	})
}

func TestOutboxInsertDoesNotRetriggerHooks(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	eachDB(t, nil, hooks.Config{AfterCommit: func() { calls.Add(1) }}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		var creates int
		if err := db.Callback().Create().After("outbox:write").Register("test:count", func(*gorm.DB) { creates++ }); err != nil {
			t.Fatal(err)
		}
		o := &Order{}
		o.Place(1)
		o.Pay("card")
		if err := db.Create(o).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		if calls.Load() == 0 {
			t.Errorf("AfterCommit was not called after a committed Create")
		}
		if creates != 1 {
			t.Errorf("create callbacks ran %d times, want 1 (the outbox insert must not go through GORM callbacks)", creates)
		}
		if n := count(t, db, "outbox_messages"); n != 2 {
			t.Errorf("outbox rows = %d, want 2", n)
		}
	})
}

func TestRawExecAndSkipHooksWriteNoEvents(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		o := &Order{}
		o.Place(1)
		if err := db.Session(&gorm.Session{SkipHooks: true}).Create(o).Error; err != nil {
			t.Fatalf("Create with SkipHooks: %v", err)
		}
		if err := db.Exec(`UPDATE orders SET status = 'x'`).Error; err != nil {
			t.Fatalf("Exec: %v", err)
		}
		// SkipHooks writes no events; they stay pending on the aggregate.
		if n := count(t, db, "outbox_messages"); n != 0 {
			t.Errorf("outbox rows = %d, want 0 with SkipHooks", n)
		}
		if n := len(o.Events()); n != 1 {
			t.Errorf("pending after SkipHooks = %d, want 1", n)
		}
		o2 := &Order{}
		o2.Place(2)
		if err := db.Exec(`INSERT INTO orders (status) VALUES ('raw')`).Error; err != nil {
			t.Fatalf("Exec insert: %v", err)
		}
		if n := count(t, db, "outbox_messages"); n != 0 {
			t.Errorf("outbox rows after raw Exec = %d, want 0", n)
		}
	})
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		var ids []string
		err := db.Transaction(func(tx *gorm.DB) error {
			got, err := p.Enqueue(tx, "billing_run", "2026-11", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "batch"})
			for _, id := range got {
				ids = append(ids, id.String())
			}
			return err
		})
		if err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		boom := errors.New("boom")
		err = db.Transaction(func(tx *gorm.DB) error {
			if _, err := p.Enqueue(tx, "billing_run", "2026-12", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "batch"}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Transaction = %v", err)
		}
		got := rows(t, db)
		if len(got) != 1 || got[0].EventID != ids[0] || got[0].AggregateID != "2026-11" {
			t.Errorf("rows = %+v, want the committed event %v only", got, ids)
		}
		if _, err := p.Enqueue(db, "", "x", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "m"}); !errors.Is(err, runtime.ErrInvalidEnvelope) {
			t.Errorf("Enqueue with empty aggregate type = %v, want ErrInvalidEnvelope", err)
		}
	})
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, table := range []string{"outbox; DROP TABLE x", "a.b.c", "1abc", `"quoted"`} {
		if _, err := hooks.New(hooks.Config{Table: table}); !errors.Is(err, sqlstore.ErrInvalidTable) {
			t.Errorf("New(Table %q) = %v, want ErrInvalidTable", table, err)
		}
		if _, err := sqlstore.OutboxDDL(sqlstore.Postgres, table); !errors.Is(err, sqlstore.ErrInvalidTable) {
			t.Errorf("DDL(%q) = %v, want ErrInvalidTable", table, err)
		}
	}
	if _, err := sqlstore.OutboxDDL("sqlserver", ""); !errors.Is(err, sqlstore.ErrUnsupportedDialect) {
		t.Errorf("DDL(sqlserver) = %v, want ErrUnsupportedDialect", err)
	}
	if _, err := hooks.New(hooks.Config{Table: "events.outbox"}); err != nil {
		t.Errorf("New(schema-qualified) = %v", err)
	}
}

func TestPrepareStmtSessions(t *testing.T) {
	t.Parallel()
	cfg := func() *gorm.Config { return &gorm.Config{PrepareStmt: true} }
	eachDB(t, cfg, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		o := &Order{}
		o.Place(1)
		if err := db.Create(o).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		err := db.Transaction(func(tx *gorm.DB) error {
			o.Pay("card")
			return tx.Save(o).Error
		})
		if err != nil {
			t.Fatalf("Transaction: %v", err)
		}
		want := []summary{{"orders.order_placed", "order/1"}, {"orders.order_paid", "order/1"}}
		if diff := cmp.Diff(want, summarize(rows(t, db))); diff != "" {
			t.Errorf("rows (-want +got):\n%s", diff)
		}
	})
}

// Shop owns Tickets: saving a shop saves its tickets through GORM's
// association statements, and each ticket, an aggregate of its own, writes
// its events in the same transaction.
type Shop struct {
	ID      int64 `gorm:"primaryKey"`
	Name    string
	Tickets []Ticket
	runtime.Recorder
}

type Ticket struct {
	ID     int64 `gorm:"primaryKey"`
	ShopID int64
	runtime.Recorder
}

type ShopOpened struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
}

func (ShopOpened) EventKey() runtime.Key  { return runtime.Key{Type: "shops.shop_opened", Version: 1} }
func (e ShopOpened) EventTime() time.Time { return e.OccurredAt }
func (ShopOpened) Validate() error        { return nil }

func TestAssociationsThatAreAggregates(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		if err := db.AutoMigrate(&Shop{}, &Ticket{}); err != nil {
			t.Fatal(err)
		}
		shop := &Shop{Name: "corner", Tickets: make([]Ticket, 2)}
		shop.Record(ShopOpened{EventVersion: 1, OccurredAt: now()})
		for i := range shop.Tickets {
			shop.Tickets[i].Record(OrderPlaced{EventVersion: 1, OccurredAt: now(), Amount: float64(i)})
		}
		if err := db.Create(shop).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		want := []summary{{"orders.order_placed", "ticket/1"}, {"orders.order_placed", "ticket/2"}, {"shops.shop_opened", "shop/1"}}
		if diff := cmp.Diff(want, summarize(rows(t, db))); diff != "" {
			t.Errorf("rows (-want +got):\n%s", diff)
		}
		if n := len(shop.Events()) + len(shop.Tickets[0].Events()) + len(shop.Tickets[1].Events()); n != 0 {
			t.Errorf("pending after the committed save = %d, want 0", n)
		}
		// A failing save of the same graph rolls back the association's
		// events too and keeps them pending.
		shop.Tickets = append(shop.Tickets, Ticket{})
		shop.Tickets[2].Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "card"})
		shop.Record(OrderPaid{EventVersion: 2, OccurredAt: now()}) // invalid: no method
		if err := db.Save(shop).Error; err == nil {
			t.Fatal("Save with an invalid event succeeded")
		}
		if n := count(t, db, "outbox_messages"); n != 3 {
			t.Errorf("outbox rows after the failed save = %d, want 3: %v", n, summarize(rows(t, db)))
		}
		if n := len(shop.Tickets[2].Events()); n != 1 {
			t.Errorf("association pending after rollback = %d, want 1", n)
		}
	})
}

// TestSaveNewRecordWithPresetKey: db.Save of a record whose primary key is
// set but not yet in the table runs an UPDATE that matches nothing, then a
// Create with SkipHooks; the events must be written by that Create.
func TestSaveNewRecordWithPresetKey(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		c := &Customer{Email: "new@example.com", Name: "New"}
		c.Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "card"})
		if err := db.Save(c).Error; err != nil {
			t.Fatalf("Save: %v", err)
		}
		if n := count(t, db, "customers"); n != 1 {
			t.Fatalf("customers = %d, want 1", n)
		}
		got := rows(t, db)
		if len(got) != 1 || got[0].AggregateID != "new@example.com" {
			t.Fatalf("outbox rows = %+v, want the customer's event", got)
		}
		if n := len(c.Events()); n != 0 {
			t.Errorf("pending after the committed Save = %d, want 0", n)
		}
	})
}

func TestHeadersHook(t *testing.T) {
	t.Parallel()
	pcfg := hooks.Config{Headers: func(_ context.Context, h map[string]string) { h["tenant"] = "t-1" }}
	eachDB(t, nil, pcfg, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		o := &Order{}
		o.Place(1)
		if err := db.WithContext(runtime.WithCorrelationID(context.Background(), "c-1")).Create(o).Error; err != nil {
			t.Fatal(err)
		}
		got := rows(t, db)
		var h map[string]string
		if len(got) != 1 || got[0].Headers == nil || json.Unmarshal([]byte(*got[0].Headers), &h) != nil {
			t.Fatalf("rows = %+v", got)
		}
		if diff := cmp.Diff(map[string]string{"tenant": "t-1", runtime.MetadataCorrelationID: "c-1"}, h); diff != "" {
			t.Errorf("headers (-want +got):\n%s", diff)
		}
	})
}

// TestSaveMixesWrittenAndNewEvents: a save whose events are partly written
// already (a stale copy of the aggregate that gained an event) inserts only
// the new one (on MySQL, which has no ON CONFLICT, the duplicate makes the
// multi-row insert fall back to rows one by one) and drops both from the
// recorder once it commits.
func TestSaveMixesWrittenAndNewEvents(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		o := &Order{}
		o.Place(1)
		stale := *o // a copy made before the save: same pending event, same id
		if err := db.Create(o).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		stale.ID = o.ID
		stale.Pay("card")
		if n := len(stale.Events()); n != 2 {
			t.Fatalf("stale copy pending = %d, want 2", n)
		}
		if err := db.Save(&stale).Error; err != nil {
			t.Fatalf("Save: %v", err)
		}
		want := []summary{{"orders.order_placed", "order/1"}, {"orders.order_paid", "order/1"}}
		if diff := cmp.Diff(want, summarize(rows(t, db))); diff != "" {
			t.Errorf("rows (-want +got):\n%s", diff)
		}
		if n := len(stale.Events()); n != 0 {
			t.Errorf("pending after the committed save = %d, want 0", n)
		}
	})
}

// TestStatementsThatWriteSomeRows: events are written only for rows the
// statement wrote. A Create that inserted nothing (ON CONFLICT DO NOTHING
// or INSERT IGNORE on a row that exists) keeps its events pending; a
// statement of several models that wrote some of their rows fails with
// ErrAmbiguousWrite and rolls back (it cannot tell whose state changed);
// so does DO NOTHING on MySQL, whose row count cannot tell an insert from
// a skip. Found by a new user's trial: each of these wrote and published
// the events of rows that were never written.
func TestStatementsThatWriteSomeRows(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		mysql := db.Dialector.Name() == "mysql"
		customer := func(email string) *Customer {
			c := &Customer{Email: email, Name: email}
			c.Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: email})
			return c
		}
		if err := db.Create(customer("a@x")).Error; err != nil {
			t.Fatal(err)
		}
		want := []summary{{"orders.order_paid", "crm.customer/a@x"}}
		check := func(step string, err error, ambiguous bool, pending ...*Customer) {
			t.Helper()
			if got := errors.Is(err, hooks.ErrAmbiguousWrite); got != ambiguous || !ambiguous && err != nil {
				t.Errorf("%s: error %v, want ErrAmbiguousWrite: %t", step, err, ambiguous)
			}
			if diff := cmp.Diff(want, summarize(rows(t, db))); diff != "" {
				t.Errorf("%s: rows (-want +got):\n%s", step, diff)
			}
			for _, c := range pending {
				if n := len(c.Events()); n != 1 {
					t.Errorf("%s: %s has %d events pending, want 1", step, c.Email, n)
				}
			}
		}

		// One model, DO NOTHING on a row that exists.
		dup := customer("a@x")
		check("DO NOTHING, existing row", db.Clauses(clause.OnConflict{DoNothing: true}).Create(dup).Error, mysql, dup)
		// INSERT IGNORE / INSERT OR IGNORE on a row that exists.
		if !strings.Contains(db.Dialector.Name(), "postgres") {
			modifier := "IGNORE"
			if db.Dialector.Name() == "sqlite" {
				modifier = "OR IGNORE"
			}
			dup := customer("a@x")
			check("INSERT IGNORE, existing row", db.Clauses(clause.Insert{Modifier: modifier}).Create(dup).Error, false, dup)
		}
		// Several models, one row exists: nothing is written, the new
		// customer's row included (the statement rolled back).
		batch := []*Customer{customer("a@x"), customer("b@x")}
		check("DO NOTHING, one of two rows exists", db.Clauses(clause.OnConflict{DoNothing: true}).Create(&batch).Error, true, batch...)
		if n := count(t, db, "customers"); n != 1 {
			t.Errorf("customers = %d after the failed batch, want 1", n)
		}
		// Updates and Delete of two models, one of which has no row.
		a, missing := customer("a@x"), customer("nobody@x")
		check("Updates of two models, one row missing",
			db.Model([]*Customer{a, missing}).Updates(map[string]any{"name": "renamed"}).Error, true, a, missing)
		a, missing = customer("a@x"), customer("nobody@x")
		check("Delete of two models, one row missing", db.Delete([]*Customer{a, missing}).Error, true, a, missing)
		if n := count(t, db, "customers"); n != 1 {
			t.Errorf("customers = %d after the failed delete, want 1 (rolled back)", n)
		}
		// DryRun executes nothing, writes nothing and fails nothing.
		o := &Order{}
		o.Place(1)
		check("DryRun Create", db.Session(&gorm.Session{DryRun: true}).Create(o).Error, false)
		if n := len(o.Events()); n != 1 {
			t.Errorf("DryRun: %d events pending, want 1", n)
		}
		// All rows written: every event is.
		both := []*Customer{customer("c@x"), customer("d@x")}
		if !mysql {
			want = append(want, summary{"orders.order_paid", "crm.customer/c@x"}, summary{"orders.order_paid", "crm.customer/d@x"})
		}
		check("DO NOTHING, no row exists", db.Clauses(clause.OnConflict{DoNothing: true}).Create(&both).Error, mysql)
		upd := []*Customer{customer("a@x")}
		want = append(want, summary{"orders.order_paid", "crm.customer/a@x"})
		check("Updates of one model in a slice", db.Model(upd).Updates(map[string]any{"name": "renamed"}).Error, false)
	})
}
