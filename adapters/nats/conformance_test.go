package nats_test

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/gooutbox/outbox/adapters/adaptertest"
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
	adaptertest.Ping(t, natsURL(t))
}
