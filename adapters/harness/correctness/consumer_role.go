package main

// The consumer role: the only file that builds a consumer. It uses the
// public API of runtime/consumer (New, Handle, HandlerFunc) and
// adapters/kafka (NewSubscriber).

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// consumerName is the consumer's name in the inbox and its Kafka group.
const consumerName = "correctness"

// runConsumer is the consumer role: one group member on the topic whose
// handlers append to the apply log inside the inbox transaction, until ctx
// is done. Its database is PostgreSQL whatever -db says (the inbox has no
// MySQL SQL yet): cfg.DSN is the run's schema, or with -db mysql a schema
// of the consumer's own.
func runConsumer(ctx context.Context, cfg childConfig, log *slog.Logger) error {
	db, err := gorm.Open(postgres.Open(cfg.DSN), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("database handle: %w", err)
	}
	defer sqlDB.Close()
	sqlDB.SetMaxOpenConns(3)

	reg := runtime.NewRegistry()
	if err := Register(reg); err != nil {
		return fmt.Errorf("register events: %w", err)
	}
	drv, err := hooks.NewDriver(db)
	if err != nil {
		return fmt.Errorf("driver: %w", err)
	}
	c, err := consumer.New(reg, consumer.Config{
		Name:       consumerName,
		DB:         drv,
		MaxRetries: 5,
		MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 500 * time.Millisecond,
		NackDelay:  200 * time.Millisecond,
		Logger:     log,
	})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	apply := func(ctx context.Context, tx *gorm.DB, m consumer.Meta) error {
		return appendApplyLog(ctx, tx, m.EventID.String(), m.AggregateID, m.EventType)
	}
	err = consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, _ AccountOpened, m consumer.Meta) error {
		return apply(ctx, tx, m)
	})
	if err == nil {
		err = consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, _ Deposited, m consumer.Meta) error { return apply(ctx, tx, m) })
	}
	if err == nil {
		err = consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, _ Audited, m consumer.Meta) error { return apply(ctx, tx, m) })
	}
	if err == nil {
		err = consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, _ Noted, m consumer.Meta) error { return apply(ctx, tx, m) })
	}
	if err != nil {
		return fmt.Errorf("handlers: %w", err)
	}

	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:           cfg.Brokers,
		ConsumerGroup:     consumerName,
		MaxWait:           200 * time.Millisecond,
		HeartbeatInterval: 300 * time.Millisecond,
		SessionTimeout:    3 * time.Second,
		RebalanceTimeout:  3 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("subscriber: %w", err)
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	handle := c.HandlerFunc()
	for msg := range msgs {
		if err := handle(msg); err != nil {
			log.Info("nack", "event_id", msg.UUID, "error", err)
			msg.Nack()
			continue
		}
		msg.Ack()
	}
	return nil
}
