package main

// The relay role: the only file that builds a relay. It uses the public API
// of runtime/sqlstore (NewStore), runtime/relay (New, Run) and adapters/kafka
// (NewPublisher).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
)

// runRelay is the relay role: one relay on the run's outbox table,
// publishing to the broker role, until ctx is done.
func runRelay(ctx context.Context, cfg childConfig, log *slog.Logger) error {
	store, closeStore, err := openRelayStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeStore()
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

// openRelayStore opens the relay's store: the polling store
// (sqlstore.NewStore) or, with -relay cdc, the CDC store (pgcdc.Open) on
// the run's slot.
func openRelayStore(ctx context.Context, cfg childConfig, log *slog.Logger) (relay.Store, func(), error) {
	if cfg.Relay == relayCDC {
		return openCDCStore(ctx, cfg, log)
	}
	sdb, err := databaseOf(cfg.DB)
	if err != nil {
		return nil, nil, err
	}
	db, err := gorm.Open(sdb.dialector(cfg.DSN), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, nil, fmt.Errorf("database handle: %w", err)
	}
	sqlDB.SetMaxOpenConns(4)
	store, err := sqlstore.NewStore(databasesql.New(sqlDB), sqlstore.StoreConfig{
		RetryDelay:    relayRetryDelay,
		MaxRetryDelay: time.Second,
		MaxAttempts:   cfg.MaxAttempts,

		MaxActiveRelays: cfg.MaxActiveRelays,

		LeaseTTL: relayLeaseTTL,
	})
	if err != nil {
		sqlDB.Close()
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	return store, func() { store.Close(); sqlDB.Close() }, nil
}

// openCDCStore opens a CDC store on the run's slot (pgcdc, Table mode),
// under an application_name of this relay's own (cdcOwner), so that the
// suite can tell from pg_replication_slots which relay streams.
func openCDCStore(ctx context.Context, cfg childConfig, log *slog.Logger) (relay.Store, func(), error) {
	u, err := url.Parse(cfg.DSN)
	if err != nil {
		return nil, nil, fmt.Errorf("relay DSN: %w", err)
	}
	q := u.Query()
	q.Set("application_name", cdcOwner(q.Get("application_name"), cfg.Name))
	u.RawQuery = q.Encode()
	store, err := pgcdc.Open(ctx, pgcdc.Config{
		ConnString:       u.String(),
		Slot:             cfg.Slot,
		SenderTimeout:    cdcSenderTimeout,
		RetryDelay:       relayRetryDelay,
		MaxRetryDelay:    time.Second,
		StatementTimeout: relayStoreTimeout,
		Logger:           log,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("cdc store: %w", err)
	}
	return store, func() { store.Close() }, nil
}

// cdcOwner is the application_name of CDC relay name's connections, whose
// relays' connections are named app: it starts with app, so that the
// terminate fault ends them too.
func cdcOwner(app, name string) string { return app + "_" + strings.ReplaceAll(name, "-", "") }
