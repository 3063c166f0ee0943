package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/redis"
	"github.com/gooutbox/outbox/runtime"
)

// eventMessage returns a message as the relay builds it.
func eventMessage(aggregate string, seq int) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"aggregate":%q,"seq":%d}`, aggregate, seq))
	msg.Metadata.Set(runtime.MetadataEventID, msg.UUID)
	msg.Metadata.Set(runtime.MetadataEventType, "order.placed")
	msg.Metadata.Set(runtime.MetadataAggregateType, "order")
	msg.Metadata.Set(runtime.MetadataAggregateID, aggregate)
	msg.Metadata.Set("seq", fmt.Sprint(seq))
	return msg
}

func publishN(t *testing.T, pub *redis.Publisher, topic string, n int) {
	t.Helper()
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = eventMessage("a", i)
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// TestPublishSubscribe round-trips a message with its metadata.
func TestPublishSubscribe(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "orders.placed"
	pub := newPublisher(t, redis.PublisherConfig{})
	msg := eventMessage("order-1", 1)
	if err := pub.Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	sub := newSubscriber(t, redis.SubscriberConfig{ConsumerGroup: "billing"})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, ch)
	got.Ack()
	if got.UUID != msg.UUID || string(got.Payload) != string(msg.Payload) {
		t.Errorf("got %s %s, want %s %s", got.UUID, got.Payload, msg.UUID, msg.Payload)
	}
	for k, v := range msg.Metadata {
		if got.Metadata.Get(k) != v {
			t.Errorf("metadata %s = %q, want %q", k, got.Metadata.Get(k), v)
		}
	}
}

// TestNoTrimByDefault: without MaxLen or MaxAge, the stream keeps every
// entry.
func TestNoTrimByDefault(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "keep"
	pub := newPublisher(t, redis.PublisherConfig{})
	for range 5 {
		publishN(t, pub, topic, 300)
	}
	if n := client.XLen(context.Background(), topic).Val(); n != 1500 {
		t.Errorf("XLEN = %d, want 1500 (nothing trimmed)", n)
	}
}

// TestMaxLen: with MaxLen the stream is trimmed to about MaxLen entries
// (approximately: whole internal nodes, stream-node-max-entries 100 by
// default), never below it.
func TestMaxLen(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "maxlen"
	pub := newPublisher(t, redis.PublisherConfig{MaxLen: 50})
	for range 10 {
		publishN(t, pub, topic, 100)
	}
	n := client.XLen(context.Background(), topic).Val()
	if n < 50 || n > 300 {
		t.Errorf("XLEN = %d after 1000 entries with MaxLen 50, want between 50 and 300", n)
	}
}

// TestMaxAge: with MaxAge, entries older than it are trimmed on later
// publishes (approximately: a whole node goes once its newest entry is
// older than MaxAge).
func TestMaxAge(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "maxage"
	pub := newPublisher(t, redis.PublisherConfig{MaxAge: 100 * time.Millisecond})
	publishN(t, pub, topic, 150)
	first := client.XRangeN(context.Background(), topic, "-", "+", 1).Val()[0].ID
	deadline := time.Now().Add(10 * time.Second)
	for {
		publishN(t, pub, topic, 1)
		msgs := client.XRangeN(context.Background(), topic, first, first, 1).Val()
		if len(msgs) == 0 {
			break // trimmed
		}
		if time.Now().After(deadline) {
			t.Fatalf("entry %s still in the stream 10s after it was added with MaxAge 100ms", first)
		}
	}
}

// TestWrongTypeIsPermanent publishes to a key that holds a string.
func TestWrongTypeIsPermanent(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "string"
	if err := client.Set(context.Background(), topic, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, redis.PublisherConfig{})
	err := pub.Publish(topic, eventMessage("a", 1), eventMessage("b", 1))
	if !runtime.IsPermanent(err) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Publish to a string key = %v, want a permanent WRONGTYPE error", err)
	}
	var perMessage runtime.PublishErrors
	if !errors.As(err, &perMessage) || len(perMessage) != 2 || !runtime.IsPermanent(perMessage[0]) || !runtime.IsPermanent(perMessage[1]) {
		t.Errorf("Publish = %v, want PublishErrors with two permanent errors", err)
	}
}

// TestTooLargeIsPermanent publishes a message above MaxMessageBytes between
// two good ones: it fails permanently, the later message of its aggregate
// is not sent, the other aggregate's message is added.
func TestTooLargeIsPermanent(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "large"
	pub := newPublisher(t, redis.PublisherConfig{MaxMessageBytes: 1 << 10})
	big := eventMessage("a", 1)
	big.Payload = make([]byte, 2<<10)
	err := pub.Publish(topic, big, eventMessage("a", 2), eventMessage("b", 1))
	if !runtime.IsPermanent(err) || !errors.Is(err, redis.ErrMessageTooLarge) {
		t.Fatalf("Publish = %v, want a permanent error wrapping ErrMessageTooLarge", err)
	}
	var perMessage runtime.PublishErrors
	if !errors.As(err, &perMessage) || len(perMessage) != 3 {
		t.Fatalf("Publish = %v, want PublishErrors of 3", err)
	}
	if !runtime.IsPermanent(perMessage[0]) || perMessage[1] == nil || runtime.IsPermanent(perMessage[1]) || perMessage[2] != nil {
		t.Errorf("per message = %v, want permanent, retryable, nil", perMessage)
	}
	if n := client.XLen(context.Background(), topic).Val(); n != 1 {
		t.Errorf("XLEN = %d, want 1", n)
	}
}

// TestUnreachableIsRetryable publishes to a port nothing listens on.
func TestUnreachableIsRetryable(t *testing.T) {
	pub := newPublisher(t, redis.PublisherConfig{URL: "redis://127.0.0.1:1/0", PublishTimeout: 2 * time.Second})
	err := pub.Publish("x", eventMessage("a", 1))
	if err == nil || runtime.IsPermanent(err) {
		t.Errorf("Publish to an unreachable server = %v, want a retryable error", err)
	}
}

// TestOrderPerAggregate publishes 5,000 messages over 200 aggregates in
// relay-sized batches and reads them back through one subscriber of a
// group, nacking every seventh message once: each aggregate's messages
// arrive in publish order.
func TestOrderPerAggregate(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "order"
	pub := newPublisher(t, redis.PublisherConfig{})
	const total, aggregates, batch = 5000, 200, 500
	for lo := 0; lo < total; lo += batch {
		msgs := make([]*message.Message, 0, batch)
		for i := lo; i < lo+batch; i++ {
			msgs = append(msgs, eventMessage(fmt.Sprintf("agg-%03d", i%aggregates), i/aggregates))
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	sub := newSubscriber(t, redis.SubscriberConfig{ConsumerGroup: "order", BlockTime: 10 * time.Millisecond})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	next := make(map[string]int)
	nacked := make(map[string]bool)
	seen := make(map[string]bool)
	for i := 0; len(seen) < total; i++ {
		m := receive(t, ch)
		if i%7 == 0 && !nacked[m.UUID] {
			nacked[m.UUID] = true
			m.Nack()
			continue
		}
		m.Ack()
		if seen[m.UUID] {
			continue
		}
		seen[m.UUID] = true
		agg, seq := m.Metadata.Get(runtime.MetadataAggregateID), m.Metadata.Get("seq")
		if want := fmt.Sprint(next[agg]); seq != want {
			t.Fatalf("aggregate %s: got seq %s, want %s", agg, seq, want)
		}
		next[agg]++
	}
}

// TestPublishToAMissingDatabaseFails: a URL naming a database the server
// does not have (it has 16 by default) fails each publish: go-redis runs
// SELECT when it opens a connection, and a pipeline whose connection could
// not be opened used to leave its commands without an error, so Publish
// returned nil for messages it never wrote (the relay marked them
// published).
func TestPublishToAMissingDatabaseFails(t *testing.T) {
	client := connect(t)
	prefix := keyPrefix(t, client)
	u, err := url.Parse(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/99"
	pub := newPublisher(t, redis.PublisherConfig{URL: u.String()})
	err = pub.Publish(prefix+"orders", eventMessage("a", 1), eventMessage("b", 1))
	if err == nil {
		t.Fatal("Publish through a database the server does not have = nil, want an error")
	}
	var perMessage runtime.PublishErrors
	if errors.As(err, &perMessage) {
		for i, e := range perMessage {
			if e == nil {
				t.Errorf("message %d counted as published: %v", i, err)
			}
		}
	}
	if runtime.IsPermanent(err) {
		t.Errorf("Publish = %v; want a retryable error (the URL can be fixed)", err)
	}
}
