package kafka_test

import (
	"context"
	"log/slog"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/internal/testhooks"
)

// The adapter's internals, through package testhooks.

func setStallWarnAfter(s *kafka.Subscriber, d time.Duration) {
	testhooks.Kafka.SetStallWarnAfter(s, d)
}

func fetch(ctx context.Context, r *kafkago.Reader, warn *slog.Logger, delay time.Duration) (kafkago.Message, bool) {
	return testhooks.Kafka.Fetch.(func(context.Context, *kafkago.Reader, *slog.Logger, time.Duration) (kafkago.Message, bool))(ctx, r, warn, delay)
}

func newUnfencedPublisher(cfg kafka.PublisherConfig) (*kafka.Publisher, error) {
	p, err := testhooks.Kafka.NewUnfencedPublisher(cfg)
	if err != nil {
		return nil, err
	}
	return p.(*kafka.Publisher), nil
}

func classify(err error) error { return testhooks.Kafka.Classify(err) }
