package amqp_test

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/gooutbox/outbox/adapters/adaptertest"
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
	adaptertest.Ping(t, brokerURL(t))
}
