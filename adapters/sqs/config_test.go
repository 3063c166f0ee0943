package sqs_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/sqs"
)

func TestNames(t *testing.T) {
	t.Parallel()
	for topic, want := range map[string]string{
		"orders":         "orders.fifo",
		"orders.fifo":    "orders.fifo",
		"orders.created": "orders_created.fifo",
		"a/b c-d_e":      "a_b_c-d_e.fifo",
		"ünï":            "_n_.fifo",
	} {
		if got, err := sqs.QueueName(topic); err != nil || got != want {
			t.Errorf("QueueName(%q) = %q, %v; want %q", topic, got, err, want)
		}
	}
	for _, topic := range []string{"", ".fifo", strings.Repeat("x", 76)} {
		if _, err := sqs.QueueName(topic); !errors.Is(err, sqs.ErrInvalidTopic) {
			t.Errorf("QueueName(%q) error = %v, want ErrInvalidTopic", topic, err)
		}
	}
	if got, err := sqs.QueueName(strings.Repeat("x", 75)); err != nil || len(got) != 80 {
		t.Errorf("75-character topic: %q, %v", got, err)
	}
	if got, err := sqs.TopicName(strings.Repeat("x", 200)); err != nil || len(got) != 205 {
		t.Errorf("TopicName of 200 characters: %q, %v", got, err)
	}
	long1, err1 := sqs.GroupQueueName(strings.Repeat("t", 70), "group-1")
	long2, err2 := sqs.GroupQueueName(strings.Repeat("t", 70), "group-2")
	if err1 != nil || err2 != nil || len(long1) != 80 || long1 == long2 || !strings.HasSuffix(long1, ".fifo") {
		t.Errorf("long group queue names %q %q (%v %v): want distinct 80-character .fifo names", long1, long2, err1, err2)
	}
	if got, _ := sqs.GroupQueueName("orders", "billing"); got != "orders-billing.fifo" {
		t.Errorf("GroupQueueName = %q", got)
	}
}

func TestAggregateGroupID(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("id", nil)
	if got, _ := sqs.AggregateGroupID("topic", msg); got != "topic" {
		t.Errorf("no aggregate_id: %q, want the topic", got)
	}
	msg.Metadata.Set("aggregate_id", "order-1")
	if got, _ := sqs.AggregateGroupID("topic", msg); got != "order-1" {
		t.Errorf("got %q", got)
	}
	msg.Metadata.Set("aggregate_id", "with space ü")
	got, _ := sqs.AggregateGroupID("topic", msg)
	if !strings.HasPrefix(got, "sha256-") || len(got) != 71 {
		t.Errorf("invalid id mapped to %q", got)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	bad := []error{
		sqs.PublisherConfig{MaxMessageBytes: -1}.Validate(),
		sqs.PublisherConfig{QueueAttributes: map[string]string{"FifoQueue": "false"}}.Validate(),
		sqs.SNSPublisherConfig{MaxMessageBytes: -1}.Validate(),
		sqs.SubscriberConfig{WaitTime: 21 * time.Second}.Validate(),
		sqs.SubscriberConfig{MaxMessages: 11}.Validate(),
		sqs.SubscriberConfig{NackDelay: -time.Second}.Validate(),
	}
	for i, err := range bad {
		if !errors.Is(err, sqs.ErrInvalidConfig) {
			t.Errorf("case %d: %v, want ErrInvalidConfig", i, err)
		}
	}
	if err := (sqs.SubscriberConfig{}).Validate(); err != nil {
		t.Errorf("zero SubscriberConfig: %v", err)
	}
	if _, err := sqs.NewSubscriber(sqs.SubscriberConfig{MaxMessages: -1}); !errors.Is(err, sqs.ErrInvalidConfig) {
		t.Errorf("NewSubscriber: %v", err)
	}
}
