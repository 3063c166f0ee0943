package kafka_test

import (
	"errors"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka"
)

func TestPublisherConfigValidate(t *testing.T) {
	brokers := []string{"127.0.0.1:9092"}
	tests := []struct {
		name string
		cfg  kafka.PublisherConfig
		ok   bool
	}{
		{"zero value but brokers", kafka.PublisherConfig{Brokers: brokers}, true},
		{"no brokers", kafka.PublisherConfig{}, false},
		{"blank broker", kafka.PublisherConfig{Brokers: []string{" "}}, false},
		{"broker URL, not address", kafka.PublisherConfig{Brokers: []string{"127.0.0.1:9092", "kafka://127.0.0.1:9093"}}, false},
		{"negative batch size", kafka.PublisherConfig{Brokers: brokers, BatchSize: -1}, false},
		{"negative batch bytes", kafka.PublisherConfig{Brokers: brokers, BatchBytes: -1}, false},
		{"negative batch timeout", kafka.PublisherConfig{Brokers: brokers, BatchTimeout: -time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.ok != (err == nil) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, kafka.ErrInvalidConfig) {
				t.Errorf("Validate() = %v, want an error wrapping ErrInvalidConfig", err)
			}
			pub, err := kafka.NewPublisher(tt.cfg)
			if tt.ok != (err == nil) {
				t.Fatalf("NewPublisher() error = %v, want ok=%v", err, tt.ok)
			}
			if err == nil {
				pub.Close()
			} else if !errors.Is(err, kafka.ErrInvalidConfig) {
				t.Errorf("NewPublisher() = %v, want an error wrapping ErrInvalidConfig", err)
			}
		})
	}
}

func TestSubscriberConfigValidate(t *testing.T) {
	valid := func(mod func(*kafka.SubscriberConfig)) kafka.SubscriberConfig {
		c := kafka.SubscriberConfig{Brokers: []string{"127.0.0.1:9092"}, ConsumerGroup: "g"}
		mod(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  kafka.SubscriberConfig
		ok   bool
	}{
		{"zero value but brokers and group", valid(func(*kafka.SubscriberConfig) {}), true},
		{"last offset", valid(func(c *kafka.SubscriberConfig) { c.StartOffset = kafkago.LastOffset }), true},
		{"no brokers", valid(func(c *kafka.SubscriberConfig) { c.Brokers = nil }), false},
		{"no group", valid(func(c *kafka.SubscriberConfig) { c.ConsumerGroup = "" }), false},
		{"bad start offset", valid(func(c *kafka.SubscriberConfig) { c.StartOffset = 42 }), false},
		{"negative max wait", valid(func(c *kafka.SubscriberConfig) { c.MaxWait = -1 }), false},
		{"negative partitions", valid(func(c *kafka.SubscriberConfig) { c.TopicPartitions = -1 }), false},
		{"min above max bytes", valid(func(c *kafka.SubscriberConfig) { c.MinBytes, c.MaxBytes = 10, 5 }), false},
		{"broker URL, not address", valid(func(c *kafka.SubscriberConfig) { c.Brokers = []string{"kafka://127.0.0.1:9092"} }), false},
		{"heartbeat not below session timeout", valid(func(c *kafka.SubscriberConfig) { c.HeartbeatInterval, c.SessionTimeout = 10*time.Second, 3*time.Second }), false},
		{"heartbeat above the default session timeout", valid(func(c *kafka.SubscriberConfig) { c.HeartbeatInterval = time.Minute }), false},
		{"heartbeat below session timeout", valid(func(c *kafka.SubscriberConfig) { c.HeartbeatInterval, c.SessionTimeout = time.Second, 6*time.Second }), true},
		{"escape hatch breaks reader", valid(func(c *kafka.SubscriberConfig) {
			c.OverwriteReaderConfig = func(rc *kafkago.ReaderConfig) { rc.MaxBytes = -1 }
		}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := kafka.NewSubscriber(tt.cfg)
			if tt.ok != (err == nil) {
				t.Fatalf("NewSubscriber() error = %v, want ok=%v", err, tt.ok)
			}
			if err == nil {
				sub.Close()
			} else if !errors.Is(err, kafka.ErrInvalidConfig) {
				t.Errorf("NewSubscriber() = %v, want an error wrapping ErrInvalidConfig", err)
			}
		})
	}
}
