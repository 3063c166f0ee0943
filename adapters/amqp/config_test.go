package amqp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/gooutbox/outbox/adapters/amqp"
	"github.com/gooutbox/outbox/runtime"
)

const anyURL = "amqp://guest:guest@127.0.0.1:1/"

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  amqp.Config
		ok   bool
	}{
		{"zero but URL", amqp.Config{URL: anyURL}, true},
		{"amqps", amqp.Config{URL: "amqps://u:p@host:5671/vhost"}, true},
		{"pubsub with groups", amqp.Config{URL: anyURL, Mode: amqp.ModePubSub, Groups: []string{"a", "b"}}, true},
		{"quorum", amqp.Config{URL: anyURL, Quorum: true}, true},
		{"no URL", amqp.Config{}, false},
		{"bad URL", amqp.Config{URL: "http://host"}, false},
		{"unknown mode", amqp.Config{URL: anyURL, Mode: 7}, false},
		{"groups in queue mode", amqp.Config{URL: anyURL, Groups: []string{"a"}}, false},
		{"empty group", amqp.Config{URL: anyURL, Mode: amqp.ModePubSub, Groups: []string{""}}, false},
		{"negative prefetch", amqp.Config{URL: anyURL, PrefetchCount: -1}, false},
		{"negative timeout", amqp.Config{URL: anyURL, ConfirmTimeout: -time.Second}, false},
		{"quorum not durable", amqp.Config{URL: anyURL, Quorum: true, NotDurable: true}, false},
		{"queue type argument", amqp.Config{URL: anyURL, QueueArguments: amqp091.Table{"x-queue-type": "stream"}}, false},
		{"single active consumer argument", amqp.Config{URL: anyURL, QueueArguments: amqp091.Table{"x-single-active-consumer": false}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.ok && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if !tt.ok && !errors.Is(err, amqp.ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestConstructorsCheckGroup: Group belongs to ModePubSub subscribers only.
// These fail before dialling.
func TestConstructorsCheckGroup(t *testing.T) {
	if _, err := amqp.NewPublisher(amqp.Config{URL: anyURL, Mode: amqp.ModePubSub, Group: "g"}); !errors.Is(err, amqp.ErrInvalidConfig) {
		t.Errorf("NewPublisher with Group = %v, want ErrInvalidConfig", err)
	}
	if _, err := amqp.NewSubscriber(amqp.Config{URL: anyURL, Mode: amqp.ModePubSub}); !errors.Is(err, amqp.ErrInvalidConfig) {
		t.Errorf("NewSubscriber in ModePubSub without Group = %v, want ErrInvalidConfig", err)
	}
	if _, err := amqp.NewSubscriber(amqp.Config{URL: anyURL, Group: "g"}); !errors.Is(err, amqp.ErrInvalidConfig) {
		t.Errorf("NewSubscriber in ModeQueue with Group = %v, want ErrInvalidConfig", err)
	}
	if _, err := amqp.NewSubscriber(amqp.Config{}); !errors.Is(err, amqp.ErrInvalidConfig) {
		t.Errorf("NewSubscriber without URL = %v, want ErrInvalidConfig", err)
	}
}

// TestWatermillConfig: the watermill-amqp config names the queues and
// exchanges as documented and carries the ordering and durability settings.
func TestWatermillConfig(t *testing.T) {
	type shape struct {
		Queue, Exchange, ExchangeType, PublishKey, BindKey string
		Durable, Mandatory, Confirm                        bool
		Prefetch                                           int
		Args                                               amqp091.Table
	}
	get := func(cfg amqp.Config, group, topic string) shape {
		wc := cfg.WatermillConfig(group)
		return shape{
			Queue: wc.Queue.GenerateName(topic), Exchange: wc.Exchange.GenerateName(topic), ExchangeType: wc.Exchange.Type,
			PublishKey: wc.Publish.GenerateRoutingKey(topic), BindKey: wc.QueueBind.GenerateRoutingKey(topic),
			Durable: wc.Queue.Durable && wc.Exchange.Durable, Mandatory: wc.Publish.Mandatory, Confirm: wc.Publish.ConfirmDelivery,
			Prefetch: wc.Consume.Qos.PrefetchCount, Args: wc.Queue.Arguments,
		}
	}
	tests := []struct {
		name  string
		cfg   amqp.Config
		group string
		want  shape
	}{
		{"queue", amqp.Config{URL: anyURL}, "", shape{
			Queue: "orders", PublishKey: "orders", Durable: true, Mandatory: true, Confirm: true, Prefetch: 1,
			Args: amqp091.Table{"x-single-active-consumer": true},
		}},
		{"pubsub quorum", amqp.Config{URL: anyURL, Mode: amqp.ModePubSub, Quorum: true, PrefetchCount: 5}, "billing", shape{
			Queue: "orders_billing", Exchange: "orders", ExchangeType: "fanout", Durable: true, Mandatory: true, Confirm: true, Prefetch: 5,
			Args: amqp091.Table{"x-single-active-consumer": true, "x-queue-type": "quorum"},
		}},
		{"competing, not durable, extra args", amqp.Config{URL: anyURL, NotDurable: true, CompetingConsumers: true, QueueArguments: amqp091.Table{"x-expires": int64(1000)}}, "", shape{
			Queue: "orders", PublishKey: "orders", Mandatory: true, Confirm: true, Prefetch: 1,
			Args: amqp091.Table{"x-expires": int64(1000)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, get(tt.cfg, tt.group, "orders")); diff != "" {
				t.Errorf("WatermillConfig (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPublisherClosed(t *testing.T) {
	pub, err := amqp.NewPublisher(amqp.Config{URL: anyURL})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := pub.Publish("orders", newEvent("a", 1)); !errors.Is(err, amqp.ErrPublisherClosed) {
		t.Errorf("Publish after Close = %v, want ErrPublisherClosed", err)
	}
}

func TestSubscriberClosed(t *testing.T) {
	sub := newSubscriber(t, testConfig(t))
	if err := sub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := sub.SubscribeInitialize("orders"); !errors.Is(err, amqp.ErrSubscriberClosed) {
		t.Errorf("SubscribeInitialize after Close = %v, want ErrSubscriberClosed", err)
	}
	if _, err := sub.Subscribe(t.Context(), "orders"); !errors.Is(err, amqp.ErrSubscriberClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrSubscriberClosed", err)
	}
}

// TestUnreachableBrokerIsRetryable: a broker that does not answer fails
// Publish with a retryable error.
func TestUnreachableBrokerIsRetryable(t *testing.T) {
	pub, err := amqp.NewPublisher(amqp.Config{URL: anyURL, ConfirmTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish("orders", newEvent("a", 1))
	if err == nil {
		t.Fatal("Publish to an unreachable broker = nil")
	}
	if runtime.IsPermanent(err) {
		t.Fatalf("Publish = %v, want a retryable error", err)
	}
}
