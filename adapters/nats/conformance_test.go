package nats_test

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
// against NATS JetStream through the URL a user passes to the relay
// command, its streams under a prefix of their own, deleted after.
func TestConformance(t *testing.T) {
	base := natsURL(t)
	topic := "conformance." + strconv.FormatUint(rand.Uint64(), 16)
	prefix := "CONF" + strconv.FormatUint(rand.Uint64()%1e9, 10)
	t.Cleanup(func() { deleteNATSStreams(t, base, prefix) })
	adaptertest.Run(t, adaptertest.Config{BrokerURL: base + "?stream_prefix=" + prefix, Topic: topic})
}

// TestPublisherPings: the publisher broker.Open makes is a
// health.BrokerPinger whose Ping succeeds against a live server, so that
// outbox relay's /readyz can check the broker.
func TestPublisherPings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, natsURL(t), broker.Config{Logger: slog.New(slog.DiscardHandler)})
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
