package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/examples/internal/exampletest"
	"github.com/gooutbox/outbox/examples/readme/orders"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

var databases = []struct {
	name string
	open func(t *testing.T) *gorm.DB
}{
	{"sqlite", func(t *testing.T) *gorm.DB { return hookstest.SQLite(t, &gorm.Config{Logger: logger.Discard}) }},
	{"postgres", func(t *testing.T) *gorm.DB { return hookstest.Postgres(t, &gorm.Config{Logger: logger.Discard}) }},
}

// background runs fn(ctx) in a goroutine until the test ends, and returns a
// function that cancels ctx and returns fn's result.
func background(t *testing.T, fn func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var result error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case result = <-done:
			case <-time.After(45 * time.Second):
				t.Fatal("did not return within 45s of its context's cancellation")
			}
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// produce places and pays order 1 in the orders service's own database and
// relays its two events to Kafka, as examples/readme/app does.
func produce(t *testing.T, brokers []string) {
	t.Helper()
	ctx := context.Background()
	db := hookstest.SQLite(t, &gorm.Config{Logger: logger.Discard})
	if err := db.AutoMigrate(&orders.Order{}); err != nil {
		t.Fatal(err)
	}
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	storeDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.NewStore(databasesql.New(storeDB), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	rl, err := relay.New(store, pub, relay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := hooks.New(hooks.Config{AfterCommit: rl.Notify})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(plugin); err != nil {
		t.Fatal(err)
	}
	background(t, rl.Run)

	o := &orders.Order{}
	o.Place(runtime.SystemClock{}, "42.00")
	if err := db.Create(o).Error; err != nil {
		t.Fatal(err)
	}
	o.Pay(runtime.SystemClock{})
	if err := db.Save(o).Error; err != nil {
		t.Fatal(err)
	}
}

func invoices(t *testing.T, db *gorm.DB) []Invoice {
	t.Helper()
	var got []Invoice
	if err := db.Order("id").Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	return got
}

// TestBillingAppliesEachEventOnce runs the README's consumer on each database
// with an in-process Kafka: OrderPaid becomes one invoice; the same message
// delivered again changes nothing.
func TestBillingAppliesEachEventOnce(t *testing.T) {
	for _, tc := range databases {
		t.Run(tc.name, func(t *testing.T) {
			logs := exampletest.CaptureDefault(t, slog.LevelDebug)
			brokers := kafkatest.NewCluster(t)
			db := tc.open(t)
			stop := background(t, func(ctx context.Context) error { return run(ctx, db, brokers) })
			produce(t, brokers)

			logs.WaitFor(t, 30*time.Second, `msg="consumer: event applied"`, "event_type=orders.order_paid")
			want := []Invoice{{ID: 1, OrderID: "1", Amount: "42.00"}}
			if got := invoices(t, db); len(got) != 1 || got[0] != want[0] {
				t.Fatalf("invoices = %+v, want %+v", got, want)
			}

			// Deliver the OrderPaid message a second time, as a relay that
			// crashed between publishing and marking would.
			redeliverPaid(t, brokers)
			logs.WaitFor(t, 30*time.Second, `msg="consumer: duplicate event"`, "event_type=orders.order_paid")
			if got := invoices(t, db); len(got) != 1 {
				t.Errorf("invoices after a redelivery = %+v, want only %+v", got, want)
			}
			if err := stop(); err != nil {
				t.Errorf("run = %v, want nil after cancellation", err)
			}
		})
	}
}

// redeliverPaid reads the OrderPaid record from the topic and produces it
// again: same key, headers (event id) and payload.
func redeliverPaid(t *testing.T, brokers []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: brokers, Topic: "order", GroupID: "readme-billing-test", MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read topic order: %v", err)
		}
		for _, h := range m.Headers {
			if h.Key == runtime.MetadataEventType && string(h.Value) == orders.OrderPaidType {
				w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Topic: "order", Balancer: &kafkago.Hash{}}
				defer w.Close()
				if err := w.WriteMessages(ctx, kafkago.Message{Key: m.Key, Value: m.Value, Headers: m.Headers}); err != nil {
					t.Fatalf("produce again: %v", err)
				}
				return
			}
		}
	}
}

// TestBillingDeadLettersAPoisonMessage: a message the consumer cannot decode
// goes to billing.dlq with the README's setup as it is (a trial found that
// the dead-letter publisher could not create the topic, so the message was
// nacked for ever and its partition stalled), and the next event goes on.
func TestBillingDeadLettersAPoisonMessage(t *testing.T) {
	logs := exampletest.CaptureDefault(t, slog.LevelDebug)
	brokers := kafkatest.NewCluster(t)
	db := hookstest.SQLite(t, &gorm.Config{Logger: logger.Discard})
	background(t, func(ctx context.Context) error { return run(ctx, db, brokers) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	poison := runtime.NewEventID().String()
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Topic: "order", Balancer: &kafkago.Hash{}, AllowAutoTopicCreation: true}
	defer w.Close()
	headers := []kafkago.Header{
		{Key: runtime.MetadataEventID, Value: []byte(poison)},
		{Key: runtime.MetadataEventType, Value: []byte(orders.OrderPaidType)},
		{Key: runtime.MetadataEventVersion, Value: []byte("1")},
		{Key: runtime.MetadataAggregateType, Value: []byte("order")},
		{Key: runtime.MetadataAggregateID, Value: []byte("1")},
		{Key: runtime.MetadataOccurredAt, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
	}
	if err := w.WriteMessages(ctx, kafkago.Message{Key: []byte("1"), Value: []byte(`{"amount": 42`), Headers: headers}); err != nil {
		t.Fatalf("produce the poison message: %v", err)
	}
	// Only then read the topic: a reader would create it.
	logs.WaitFor(t, 30*time.Second, `msg="consumer: message dead-lettered"`, "dead_letter_topic=billing.dlq")
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: brokers, Topic: "billing.dlq", GroupID: "readme-billing-dlq-test", MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("read billing.dlq: %v", err)
	}
	got := ""
	for _, h := range m.Headers {
		if h.Key == runtime.MetadataEventID {
			got = string(h.Value)
		}
	}
	if got != poison {
		t.Errorf("billing.dlq got event %q, want the poison message %s", got, poison)
	}
	// The order's next event is applied.
	produce(t, brokers)
	logs.WaitFor(t, 30*time.Second, `msg="consumer: event applied"`, "event_type=orders.order_paid")
}
