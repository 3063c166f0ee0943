package nats_test

import (
	"os"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/gooutbox/outbox/adapters/nats"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestPubSub runs Watermill's conformance suite against the adapter.
func TestPubSub(t *testing.T) {
	runSuite(t, tests.TestPubSub)
}

// TestPubSubStress runs the suite STRESS_TEST_COUNT times (default 10) in
// parallel. It takes minutes, so it runs only with OUTBOX_TEST_STRESS=1.
func TestPubSubStress(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "Watermill's stress suite")
	if os.Getenv("STRESS_TEST_COUNT") == "" {
		t.Setenv("STRESS_TEST_COUNT", "2")
	}
	runSuite(t, tests.TestPubSubStressTest)
}

func runSuite(t *testing.T, suite func(*testing.T, tests.Features, tests.PubSubConstructor, tests.ConsumerGroupPubSubConstructor)) {
	_, js := connect(t)
	prefix := streamPrefix(t, js)
	run := watermill.NewShortUUID()

	features := tests.Features{
		ForceShort: !runtimetest.Long(), // full sizes in the long tier (runtimetest.EnvLong)
		// One durable consumer per group: the group's subscribers share its
		// messages, and every group gets every message.
		ConsumerGroups: true,
		// At least once: a message whose ack is lost is delivered again.
		ExactlyOnceDelivery: false,
		// MaxAckPending 1: a group's messages are handled one after the
		// other in stream order, across all its subscribers, and a nacked
		// message comes again before anything after it.
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: false,
		// Messages live in the stream (file storage); a new subscriber of a
		// group continues where the group stopped.
		Persistent: true,
		// One group per suite test, so a new subscriber continues the
		// group's consumer instead of replaying the stream.
		NewSubscriberReceivesOldMessages: false,
		RequireSingleInstance:            false,
		// The publisher's message context does not cross the wire.
		ContextPreserved: false,
	}
	newPubSub := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		stream := nats.StreamConfig{Prefix: prefix}
		pub := newPublisher(t, nats.PublisherConfig{Stream: stream})
		sub := newSubscriber(t, nats.SubscriberConfig{ConsumerGroup: group, Stream: stream})
		return pub, sub
	}
	suite(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return newPubSub(t, groupName(t, run))
		},
		newPubSub,
	)
}

// groupName returns a consumer group name unique to t and this run.
func groupName(t testing.TB, run string) string {
	return "test-" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + "-" + run
}
