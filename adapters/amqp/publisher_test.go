package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/gooutbox/outbox/adapters/amqp"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// newEvent returns a message for aggregate agg with a UUIDv7 and the
// outbox's metadata.
func newEvent(agg string, seq int) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"seq":%d}`, seq)))
	msg.Metadata.Set(runtime.MetadataAggregateID, agg)
	msg.Metadata.Set(runtime.MetadataEventType, "test.happened")
	msg.Metadata.Set("seq", strconv.Itoa(seq))
	return msg
}

// events returns n messages spread round robin over aggregates, and the
// UUIDs per aggregate in publish order.
func events(n, aggregates int) ([]*message.Message, map[string][]string) {
	msgs := make([]*message.Message, n)
	want := map[string][]string{}
	for i := range n {
		agg := fmt.Sprintf("agg-%03d", i%aggregates)
		msgs[i] = newEvent(agg, i)
		want[agg] = append(want[agg], msgs[i].UUID)
	}
	return msgs, want
}

// readInOrder reads from ch until every UUID of want has arrived once, acking
// each message, and returns the first delivery of each UUID per aggregate,
// in arrival order.
func readInOrder(t *testing.T, ch <-chan *message.Message, want map[string][]string) map[string][]string {
	t.Helper()
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	got := map[string][]string{}
	seen := map[string]bool{}
	deadline := time.After(waitTimeout + time.Duration(total)*time.Millisecond)
	for len(seen) < total {
		select {
		case msg, ok := <-ch:
			if !ok {
				t.Fatalf("subscription closed after %d of %d messages", len(seen), total)
			}
			if !seen[msg.UUID] {
				seen[msg.UUID] = true
				agg := msg.Metadata.Get(runtime.MetadataAggregateID)
				got[agg] = append(got[agg], msg.UUID)
			}
			msg.Ack()
		case <-deadline:
			t.Fatalf("received %d of %d messages, lost %d", len(seen), total, total-len(seen))
		}
	}
	return got
}

// publishInBatches publishes msgs in calls of batch messages, as the relay
// does.
func publishInBatches(t *testing.T, pub message.Publisher, topic string, msgs []*message.Message, batch int) {
	t.Helper()
	for i := 0; i < len(msgs); i += batch {
		end := min(i+batch, len(msgs))
		if err := pub.Publish(topic, msgs[i:end]...); err != nil {
			t.Fatalf("Publish(%q, msgs[%d:%d]): %v", topic, i, end, err)
		}
	}
}

// TestWatermillDurableQueueLosesUnroutable documents the bug this package
// fixes: watermill-amqp's NewDurableQueueConfig publisher, even with
// ConfirmDelivery and Mandatory, returns nil for a message published before
// any subscriber declared the queue, and the message is gone.
func TestWatermillDurableQueueLosesUnroutable(t *testing.T) {
	url := brokerURL(t)
	topic := newTopic(t, url)
	cfg := wamqp.NewDurableQueueConfig(url)
	cfg.Publish.ConfirmDelivery = true
	cfg.Publish.Mandatory = true
	pub, err := wamqp.NewPublisher(cfg, watermill.NewSlogLogger(testLogger()))
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	defer pub.Close()
	if err := pub.Publish(topic, newEvent("a", 1)); err != nil {
		t.Fatalf("watermill-amqp Publish = %v; the bug is that it returns nil", err)
	}
	// Declaring the queue now shows that nothing is in it: the broker
	// dropped the message and acknowledged it.
	sub := newSubscriber(t, testConfig(t))
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatalf("SubscribeInitialize: %v", err)
	}
	if n := queueDepth(t, url, topic); n != 0 {
		t.Fatalf("queue holds %d messages; watermill-amqp no longer loses them, update this test", n)
	}
}

// TestPublishBeforeAnySubscriber is the regression test for that bug: 5,000
// messages over 200 aggregates published to a topic no subscriber has
// declared are all read back afterwards, in order per aggregate.
func TestPublishBeforeAnySubscriber(t *testing.T) {
	cfg := testConfig(t)
	topic := newTopic(t, cfg.URL)
	pub := newPublisher(t, cfg)
	msgs, want := events(5000, 200)
	publishInBatches(t, pub, topic, msgs, 500)

	sub := newSubscriber(t, cfg)
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	got := readInOrder(t, ch, want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("per-aggregate order (-want +got):\n%s", diff)
	}
}

// TestPubSubGroupsDeclaredByPublisher: in ModePubSub, the groups of
// Config.Groups get what was published before they first subscribed.
func TestPubSubGroupsDeclaredByPublisher(t *testing.T) {
	cfg := testConfig(t)
	cfg.Mode = amqp.ModePubSub
	topic := newTopic(t, cfg.URL, "billing", "shipping")
	pubCfg := cfg
	pubCfg.Groups = []string{"billing", "shipping"}
	pub := newPublisher(t, pubCfg)
	msgs, want := events(100, 4)
	publishInBatches(t, pub, topic, msgs, 50)
	for _, g := range pubCfg.Groups {
		c := cfg
		c.Group = g
		ch, err := newSubscriber(t, c).Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		if diff := cmp.Diff(want, readInOrder(t, ch, want)); diff != "" {
			t.Errorf("group %s: per-aggregate order (-want +got):\n%s", g, diff)
		}
	}
}

// publishErrors returns the per-message errors err wraps.
func publishErrors(t *testing.T, err error, n int) runtime.PublishErrors {
	t.Helper()
	var errs runtime.PublishErrors
	if !errors.As(err, &errs) || len(errs) != n {
		t.Fatalf("error %v wraps no runtime.PublishErrors of %d messages", err, n)
	}
	return errs
}

// TestUnroutableIsPermanent: a message no queue takes right after the
// publisher declared the topology fails permanently, naming the exchange and
// routing key, and is never reported published; one whose queue went away
// after an earlier declaration fails retryably.
func TestUnroutableIsPermanent(t *testing.T) {
	t.Run("pubsub without queues", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.Mode = amqp.ModePubSub
		topic := newTopic(t, cfg.URL)
		pub := newPublisher(t, cfg)
		err := pub.Publish(topic, newEvent("a", 1), newEvent("a", 2))
		errs := publishErrors(t, err, 2)
		for i, e := range errs {
			var unroutable *amqp.UnroutableError
			if !runtime.IsPermanent(e) || !errors.As(e, &unroutable) {
				t.Fatalf("message %d: error %v, want a permanent *UnroutableError", i, e)
			}
			if unroutable.Exchange != topic || unroutable.RoutingKey != "" {
				t.Errorf("message %d: UnroutableError{Exchange: %q, RoutingKey: %q}, want exchange %q", i, unroutable.Exchange, unroutable.RoutingKey, topic)
			}
		}
		if !runtime.IsPermanent(err) {
			t.Errorf("runtime.IsPermanent(%v) = false", err)
		}
		t.Logf("error: %v", errs[0])
	})
	t.Run("queue deleted behind the publisher's back", func(t *testing.T) {
		cfg := testConfig(t)
		topic := newTopic(t, cfg.URL)
		pub := newPublisher(t, cfg)
		if err := pub.Publish(topic, newEvent("a", 1)); err != nil {
			t.Fatalf("first Publish: %v", err)
		}
		deleteTopology(t, cfg.URL, topic)
		err := pub.Publish(topic, newEvent("a", 2))
		errs := publishErrors(t, err, 1)
		var unroutable *amqp.UnroutableError
		// Retryable: the retry declares the queue again and succeeds (as
		// below), whereas a permanent error would park the event and hold
		// its aggregate back until someone unparks it.
		if runtime.IsPermanent(errs[0]) || !errors.As(errs[0], &unroutable) {
			t.Fatalf("Publish after the queue was deleted = %v, want a retryable *UnroutableError", err)
		}
		if unroutable.Exchange != "" || unroutable.RoutingKey != topic {
			t.Errorf("UnroutableError{Exchange: %q, RoutingKey: %q}, want the default exchange and %q", unroutable.Exchange, unroutable.RoutingKey, topic)
		}
		// The return made the publisher forget the topology: the next
		// Publish declares the queue again.
		if err := pub.Publish(topic, newEvent("a", 3)); err != nil {
			t.Fatalf("Publish after redeclaring: %v", err)
		}
		if n := queueDepth(t, cfg.URL, topic); n != 1 {
			t.Errorf("queue holds %d messages, want 1", n)
		}
	})
}

// TestNackIsRetryable: a queue that rejects publishes when full
// (x-overflow=reject-publish) makes the broker nack; those messages fail
// retryably, the others are reported published.
func TestNackIsRetryable(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueArguments["x-max-length"] = int64(2)
	cfg.QueueArguments["x-overflow"] = "reject-publish"
	topic := newTopic(t, cfg.URL)
	pub := newPublisher(t, cfg)
	err := pub.Publish(topic, newEvent("a", 1), newEvent("a", 2), newEvent("a", 3), newEvent("a", 4))
	errs := publishErrors(t, err, 4)
	for i, e := range errs {
		switch {
		case i < 2 && e != nil:
			t.Errorf("message %d: %v, want nil (the queue had room)", i, e)
		case i >= 2 && (!errors.Is(e, amqp.ErrNacked) || runtime.IsPermanent(e)):
			t.Errorf("message %d: %v, want a retryable ErrNacked", i, e)
		}
	}
	if runtime.IsPermanent(err) {
		t.Errorf("runtime.IsPermanent(%v) = true", err)
	}
}

// TestMessageTooLargeIsPermanent publishes a message one byte over
// RabbitMQ's default max_message_size (128 MiB) between two small ones: it
// fails permanently, and the small one after it, lost with the closed
// channel, fails retryably.
func TestMessageTooLargeIsPermanent(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 128 MiB")
	}
	cfg := testConfig(t)
	cfg.ConfirmTimeout = 2 * time.Minute
	topic := newTopic(t, cfg.URL)
	pub := newPublisher(t, cfg)
	big := message.NewMessage(watermill.NewUUID(), make([]byte, 128<<20+1))
	err := pub.Publish(topic, newEvent("a", 1), big, newEvent("a", 3))
	if err == nil {
		t.Skip("the broker took a 128 MiB + 1 message: its max_message_size is larger than the default")
	}
	errs := publishErrors(t, err, 3)
	if errs[0] != nil {
		t.Errorf("message before the large one: %v, want nil", errs[0])
	}
	if !errors.Is(errs[1], amqp.ErrMessageTooLarge) || !runtime.IsPermanent(errs[1]) {
		t.Errorf("large message: %v, want a permanent ErrMessageTooLarge", errs[1])
	}
	if !errors.Is(errs[2], amqp.ErrUnconfirmed) || runtime.IsPermanent(errs[2]) {
		t.Errorf("message after the large one: %v, want a retryable ErrUnconfirmed", errs[2])
	}
	// The channel closed; the next Publish opens another.
	if err := pub.Publish(topic, newEvent("a", 3)); err != nil {
		t.Fatalf("Publish after the channel closed: %v", err)
	}
}

// TestInvalidTopicIsPermanent: topics that cannot name a queue fail at once.
func TestInvalidTopicIsPermanent(t *testing.T) {
	pub, err := amqp.NewPublisher(amqp.Config{URL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	long := string(make([]byte, 256))
	for _, topic := range []string{"", "amq.orders", long} {
		err := pub.Publish(topic, newEvent("a", 1))
		if !errors.Is(err, amqp.ErrInvalidTopic) || !runtime.IsPermanent(err) {
			t.Errorf("Publish(%.20q) = %v, want a permanent ErrInvalidTopic", topic, err)
		}
	}
}

// TestPublishAfterConnectionLoss cuts the connection while a Publish of
// 20,000 messages waits for confirms: Publish fails for every message it
// does not report published, every message it does report published is in
// the queue, and the next Publish reconnects.
func TestPublishAfterConnectionLoss(t *testing.T) {
	cfg := testConfig(t)
	u, err := url.Parse(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := runtimetest.StartProxy(t, u.Host)
	direct := cfg.URL
	u.Host = proxy.Addr()
	cfg.URL = u.String()
	topic := newTopic(t, direct)
	pub := newPublisher(t, cfg)
	if err := pub.Publish(topic, newEvent("warm", 0)); err != nil {
		t.Fatalf("first Publish: %v", err)
	}

	msgs, _ := events(20000, 10)
	done := make(chan error, 1)
	go func() { done <- pub.Publish(topic, msgs...) }()
	// Cut once the broker has some of the messages.
	deadline := time.Now().Add(waitTimeout)
	for queueDepth(t, direct, topic) < 100 {
		if time.Now().After(deadline) {
			t.Fatal("the queue never reached 100 messages")
		}
	}
	proxy.Refuse()
	err = <-done
	if err == nil {
		t.Fatal("Publish = nil after the connection was cut mid-publish")
	}
	errs := publishErrors(t, err, len(msgs))
	acked := map[string]bool{}
	for i, e := range errs {
		switch {
		case e == nil:
			acked[msgs[i].UUID] = true
		case runtime.IsPermanent(e) || !errors.Is(e, amqp.ErrUnconfirmed):
			t.Fatalf("message %d: %v, want a retryable ErrUnconfirmed", i, e)
		}
	}
	t.Logf("%d of %d reported published before the cut: %v", len(acked), len(msgs), err)

	// Every message reported published is in the queue.
	conn, err := amqp091.Dial(direct)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	inQueue := map[string]bool{}
	for {
		d, ok, err := ch.Get(topic, true)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if !ok {
			break
		}
		inQueue[d.MessageId] = true
	}
	for id := range acked {
		if !inQueue[id] {
			t.Fatalf("message %s reported published but not in the queue", id)
		}
	}

	proxy.Accept()
	if err := pub.Publish(topic, newEvent("after", 1)); err != nil {
		t.Fatalf("Publish after the connection came back: %v", err)
	}
}

// TestConfirmTimeout: a connection that goes silent (half-open) makes
// Publish fail with ErrUnconfirmed after ConfirmTimeout, never nil, and the
// next Publish uses a new connection.
func TestConfirmTimeout(t *testing.T) {
	cfg := testConfig(t)
	u, err := url.Parse(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := runtimetest.StartProxy(t, u.Host)
	direct := cfg.URL
	u.Host = proxy.Addr()
	cfg.URL = u.String()
	cfg.ConfirmTimeout = time.Second
	topic := newTopic(t, direct)
	pub := newPublisher(t, cfg)
	if err := pub.Publish(topic, newEvent("a", 1)); err != nil {
		t.Fatalf("first Publish: %v", err)
	}
	proxy.Blackhole()
	err = pub.Publish(topic, newEvent("a", 2))
	errs := publishErrors(t, err, 1)
	if !errors.Is(errs[0], amqp.ErrUnconfirmed) || runtime.IsPermanent(errs[0]) {
		t.Fatalf("Publish on a silent connection = %v, want a retryable ErrUnconfirmed", err)
	}
	// The publisher abandoned the silent connection: the next Publish
	// dials a new one (the proxy forwards new connections).
	if err := pub.Publish(topic, newEvent("a", 3)); err != nil {
		t.Fatalf("Publish after the timeout: %v", err)
	}
	// A connection that goes silent before a topic's queue is declared:
	// the declaration is cut off at ConfirmTimeout too.
	topic2 := newTopic(t, direct)
	proxy.Blackhole()
	if err := pub.Publish(topic2, newEvent("b", 1)); err == nil || runtime.IsPermanent(err) {
		t.Fatalf("Publish needing a declaration on a silent connection = %v, want a retryable error", err)
	}
	if err := pub.Publish(topic2, newEvent("b", 2)); err != nil {
		t.Fatalf("Publish after the failed declaration: %v", err)
	}
	if n := queueDepth(t, direct, topic2); n != 1 {
		t.Errorf("queue %s holds %d messages, want 1", topic2, n)
	}
}

// TestQueueWithOtherArguments: a topic whose queue exists with other
// arguments (here, declared by plain watermill-amqp) fails Publish
// retryably, never nil, until the config matches it (CompetingConsumers).
func TestQueueWithOtherArguments(t *testing.T) {
	cfg := testConfig(t)
	topic := newTopic(t, cfg.URL)
	conn, err := amqp091.Dial(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(topic, true, false, false, false, nil); err != nil {
		t.Fatalf("QueueDeclare: %v", err)
	}
	pub := newPublisher(t, cfg)
	err = pub.Publish(topic, newEvent("a", 1))
	if err == nil || runtime.IsPermanent(err) {
		t.Fatalf("Publish to a queue declared with other arguments = %v, want a retryable error", err)
	}
	t.Logf("error: %v", err)
	plain := amqp.Config{URL: cfg.URL, CompetingConsumers: true}
	if err := newPublisher(t, plain).Publish(topic, newEvent("a", 2)); err != nil {
		t.Fatalf("Publish with CompetingConsumers: %v", err)
	}
}
