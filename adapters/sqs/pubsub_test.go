package sqs_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/gooutbox/outbox/adapters/sqs"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// suiteGroupID groups a message like the default, by its aggregate_id, and
// otherwise by its payload, or its UUID when it has none.
// TestPublishSubscribeInOrder publishes 16 kinds of message told apart only
// by their payload and checks the order within each kind, which one group
// per payload keeps; the other tests' messages then spread over many
// groups and are delivered in parallel, as an application's aggregates are.
// (The default would put all of them in the topic's one group, correct but
// one message at a time.)
func suiteGroupID(topic string, msg *message.Message) (string, error) {
	if msg.Metadata.Get("aggregate_id") != "" {
		return sqs.AggregateGroupID(topic, msg)
	}
	if len(msg.Payload) == 0 {
		return msg.UUID, nil
	}
	sum := sha256.Sum256(msg.Payload)
	return hex.EncodeToString(sum[:]), nil
}

// TestPubSub runs Watermill's conformance suite against the SQS publisher
// and subscriber (one FIFO queue per topic).
func TestPubSub(t *testing.T) {
	parallelWhenShort(t)
	endpoint := sqstest.Endpoint(t)
	features := tests.Features{
		ForceShort: !runtimetest.Long(), // full sizes in the long tier (runtimetest.EnvLong)
		// A queue has no consumer groups: all its subscribers share it.
		// Groups need the SNS fan-out (TestPubSubSNS).
		ConsumerGroups: false,
		// At least once: a message whose delete fails, or whose handler
		// outlives the visibility timeout, is delivered again.
		ExactlyOnceDelivery: false,
		// FIFO: a message group is handed out in order, one message at a
		// time, even to competing subscribers (see suiteGroupID for the
		// suite's groups).
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: false,
		// Messages live in the queue until deleted.
		Persistent: true,
		// Acked messages are deleted; nothing is replayed.
		NewSubscriberReceivesOldMessages: false,
		RequireSingleInstance:            false,
		// Message contexts derive from the Subscribe context.
		ContextPreserved: false,
	}
	constructor := func(t *testing.T) (message.Publisher, message.Subscriber) {
		pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(endpoint), CreateQueue: true, GroupID: suiteGroupID})
		sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(endpoint), CreateQueue: true})
		return pub, sub
	}
	tests.TestPubSub(t, features, constructor, nil)
}

// TestPubSubSNS runs the suite against the SNS publisher and subscribers
// that read the fan-out, one queue per consumer group.
func TestPubSubSNS(t *testing.T) {
	parallelWhenShort(t)
	endpoint := sqstest.Endpoint(t)
	features := tests.Features{
		ForceShort: !runtimetest.Long(), // full sizes in the long tier (runtimetest.EnvLong)
		// Every group has its own queue subscribed to the topic.
		ConsumerGroups:                      true,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: false,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    false,
		RequireSingleInstance:               false,
		ContextPreserved:                    false,
	}
	newPubSub := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		pub := newSNSPublisher(t, sqs.SNSPublisherConfig{AWS: clientConfig(endpoint), GroupID: suiteGroupID})
		sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(endpoint), ConsumerGroup: group, CreateQueue: true})
		return pub, sub
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return newPubSub(t, "default") },
		newPubSub,
	)
}
