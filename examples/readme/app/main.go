// Command app is the service of the README's walk (step 3): it saves an
// Order with GORM, which writes the order's events to the outbox table in
// the same transaction, and relays them to Kafka until interrupted.
//
//	go run ./examples/readme/app -database-url 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' -kafka-brokers 127.0.0.1:9092
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/examples/readme/orders"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
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

// run places an order, then relays the outbox until ctx is cancelled.
func run(ctx context.Context, db *gorm.DB, brokers []string) error {
	// Your tables, and the outbox table (or put sqlstore.OutboxDDL in your migrations).
	if err := db.AutoMigrate(&orders.Order{}); err != nil {
		return err
	}
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		return err
	}

	// The relay reads the outbox through GORM's connection pool. It and
	// the publisher log through slog.Default(): a broker that does not
	// answer shows as a WARN line per failed attempt.
	drv, err := hooks.NewDriver(db)
	if err != nil {
		return err
	}
	store, err := sqlstore.NewStore(drv, sqlstore.StoreConfig{})
	if err != nil {
		return err
	}
	defer store.Close()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers})
	if err != nil {
		return err
	}
	defer pub.Close()
	rl, err := relay.New(store, pub, relay.Config{})
	if err != nil {
		return err
	}

	// The plugin writes recorded events in the saving transaction and wakes
	// the relay after the commit.
	plugin, err := hooks.New(hooks.Config{AfterCommit: rl.Notify})
	if err != nil {
		return err
	}
	if err := db.Use(plugin); err != nil {
		return err
	}

	order := &orders.Order{}
	order.Place(runtime.SystemClock{}, "42.00")
	if err := db.WithContext(ctx).Create(order).Error; err != nil { // the order and its event commit together
		return err
	}
	slog.Info("order placed", "order_id", order.ID)

	// Run publishes until ctx is cancelled (Ctrl-C), then finishes the batch
	// in flight. In a server, run it next to your HTTP server.
	return rl.Run(ctx)
}
