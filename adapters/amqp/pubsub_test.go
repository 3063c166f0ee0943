package amqp_test

import (
	"os"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/gooutbox/outbox/adapters/amqp"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// features are the adapter's honest Watermill features, in both modes.
func features(consumerGroups bool) tests.Features {
	return tests.Features{
		ForceShort: !runtimetest.Long(), // full sizes in the long tier (runtimetest.EnvLong)
		// ModePubSub: one queue per (topic, group), each group gets every
		// message. ModeQueue: one queue per topic, so no groups.
		ConsumerGroups: consumerGroups,
		// Delivery is at least once: a message being handled when a
		// subscription closes is requeued and delivered again, and a
		// publish whose confirm was lost is republished.
		ExactlyOnceDelivery: false,
		// Queues are declared with x-single-active-consumer: RabbitMQ
		// delivers a queue to one consumer at a time, with prefetch 1 and
		// one message in flight, so order holds even with the suite's 10
		// competing subscribers.
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: false,
		// Messages live in durable queues, not in the Subscriber.
		Persistent: true,
		// A consumed message is gone from its queue.
		NewSubscriberReceivesOldMessages: false,
		RequireSingleInstance:            false,
		// The message context does not cross the wire.
		ContextPreserved: false,
		// No restart command: the test server is shared, so TestReconnect
		// is skipped; TestPublishAfterConnectionLoss covers reconnects.
	}
}

func newSuitePubSub(t *testing.T, cfg amqp.Config) (message.Publisher, message.Subscriber) {
	t.Helper()
	pubCfg := cfg
	pubCfg.Group = ""
	if pubCfg.Logger == nil {
		pubCfg.Logger = testLogger()
	}
	pub, err := amqp.NewPublisher(pubCfg)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	sub, err := amqp.NewSubscriber(cfg)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	// The suite closes what it builds but for the subscribers of a
	// multiplied subscriber; Close is idempotent.
	t.Cleanup(func() {
		_ = pub.Close()
		_ = sub.Close()
	})
	return pub, sub
}

// TestPubSub runs Watermill's conformance suite in ModeQueue, the default.
// The suite's queues expire (x-expires) once unused.
func TestPubSub(t *testing.T) {
	cfg := testConfig(t)
	tests.TestPubSub(t, features(false),
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return newSuitePubSub(t, cfg)
		},
		nil,
	)
}

// autoDeleteExchanges declares exchanges auto-deleted, so that the suite's
// exchanges go away with their last binding when the queues expire.
type autoDeleteExchanges struct{ wamqp.DefaultTopologyBuilder }

func (b *autoDeleteExchanges) BuildTopology(ch *amqp091.Channel, params wamqp.BuildTopologyParams, cfg wamqp.Config, logger watermill.LoggerAdapter) error {
	cfg.Exchange.AutoDeleted = true
	return b.DefaultTopologyBuilder.BuildTopology(ch, params, cfg, logger)
}

func (b *autoDeleteExchanges) ExchangeDeclare(ch *amqp091.Channel, name string, cfg wamqp.Config) error {
	cfg.Exchange.AutoDeleted = true
	return b.DefaultTopologyBuilder.ExchangeDeclare(ch, name, cfg)
}

// TestPubSubGroups runs Watermill's conformance suite in ModePubSub. The
// suite names its own topics; their queues expire and their exchanges are
// auto-deleted with the last queue.
func TestPubSubGroups(t *testing.T) {
	cfg := testConfig(t)
	cfg.Mode = amqp.ModePubSub
	cfg.TopologyBuilder = &autoDeleteExchanges{}
	tests.TestPubSub(t, features(true),
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			c := cfg
			c.Group = "test"
			return newSuitePubSub(t, c)
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			c := cfg
			c.Group = group
			return newSuitePubSub(t, c)
		},
	)
}

// TestPubSubStress runs the conformance suite (ModeQueue) many times in
// parallel: STRESS_TEST_COUNT copies, 10 by default. Skipped with -short.
func TestPubSubStress(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "Watermill's stress suite")
	if os.Getenv("STRESS_TEST_COUNT") == "" {
		t.Setenv("STRESS_TEST_COUNT", "2")
	}
	cfg := testConfig(t)
	tests.TestPubSubStressTest(t, features(false),
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return newSuitePubSub(t, cfg)
		},
		nil,
	)
}
