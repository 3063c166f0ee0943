package main

// The relay role: the only file that builds a relay. It uses the public API
// of runtime/sqlstore (NewStore), runtime/relay (New, Run) and adapters/kafka
// (NewPublisher).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// runRelay is the relay role: one relay on the run's outbox table,
// publishing to the broker role, until ctx is done.
func runRelay(ctx context.Context, cfg childConfig, log *slog.Logger) error {
	sdb, err := databaseOf(cfg.DB)
	if err != nil {
		return err
	}
	db, err := gorm.Open(sdb.dialector(cfg.DSN), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("database handle: %w", err)
	}
	defer sqlDB.Close()
	sqlDB.SetMaxOpenConns(4)

	store, err := sqlstore.NewStore(databasesql.New(sqlDB), sqlstore.StoreConfig{
		RetryDelay:    relayRetryDelay,
		MaxRetryDelay: time.Second,
		MaxAttempts:   cfg.MaxAttempts,

		MaxActiveRelays: cfg.MaxActiveRelays,

		LeaseTTL: relayLeaseTTL,
	})

	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer store.Close()
	var transport *kafkago.Transport
	if cfg.BrokerVia != "" {
		// Every connection through this relay's broker proxy, so that the
		// driving process can cut this relay alone off from the broker.
		transport = &kafkago.Transport{Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, cfg.BrokerVia)
		}}
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: cfg.Brokers,
		OverwriteWriter: func(w *kafkago.Writer) {
			w.WriteTimeout = cfg.WriteTimeout
			w.ReadTimeout = cfg.WriteTimeout
			w.MaxAttempts = 3
			if transport != nil {
				w.Transport = transport
			}
		},
	})
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	defer pub.Close()
	r, err := relay.New(store, pub, relay.Config{
		BatchSize:    cfg.BatchSize,
		PollInterval: relayPollInterval,
		MinBackoff:   50 * time.Millisecond,
		MaxBackoff:   relayMaxBackoff,
		// A call on a frozen (half-open) database connection fails after
		// StoreTimeout (2s in the suite, 10s by default), and the relay
		// goes on with a new connection: dbfreeze's bound is a few of them.
		StoreTimeout: cfg.StoreTimeout,
		// A relay cut off from the broker alone hands its shards over
		// after as long as a killed relay's leases take to expire.
		HandOverAfter:   relayHandOverAfter,
		ShutdownTimeout: 2 * time.Second,
		Logger:          log,
		OnBatch: func(b relay.BatchResult) {
			if b.Err != nil {
				log.Info("batch failed", "claimed", b.Claimed, "published", b.Published, "error", b.Err)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	return r.Run(ctx)
}
