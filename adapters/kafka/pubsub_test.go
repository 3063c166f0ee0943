package kafka_test

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

var verbose = flag.Bool("kafka.log", false, "log the adapters' debug output to stderr")

// Timing for tests: short heartbeats so that members joining a group get
// partitions within about 0.3s, and a short MaxWait so that closing a
// subscription takes at most that long (see reference/services.md). The
// session timeout stays at 6s, the smallest a real broker accepts by default,
// so the tests also run against OUTBOX_TEST_KAFKA_BROKERS; kfake members
// always leave the group on Close, so it never delays a test.
const (
	testMaxWait           = 250 * time.Millisecond
	testHeartbeatInterval = 250 * time.Millisecond
	testSessionTimeout    = 6 * time.Second
	testRebalanceTimeout  = 3 * time.Second
	// testPartitions is the partition count of the suite's topics: more than
	// one, so that ordering and consumer groups are exercised across
	// partitions, and prime, not a divisor of the 16 kinds of message that
	// TestPublishSubscribeInOrder checks, so that keying that does not
	// follow the kind (round robin, say) puts one kind on several partitions
	// and fails the test. (With 8 partitions, 16 kinds sent round robin land
	// one kind per partition and the test cannot see it.)
	testPartitions = 5
)

func testLogger() watermill.LoggerAdapter {
	if *verbose {
		return watermill.NewStdLogger(true, false)
	}
	return watermill.NopLogger{}
}

// testSubscriberConfig returns a subscriber config with test timing.
func testSubscriberConfig(brokers []string, group string) kafka.SubscriberConfig {
	return kafka.SubscriberConfig{
		Brokers:                brokers,
		ConsumerGroup:          group,
		MaxWait:                testMaxWait,
		HeartbeatInterval:      testHeartbeatInterval,
		SessionTimeout:         testSessionTimeout,
		RebalanceTimeout:       testRebalanceTimeout,
		TopicPartitions:        testPartitions,
		TopicReplicationFactor: 1,
		OverwriteReaderConfig: func(rc *kafkago.ReaderConfig) {
			// kafka-go waits 5s after a failed join by default.
			rc.JoinGroupBackoff = 100 * time.Millisecond
		},
	}
}

// suiteKey keys a message like the default, by its aggregate_id, and
// otherwise by its payload. TestPublishSubscribeInOrder publishes 16 kinds of
// message, told apart only by their payload, and checks that each kind
// arrives in publish order; with the payload as the Kafka key, the 16 kinds
// spread over testPartitions partitions and 10 competing subscribers, and the
// test checks exactly the guarantee the adapter makes: order per key. (The
// default key would give these messages a nil key, round robin, and no
// order.)
func suiteKey(topic string, msg *message.Message) ([]byte, error) {
	if key, err := kafka.AggregateIDKey(topic, msg); key != nil || err != nil {
		return key, err
	}
	return msg.Payload, nil
}

func newSuitePubSub(t *testing.T, brokers []string, group string) (message.Publisher, message.Subscriber) {
	t.Helper()
	logger := testLogger()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers:                brokers,
		Key:                    suiteKey,
		AllowAutoTopicCreation: true,
	}, logger)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	sub, err := kafka.NewSubscriber(testSubscriberConfig(brokers, group), logger)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	// The suite closes what it builds, except the subscribers of a
	// multiplied subscriber (it calls Close before Subscribe), which would
	// otherwise keep consuming until the cluster goes away. Close is
	// idempotent, so closing everything again is harmless.
	t.Cleanup(func() {
		_ = pub.Close()
		_ = sub.Close()
	})
	return pub, sub
}

// TestPubSub runs Watermill's conformance suite against the adapter.
func TestPubSub(t *testing.T) {
	brokers := kafkatest.NewCluster(t)
	run := watermill.NewShortUUID()

	features := tests.Features{
		// Subscribers in one consumer group share the topic's partitions, and
		// each group gets every message (TestConsumerGroups).
		ConsumerGroups: true,
		// Delivery is at least once: a message handled but not yet committed
		// when a subscription closes or a rebalance moves its partition is
		// delivered again. kafka-go has no idempotent producer either, so an
		// ambiguous publish that is retried is a duplicate on the topic.
		ExactlyOnceDelivery: false,
		// Records with the same key go to one partition (kafka.Hash), one
		// partition is consumed by one group member at a time, and a
		// subscription hands out the next message only after the current one
		// is acked, so the order per key holds even with 10 competing
		// subscribers (see suiteKey for how the suite's messages are keyed).
		GuaranteedOrder: true,
		// Order holds with many subscribers, not only with one.
		GuaranteedOrderWithSingleSubscriber: false,
		// Messages live in the broker, not in the Publisher or Subscriber:
		// a new Subscriber of the group continues where the last one
		// committed.
		Persistent: true,
		// Every constructor call returns a member of the same group (one
		// group per test), so a new subscriber continues from the group's
		// committed offsets instead of replaying the topic. (A new group
		// would replay it, as StartOffset is FirstOffset.)
		NewSubscriberReceivesOldMessages: false,
		// Any number of instances may run against one cluster.
		RequireSingleInstance: false,
		// Message contexts derive from the Subscribe context, not from the
		// publisher's message context, which does not cross the wire.
		ContextPreserved: false,
		// No restart command: kfake runs in-process and cannot be restarted
		// with its data, so TestReconnect is skipped.
	}

	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			// One consumer group per suite test, so that the parallel tests'
			// members do not trigger rebalances in each other's groups.
			return newSuitePubSub(t, brokers, groupName(t, run))
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return newSuitePubSub(t, brokers, group)
		},
	)
}

// groupName returns a consumer group name unique to t and this run.
func groupName(t testing.TB, run string) string {
	return "test-" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + "-" + run
}
