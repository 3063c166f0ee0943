package amqp_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/gooutbox/outbox/adapters/adaptertest"
	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/runtime/health"
)

// TestConformance runs the conformance suite (package adapters/adaptertest)
// against RabbitMQ through the URL a user passes to the relay command, with
// the README's setup: a durable queue per topic, which no one has declared
// before the relay publishes.
func TestConformance(t *testing.T) {
	uri := brokerURL(t)
	topic := "conformance." + strconv.FormatUint(rand.Uint64(), 16)
	t.Cleanup(func() { deleteTopology(t, uri, topic) })
	adaptertest.Run(t, adaptertest.Config{BrokerURL: uri, Topic: topic})
}

// TestPublisherPings: the publisher broker.Open makes is a
// health.BrokerPinger whose Ping succeeds against a live broker, so that
// outbox relay's /readyz can check the broker.
func TestPublisherPings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, brokerURL(t), broker.Config{Logger: slog.New(slog.DiscardHandler)})
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
}
