// Command relay runs the outbox relay as its own process: it publishes the
// committed rows of a PostgreSQL outbox table to Kafka until it receives
// SIGINT or SIGTERM, then finishes the batch in flight and exits.
//
//	go run ./examples/relay -database-url postgres://postgres@127.0.0.1:5432/shop -kafka-brokers 127.0.0.1:9092
//
// Run several for availability: claims are exclusive and keep each
// aggregate's events in order. The application's processes register the
// hooks plugin and write the outbox; this process only reads it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime/relay"
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
	brokers := fs.String("kafka-brokers", os.Getenv("KAFKA_BROKERS"), "comma-separated Kafka brokers (default: $KAFKA_BROKERS)")
	table := fs.String("table", "", "outbox table (default: "+hooks.DefaultTable+")")
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
	if *dsn == "" || *brokers == "" {
		return errors.New("-database-url and -kafka-brokers are required")
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	db, err := gorm.Open(postgres.Open(*dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	if *migrate {
		if err := hooks.Migrate(ctx, db, *table); err != nil {
			return err
		}
	}
	store, err := hooks.NewStore(db, hooks.StoreConfig{Table: *table})
	if err != nil {
		return err
	}
	defer store.Close()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: strings.Split(*brokers, ",")}, watermill.NewSlogLogger(log))
	if err != nil {
		return err
	}
	defer pub.Close()
	r, err := relay.New(store, pub, relay.Config{
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
