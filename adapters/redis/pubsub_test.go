package redis_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/gooutbox/outbox/adapters/redis"
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
	client := connect(t)
	prefix := keyPrefix(t, client)
	run := watermill.NewShortUUID()

	features := tests.Features{
		ForceShort: !runtimetest.Long(), // full sizes in the long tier (runtimetest.EnvLong)
		// Consumer groups: every group gets every entry; a group's
		// subscribers share them.
		ConsumerGroups: true,
		// At least once: an entry not acked is claimed and handed out again.
		ExactlyOnceDelivery: false,
		// Redis spreads a group's entries over its consumers regardless of
		// keys: no order across several subscribers of a group...
		GuaranteedOrder: false,
		// ...but one subscriber hands out entries in stream order, and a
		// nacked one again before the next.
		GuaranteedOrderWithSingleSubscriber: true,
		// Entries stay in the stream (in memory; on disk only as the
		// server's persistence settings say) and a group continues where it
		// stopped.
		Persistent: true,
		// One group per suite test, so a new subscriber continues the group
		// instead of reading the stream from the start.
		NewSubscriberReceivesOldMessages: false,
		RequireSingleInstance:            false,
		ContextPreserved:                 false,
		// The suite's topics get the test's key prefix.
		GenerateTopicFunc: func(tctx tests.TestContext) string {
			return prefix + "topic-" + string(tctx.TestID)
		},
	}
	newPubSub := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		pub := newPublisher(t, redis.PublisherConfig{})
		sub := newSubscriber(t, redis.SubscriberConfig{
			ConsumerGroup: group,
			BlockTime:     10 * time.Millisecond,
			// Entries left pending by the suite's closed subscribers are
			// claimed after 5s rather than 60s.
			ClaimInterval: time.Second,
			MaxIdleTime:   5 * time.Second,
		})
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
