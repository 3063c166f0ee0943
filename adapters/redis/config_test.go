package redis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gooutbox/outbox/adapters/redis"
)

func TestPublisherConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  redis.PublisherConfig
		ok   bool
	}{
		{"zero value", redis.PublisherConfig{}, true},
		{"max len", redis.PublisherConfig{MaxLen: 1000}, true},
		{"max age", redis.PublisherConfig{MaxAge: time.Hour}, true},
		{"both", redis.PublisherConfig{MaxLen: 1000, MaxAge: time.Hour}, false},
		{"negative max len", redis.PublisherConfig{MaxLen: -1}, false},
		{"negative max age", redis.PublisherConfig{MaxAge: -time.Hour}, false},
		{"sub-millisecond max age", redis.PublisherConfig{MaxAge: time.Microsecond}, false},
		{"negative max bytes", redis.PublisherConfig{MaxMessageBytes: -1}, false},
		{"negative timeout", redis.PublisherConfig{PublishTimeout: -1}, false},
		{"dedup window", redis.PublisherConfig{DedupWindow: time.Hour}, true},
		{"one-millisecond dedup window", redis.PublisherConfig{DedupWindow: time.Millisecond}, true},
		{"dedup disabled", redis.PublisherConfig{DedupWindow: -1}, true},
		{"sub-millisecond dedup window", redis.PublisherConfig{DedupWindow: time.Microsecond}, false},
		{"bad url", redis.PublisherConfig{URL: "http://x"}, false},
		{"negative database", redis.PublisherConfig{URL: "redis://127.0.0.1:6379/-1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub, err := redis.NewPublisher(tt.cfg)
			if tt.ok != (err == nil) {
				t.Fatalf("NewPublisher() error = %v, want ok=%v", err, tt.ok)
			}
			if err == nil {
				pub.Close()
			} else if !errors.Is(err, redis.ErrInvalidConfig) {
				t.Errorf("NewPublisher() = %v, want an error wrapping ErrInvalidConfig", err)
			}
		})
	}
}

func TestSubscriberConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  redis.SubscriberConfig
		ok   bool
	}{
		{"zero value but group", redis.SubscriberConfig{ConsumerGroup: "g"}, true},
		{"no group", redis.SubscriberConfig{}, false},
		{"negative block time", redis.SubscriberConfig{ConsumerGroup: "g", BlockTime: -1}, false},
		{"negative claim interval", redis.SubscriberConfig{ConsumerGroup: "g", ClaimInterval: -1}, false},
		{"negative max idle", redis.SubscriberConfig{ConsumerGroup: "g", MaxIdleTime: -1}, false},
		{"negative nack sleep", redis.SubscriberConfig{ConsumerGroup: "g", NackResendSleep: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := redis.NewSubscriber(tt.cfg)
			if tt.ok != (err == nil) {
				t.Fatalf("NewSubscriber() error = %v, want ok=%v", err, tt.ok)
			}
			if err == nil {
				if err := sub.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				if err := sub.Close(); err != nil {
					t.Errorf("second Close: %v", err)
				}
			} else if !errors.Is(err, redis.ErrInvalidConfig) {
				t.Errorf("NewSubscriber() = %v, want an error wrapping ErrInvalidConfig", err)
			}
		})
	}
}
