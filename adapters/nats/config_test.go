package nats_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gooutbox/outbox/adapters/nats"
)

func TestPublisherConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  nats.PublisherConfig
		ok   bool
	}{
		{"zero value", nats.PublisherConfig{}, true},
		{"negative dedup window", nats.PublisherConfig{Stream: nats.StreamConfig{DedupWindow: -time.Second}}, false},
		{"bad prefix", nats.PublisherConfig{Stream: nats.StreamConfig{Prefix: "a.b"}}, false},
		{"negative replicas", nats.PublisherConfig{Stream: nats.StreamConfig{Replicas: -1}}, false},
		{"negative timeout", nats.PublisherConfig{PublishTimeout: -1}, false},
		{"too many in flight", nats.PublisherConfig{MaxInFlight: 5000}, false},
		{"negative reconnect wait", nats.PublisherConfig{ReconnectWait: -time.Second}, false},
		{"configure keeps dedup", nats.PublisherConfig{Stream: nats.StreamConfig{Configure: func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }}}, true},
		{"configure clears dedup", nats.PublisherConfig{Stream: nats.StreamConfig{Configure: func(c *jetstream.StreamConfig) { c.Duplicates = 0 }}}, false},
		{"configure work queue", nats.PublisherConfig{Stream: nats.StreamConfig{Configure: func(c *jetstream.StreamConfig) { c.Retention = jetstream.WorkQueuePolicy }}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.ok != (err == nil) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, nats.ErrInvalidConfig) {
				t.Errorf("Validate() = %v, want an error wrapping ErrInvalidConfig", err)
			}
			if !tt.ok {
				if _, err := nats.NewPublisher(tt.cfg); !errors.Is(err, nats.ErrInvalidConfig) {
					t.Errorf("NewPublisher() = %v, want an error wrapping ErrInvalidConfig", err)
				}
			}
		})
	}
}

func TestSubscriberConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  nats.SubscriberConfig
		ok   bool
	}{
		{"zero value but group", nats.SubscriberConfig{ConsumerGroup: "g"}, true},
		{"no group", nats.SubscriberConfig{}, false},
		{"short ack wait", nats.SubscriberConfig{ConsumerGroup: "g", AckWait: time.Millisecond}, false},
		{"negative max ack pending", nats.SubscriberConfig{ConsumerGroup: "g", MaxAckPending: -1}, false},
		{"max deliver below -1", nats.SubscriberConfig{ConsumerGroup: "g", MaxDeliver: -2}, false},
		{"negative nak delay", nats.SubscriberConfig{ConsumerGroup: "g", NakDelay: -1}, false},
		{"negative max wait", nats.SubscriberConfig{ConsumerGroup: "g", MaxWait: -1}, false},
		{"negative reconnect wait", nats.SubscriberConfig{ConsumerGroup: "g", ReconnectWait: -1}, false},
		{"ack none", nats.SubscriberConfig{ConsumerGroup: "g", ConfigureConsumer: func(c *jetstream.ConsumerConfig) { c.AckPolicy = jetstream.AckNonePolicy }}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.ok != (err == nil) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, nats.ErrInvalidConfig) {
				t.Errorf("Validate() = %v, want an error wrapping ErrInvalidConfig", err)
			}
		})
	}
}

func TestStreamName(t *testing.T) {
	a := nats.StreamName("OUTBOX", "orders.created")
	b := nats.StreamName("OUTBOX", "orders_created")
	if !strings.HasPrefix(a, "OUTBOX_orders_created_") || len(a) != len("OUTBOX_orders_created_")+8 {
		t.Errorf("StreamName = %q, want OUTBOX_orders_created_ and 8 hex digits", a)
	}
	if a == b {
		t.Errorf("orders.created and orders_created share stream %q", a)
	}
	for _, topic := range []string{"a b", "a*b", "a>b", "a/b", `a\\b`, strings.Repeat("x", 300), "ünïcode"} {
		n := nats.StreamName("P", topic)
		if strings.ContainsAny(n, ". *>/\\\\") || len(n) > 70 {
			t.Errorf("StreamName(%q) = %q: invalid or too long", topic, n)
		}
	}
	if got := nats.StreamName("", "x"); strings.HasPrefix(got, "_") {
		t.Errorf("StreamName with no prefix = %q", got)
	}
	if nats.ConsumerName("billing.v1") == nats.ConsumerName("billing_v1") {
		t.Error("ConsumerName collides for billing.v1 and billing_v1")
	}
}
