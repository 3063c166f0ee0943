// Command relay runs the outbox relay as its own process: it publishes the
// committed rows of a PostgreSQL outbox table to a broker chosen by URL
// (package adapters/broker: kafka://, amqp://, nats://, redis://,
// postgres://, sqs://) until it receives SIGINT or SIGTERM, then finishes
// the batch in flight and exits.
//
//	go run ./examples/relay -database-url postgres://postgres@127.0.0.1:5432/shop -broker-url kafka://127.0.0.1:9092
//	go run ./examples/relay -database-url postgres://postgres@127.0.0.1:5432/shop -broker-url amqp://guest:guest@127.0.0.1:5672/
//
// Run several for availability: claims are exclusive and keep each
// aggregate's events in order. The application's processes register the
// hooks plugin and write the outbox; this process only reads it.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default: $DATABASE_URL)")
	brokerURL := fs.String("broker-url", os.Getenv("BROKER_URL"), "broker URL, e.g. kafka://127.0.0.1:9092 or amqp://guest:guest@127.0.0.1:5672/ (default: $BROKER_URL)")
	brokers := fs.String("kafka-brokers", os.Getenv("KAFKA_BROKERS"), "shorthand for -broker-url kafka://<brokers> (default: $KAFKA_BROKERS)")
	table := fs.String("table", "", "outbox table (default: "+sqlstore.DefaultTable+")")
	batch := fs.Int("batch", 0, fmt.Sprintf("relay batch size (default: %d)", relay.DefaultBatchSize))
	poll := fs.Duration("poll", 0, "poll interval besides LISTEN/NOTIFY (default: 1s)")
	migrate := fs.Bool("migrate", false, "create the outbox table if it does not exist")
	debug := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h printed the usage: not a failure
			return nil
		}
		return err
	}
	if *brokerURL == "" && *brokers != "" {
		*brokerURL = "kafka://" + *brokers
	}
	if *dsn == "" || *brokerURL == "" {
		return errors.New("-database-url and -broker-url (or -kafka-brokers) are required")
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	// The relay needs no GORM: the store works on a database/sql pool.
	db, err := sql.Open("pgx", *dsn)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	if *migrate {
		if err := sqlstore.MigrateOutbox(ctx, db, sqlstore.Postgres, *table); err != nil {
			return err
		}
	}
	store, err := sqlstore.NewStore(db, sqlstore.StoreConfig{Dialect: sqlstore.Postgres, Table: *table})
	if err != nil {
		return err
	}
	defer store.Close()
	b, err := broker.Open(ctx, *brokerURL, broker.Config{Logger: log})
	if err != nil {
		return err
	}
	defer b.Close()
	r, err := relay.New(store, b.Publisher(), relay.Config{
		BatchSize:       *batch,
		PollInterval:    *poll,
		ShutdownTimeout: 20 * time.Second,
		Logger:          log,
	})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
