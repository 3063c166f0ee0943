// Command billing is the consumer of the README's walk (step 4) and of
// package runtime/consumer's documentation: it reads the orders events from Kafka in a Watermill router and
// writes an Invoice for each OrderPaid, in the same transaction as the inbox
// entry that makes a redelivered event a no-op.
//
//	go run ./examples/readme/billing -database-url 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' -kafka-brokers 127.0.0.1:9092
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/examples/readme/orders"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

func main() {
	dsn := flag.String("database-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL")
	brokers := flag.String("kafka-brokers", "127.0.0.1:9092", "comma-separated Kafka brokers")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	db, err := gorm.Open(postgres.Open(*dsn), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, db, strings.Split(*brokers, ",")); err != nil {
		log.Fatal(err)
	}
}

// Invoice is billing's own model.
type Invoice struct {
	ID      int64
	OrderID string
	Amount  string
}

// run applies the orders events until ctx is cancelled.
func run(ctx context.Context, db *gorm.DB, brokers []string) error {
	if err := db.AutoMigrate(&Invoice{}); err != nil {
		return err
	}
	drv, err := hooks.NewDriver(db) // GORM as the consumer's database: handlers take a *gorm.DB
	if err != nil {
		return err
	}
	if err := consumer.Migrate(ctx, drv, ""); err != nil { // the inbox table
		return err
	}

	reg := runtime.NewRegistry()
	if err := orders.Register(reg); err != nil { // generated: every version of every event
		return err
	}
	// The dead-letter topic (billing.dlq) gets a message only when one fails
	// for good, so nothing else creates it: this publisher may.
	dlq, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, AllowAutoTopicCreation: true})
	if err != nil {
		return err
	}
	defer dlq.Close()
	c, err := consumer.New(reg, consumer.Config{Name: "billing", DB: drv, DeadLetterPublisher: dlq})
	if err != nil {
		return err
	}
	err = consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e orders.OrderPaid, m consumer.Meta) error {
		// Commits with the inbox entry: a redelivered event writes nothing.
		return tx.Create(&Invoice{OrderID: m.AggregateID, Amount: e.Amount}).Error
	})
	if err != nil {
		return err
	}

	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, ConsumerGroup: "billing"})
	if err != nil {
		return err
	}
	defer sub.Close()
	logger := watermill.NewSlogLogger(slog.Default()) // the router takes Watermill's logger, bridged to slog
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, logger)
	if err != nil {
		return err
	}
	// The topic is the aggregate type: "order" for orders.Order.
	router.AddConsumerHandler("billing", "order", sub, c.HandlerFunc())
	return router.Run(ctx) // until ctx is cancelled
}
