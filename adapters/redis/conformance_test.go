package redis_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/gooutbox/outbox/adapters/adaptertest"
)

// TestConformance runs the conformance suite (package adapters/adaptertest)
// against Redis Streams through the URL a user passes to the relay command;
// the stream is deleted after.
func TestConformance(t *testing.T) {
	uri := redisURL(t)
	topic := "conformance." + strconv.FormatUint(rand.Uint64(), 16)
	client := connect(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := client.Del(ctx, topic).Err(); err != nil {
			t.Logf("cleanup: delete %s: %v", topic, err)
		}
	})
	adaptertest.Run(t, adaptertest.Config{BrokerURL: uri, Topic: topic})
}

// TestPublisherPings: the publisher broker.Open makes is a
// health.BrokerPinger whose Ping succeeds against a live server, so that
// outbox relay's /readyz can check the broker.
func TestPublisherPings(t *testing.T) {
	adaptertest.Ping(t, redisURL(t))
}
