package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

// waitTimeout bounds every wait for a message in these tests.
const waitTimeout = 15 * time.Second

// newTopic creates a topic with the given partition count and returns its
// name.
func newTopic(t testing.TB, brokers []string, partitions int) string {
	t.Helper()
	topic := "topic-" + watermill.NewShortUUID()
	cfg := testSubscriberConfig(brokers, "create-"+topic)
	cfg.TopicPartitions = partitions
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	sub, err := kafka.NewSubscriber(cfg)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatalf("SubscribeInitialize(%q): %v", topic, err)
	}
	return topic
}

// newPublisher returns a publisher closed by t.Cleanup.
func newPublisher(t testing.TB, cfg kafka.PublisherConfig) *kafka.Publisher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	pub, err := kafka.NewPublisher(cfg)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() {
		if err := pub.Close(); err != nil {
			t.Errorf("Publisher.Close: %v", err)
		}
	})
	return pub
}

// newSubscriber returns a subscriber closed by t.Cleanup.
func newSubscriber(t *testing.T, cfg kafka.SubscriberConfig) *kafka.Subscriber {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	sub, err := kafka.NewSubscriber(cfg)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	t.Cleanup(func() {
		if err := sub.Close(); err != nil {
			t.Errorf("Subscriber.Close: %v", err)
		}
	})
	return sub
}

// subscribe subscribes to topic in a new consumer group.
func subscribe(t *testing.T, brokers []string, topic string) <-chan *message.Message {
	t.Helper()
	sub := newSubscriber(t, testSubscriberConfig(brokers, "group-"+watermill.NewShortUUID()))
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", topic, err)
	}
	return ch
}

// receive returns the next message from ch, failing t after waitTimeout.
func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		if !ok {
			t.Fatal("subscription channel closed, want a message")
		}
		return msg
	case <-time.After(waitTimeout):
		t.Fatalf("no message within %s", waitTimeout)
	}
	return nil
}

// receiveN receives and acks n messages from ch.
func receiveN(t *testing.T, ch <-chan *message.Message, n int) []*message.Message {
	t.Helper()
	msgs := make([]*message.Message, 0, n)
	for range n {
		msg := receive(t, ch)
		msg.Ack()
		msgs = append(msgs, msg)
	}
	return msgs
}

// startCluster starts an in-process broker (kfake), closed by t.Cleanup,
// with a one-partition topic, and returns it, its addresses and the
// topic.
func startCluster(t testing.TB) (*kafkatest.Cluster, []string, string) {
	t.Helper()
	cluster, err := kafkatest.Start(kafkatest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.Addrs()
	return cluster, brokers, newTopic(t, brokers, 1)
}
