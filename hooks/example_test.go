package hooks_test

import (
	"context"
	"fmt"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// OrderPlaced is an event, shaped as outboxgen generates it.
type OrderPlaced struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Amount       float64   `json:"amount"`
}

// EventKey names the event's type and version.
func (OrderPlaced) EventKey() runtime.Key {
	return runtime.Key{Type: "orders.order_placed", Version: 1}
}

// EventTime is when it happened.
func (e OrderPlaced) EventTime() time.Time { return e.OccurredAt }

// Validate checks the event before it is written.
func (e OrderPlaced) Validate() error { return nil }

// Order is an aggregate: it records its events as it changes, and the
// plugin writes them in the transaction that saves it.
type Order struct {
	ID     int64 `gorm:"primaryKey"`
	Status string
	runtime.Recorder
}

// Place places the order.
func (o *Order) Place(amount float64) {
	o.Status = "placed"
	o.Record(OrderPlaced{EventVersion: 1, OccurredAt: runtime.OccurredAt(time.Now()), Amount: amount})
}

func ExampleNew() {
	ctx := context.Background()
	dsn := runtimetest.ExamplePostgresDSN() // a fresh schema; yours: "postgres://user:pass@host/db"
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		fmt.Println(err)
		return
	}
	_ = db.AutoMigrate(&Order{})

	plugin, err := hooks.New(hooks.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := db.Use(plugin); err != nil {
		fmt.Println(err)
		return
	}

	order := &Order{}
	order.Place(12.5) // records OrderPlaced
	if err := db.Create(order).Error; err != nil {
		fmt.Println(err)
		return
	}

	// The relay reads the table through a Store; here we just look.
	sqlDB, err := db.DB()
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := sqlstore.NewStore(databasesql.New(sqlDB), sqlstore.StoreConfig{})
	defer store.Close()
	batch, err := store.Claim(ctx, relay.ClaimRequest{Owner: "example", Limit: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range batch.Messages {
		fmt.Println(m.Topic, m.EventType, m.AggregateType, m.AggregateID, string(m.Payload) != "")
	}
	_ = store.Release(ctx, "example") // publish nothing: the rows stay pending
	fmt.Println("pending on the aggregate:", len(order.Events()))
	// Output:
	// order orders.order_placed order 1 true
	// pending on the aggregate: 0
}
