package broker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime/health"
)

// TestPublishersPing: the publishers of kafka, amqp, nats and redis are
// health.BrokerPingers whose Ping succeeds against a live broker, so that
// outbox relay's /readyz can check the broker.
func TestPublishersPing(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(*testing.T) string
	}{
		{"kafka", func(t *testing.T) string { return "kafka://" + kafkatest.NewCluster(t)[0] }},
		{"amqp", amqpURL},
		{"nats", natsURL},
		{"redis", redisURL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b, err := broker.Open(ctx, tc.url(t), broker.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			p, ok := b.Publisher().(health.BrokerPinger)
			if !ok {
				t.Fatalf("%T is not a health.BrokerPinger", b.Publisher())
			}
			if err := p.Ping(ctx); err != nil {
				t.Errorf("Ping = %v, want nil", err)
			}
		})
	}
}
