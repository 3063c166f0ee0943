// Command sqlcpgx is a service on pgx and sqlc, without GORM and without
// database/sql: its queries are sqlc's (db/query.sql, generated for
// pgx/v5 into package db), its transactions pgx's, and it writes its
// events into the outbox in the same pgx.Tx through the storage layer's
// native pgx driver (package runtime/sqlstore/pgxv5); the relay reads the
// outbox through the same *pgxpool.Pool and publishes to Kafka. The
// payments side consumes those events and applies each OrderPaid once: its
// handler takes the inbox's pgx.Tx and writes through sqlc's
// Queries.WithTx, so the payment row and the inbox marker commit together.
//
//	go run ./examples/sqlcpgx -database-url postgres://postgres@127.0.0.1:5432/test
//
// It places an order and pays it (two transactions, two events), then
// relays and consumes until interrupted. Without -kafka-brokers it starts an
// in-process Kafka-protocol broker. Regenerate package db with
// `sqlc generate` in this directory (sqlc.yaml).
package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/examples/readme/orders"
	"github.com/gooutbox/outbox/examples/sqlcpgx/db"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

//go:embed db/schema.sql
var schema string

func main() {
	dsn := flag.String("database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	brokers := flag.String("kafka-brokers", os.Getenv("KAFKA_BROKERS"), "comma-separated Kafka brokers (default: an in-process broker)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	addrs := strings.Split(*brokers, ",")
	if *brokers == "" {
		cluster, err := kafkatest.Start(kafkatest.Config{})
		if err != nil {
			log.Fatal(err)
		}
		defer cluster.Close()
		addrs = cluster.Addrs()
	}
	if err := run(ctx, pool, addrs); err != nil {
		log.Fatal(err)
	}
}

// Service is the order service: sqlc's queries, and the outbox writer that
// puts each event in the transaction of the change it describes.
type Service struct {
	pool    *pgxpool.Pool
	queries *db.Queries
	outbox  *sqlstore.Writer
	clock   runtime.Clock
}

// NewService returns the service on pool.
func NewService(pool *pgxpool.Pool) (*Service, error) {
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		return nil, err
	}
	return &Service{pool: pool, queries: db.New(pool), outbox: w, clock: runtime.SystemClock{}}, nil
}

// PlaceOrder inserts an order and its OrderPlaced event in one
// transaction: both commit, or neither.
func (s *Service) PlaceOrder(ctx context.Context, total string) (id int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if id, err = s.queries.WithTx(tx).CreateOrder(ctx, total); err != nil {
			return err
		}
		return s.record(ctx, tx, id, orders.NewOrderPlaced(s.clock, total))
	})
	return id, err
}

// PayOrder marks an order paid and records OrderPaid, in one transaction.
func (s *Service) PayOrder(ctx context.Context, id int64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		total, err := s.queries.WithTx(tx).PayOrder(ctx, id)
		if err != nil {
			return fmt.Errorf("pay order %d: %w", id, err)
		}
		return s.record(ctx, tx, id, orders.NewOrderPaid(s.clock, total))
	})
}

// record writes evt, of order id, to the outbox in tx. The topic is the
// aggregate type in snake_case, as the GORM plugin names it.
func (s *Service) record(ctx context.Context, tx pgx.Tx, id int64, evt runtime.Event) error {
	env, err := runtime.NewEnvelope(ctx, runtime.NewEventID(), evt, "Order", strconv.FormatInt(id, 10))
	if err != nil {
		return err
	}
	_, err = s.outbox.Write(ctx, pgxv5.Executor(tx), []sqlstore.Row{{Topic: "order", Envelope: env}})
	return err
}

// NewPayments returns the payments consumer on pool: an inbox in the same
// database, and a handler of OrderPaid that records the payment through
// sqlc in the inbox's transaction. Create the inbox table with
// [migrateOutbox] first.
func NewPayments(pool *pgxpool.Pool) (*consumer.Consumer, error) {
	reg := runtime.NewRegistry()
	if err := orders.Register(reg); err != nil { // generated: every version of every event
		return nil, err
	}
	drv := pgxv5.New(pool) // handlers take a pgx.Tx
	c, err := consumer.New(reg, consumer.Config{Name: "payments", DB: drv})
	if err != nil {
		return nil, err
	}
	queries := db.New(pool)
	err = consumer.Handle(c, drv, func(ctx context.Context, tx pgx.Tx, e orders.OrderPaid, m consumer.Meta) error {
		id, err := strconv.ParseInt(m.AggregateID, 10, 64)
		if err != nil {
			return fmt.Errorf("order id %q: %w", m.AggregateID, err)
		}
		// Commits with the inbox marker: a redelivered event writes nothing.
		return queries.WithTx(tx).RecordPayment(ctx, db.RecordPaymentParams{OrderID: id, Amount: e.Amount})
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// run creates the tables, places and pays an order, and relays the outbox
// to brokers and consumes it until ctx is cancelled.
func run(ctx context.Context, pool *pgxpool.Pool, brokers []string) error {
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if err := migrateOutbox(ctx, pool); err != nil {
		return err
	}
	svc, err := NewService(pool)
	if err != nil {
		return err
	}
	id, err := svc.PlaceOrder(ctx, "12.50")
	if err != nil {
		return err
	}
	if err := svc.PayOrder(ctx, id); err != nil {
		return err
	}
	log.Printf("order %d placed and paid; relaying", id)

	// The relay reads the outbox through the same pgx pool. Close the
	// store before the pool (deferred calls run last in, first out).
	store, err := sqlstore.NewStore(pgxv5.New(pool), sqlstore.StoreConfig{})
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

	// The payments side: a consumer group on the topic, a goroutine per
	// partition, each message applied in a pgx transaction with its
	// inbox marker.
	payments, err := NewPayments(pool)
	if err != nil {
		return err
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, ConsumerGroup: "payments"})
	if err != nil {
		return err
	}
	defer sub.Close()
	// Whichever of the two ends first (a cancelled ctx, or an error)
	// ends the other.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consumed := make(chan error, 1)
	go func() {
		defer cancel()
		consumed <- payments.Run(ctx, sub, "order")
	}()
	err = rl.Run(ctx)
	cancel()
	if cerr := <-consumed; err == nil {
		err = cerr
	}
	return err
}

// migrateOutbox creates the outbox and inbox tables through the pgx driver.
func migrateOutbox(ctx context.Context, pool *pgxpool.Pool) error {
	return sqlstore.Migrate(ctx, pgxv5.New(pool), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true, Inbox: true})
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
