package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gooutbox/outbox/adapters/nats"
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

// TestDottedTopic publishes to and consumes from "orders.created", which
// the default configuration of watermill-nats cannot: the stream name is
// derived, the subject is the topic.
func TestDottedTopic(t *testing.T) {
	_, js := connect(t)
	stream := nats.StreamConfig{Prefix: streamPrefix(t, js)}
	topic := "orders.created." + watermill.NewShortUUID()
	pub := newPublisher(t, nats.PublisherConfig{Stream: stream})
	msg := eventMessage("order-1", 1)
	if err := pub.Publish(topic, msg); err != nil {
		t.Fatalf("Publish(%q): %v", topic, err)
	}
	name := nats.StreamName(stream.Prefix, topic)
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %q: %v", name, err)
	}
	cfg := s.CachedInfo().Config
	if cfg.Storage != jetstream.FileStorage || cfg.Duplicates != 10*time.Minute ||
		len(cfg.Subjects) != 1 || cfg.Subjects[0] != topic {
		t.Errorf("stream config: storage %v, duplicates %s, subjects %v; want file, 10m, [%s]", cfg.Storage, cfg.Duplicates, cfg.Subjects, topic)
	}

	sub := newSubscriber(t, nats.SubscriberConfig{ConsumerGroup: "billing.v1", Stream: stream})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", topic, err)
	}
	got := receive(t, ch)
	got.Ack()
	if got.UUID != msg.UUID || string(got.Payload) != string(msg.Payload) {
		t.Errorf("got %s %s, want %s %s", got.UUID, got.Payload, msg.UUID, msg.Payload)
	}
	for _, k := range []string{runtime.MetadataEventID, runtime.MetadataAggregateID, runtime.MetadataEventType, "seq"} {
		if got.Metadata.Get(k) != msg.Metadata.Get(k) {
			t.Errorf("metadata %s = %q, want %q", k, got.Metadata.Get(k), msg.Metadata.Get(k))
		}
	}
}

// TestExistingStream publishes to a topic captured by a stream created by
// hand ("orders.>"): the publisher uses it instead of creating its own.
func TestExistingStream(t *testing.T) {
	_, js := connect(t)
	prefix := streamPrefix(t, js)
	root := "hand" + watermill.NewShortUUID()
	name := prefix + "_hand"
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: name, Subjects: []string{root + ".>"}, Storage: jetstream.MemoryStorage,
	}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	pub := newPublisher(t, nats.PublisherConfig{Stream: nats.StreamConfig{Prefix: prefix}})
	if err := pub.Publish(root+".created", eventMessage("a", 1)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("hand-made stream holds %d messages, want 1", n)
	}
	if _, err := js.Stream(context.Background(), nats.StreamName(prefix, root+".created")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("own stream lookup = %v, want ErrStreamNotFound (none created)", err)
	}
}

// TestDedup republishes the same event ids (as the relay does after an
// ambiguous failure): JetStream acknowledges them as duplicates, Publish
// returns nil, and the subscriber sees each event once.
func TestDedup(t *testing.T) {
	_, js := connect(t)
	stream := nats.StreamConfig{Prefix: streamPrefix(t, js)}
	topic := "dedup." + watermill.NewShortUUID()
	pub := newPublisher(t, nats.PublisherConfig{Stream: stream})
	msgs := []*message.Message{eventMessage("a", 1), eventMessage("a", 2), eventMessage("b", 1)}
	for range 3 {
		if err := pub.Publish(topic, msgs...); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	// A republish of one message alone, as the relay's retry of a single
	// failed message would be.
	if err := pub.Publish(topic, msgs[1]); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	marker := eventMessage("z", 1)
	if err := pub.Publish(topic, marker); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	s, err := js.Stream(context.Background(), nats.StreamName(stream.Prefix, topic))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 4 {
		t.Errorf("stream holds %d messages, want 4 (3 events and the marker)", n)
	}
	sub := newSubscriber(t, nats.SubscriberConfig{ConsumerGroup: "g", Stream: stream})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m := receive(t, ch)
		m.Ack()
		if m.UUID == marker.UUID {
			break
		}
		got = append(got, m.UUID)
	}
	want := []string{msgs[0].UUID, msgs[1].UUID, msgs[2].UUID}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("received %v, want each event once: %v", got, want)
	}
}

// TestRedriveIsNotADuplicate: a dead letter published again to its topic
// (a re-drive: the same UUID, with runtime/consumer's outbox_dlq_at
// metadata) is stored, though its event was published within the dedup
// window; the same re-drive again is a duplicate. JetStream dropped the
// re-drive as a duplicate of the original, and Publish said nil (a new
// user's trial: the re-driven events were never applied).
func TestRedriveIsNotADuplicate(t *testing.T) {
	_, js := connect(t)
	stream := nats.StreamConfig{Prefix: streamPrefix(t, js)}
	topic := "redrive." + watermill.NewShortUUID()
	pub := newPublisher(t, nats.PublisherConfig{Stream: stream})
	orig := eventMessage("a", 1)
	if err := pub.Publish(topic, orig); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	redrive := orig.Copy()
	redrive.Metadata.Set("outbox_dlq_at", "2026-12-03T10:20:00.123456789Z")
	for range 2 {
		if err := pub.Publish(topic, redrive); err != nil {
			t.Fatalf("Publish the re-drive: %v", err)
		}
	}
	s, err := js.Stream(context.Background(), nats.StreamName(stream.Prefix, topic))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("stream holds %d messages, want 2 (the event, and its re-drive once)", n)
	}
}

// TestTooLargeIsPermanent publishes a message above the server's
// max_payload between two good ones: it fails permanently, the message of
// the same aggregate after it is not sent, and the other aggregate's message
// is stored.
func TestTooLargeIsPermanent(t *testing.T) {
	nc, js := connect(t)
	stream := nats.StreamConfig{Prefix: streamPrefix(t, js)}
	topic := "large." + watermill.NewShortUUID()
	pub := newPublisher(t, nats.PublisherConfig{Stream: stream})
	big := eventMessage("a", 1)
	big.Payload = make([]byte, nc.MaxPayload()+1)
	after := eventMessage("a", 2)
	other := eventMessage("b", 1)
	err := pub.Publish(topic, big, after, other)
	if err == nil {
		t.Fatal("Publish of a message above max_payload succeeded")
	}
	if !runtime.IsPermanent(err) || !errors.Is(err, natsgo.ErrMaxPayload) {
		t.Errorf("Publish = %v, want a permanent error wrapping nats.ErrMaxPayload", err)
	}
	var perMessage runtime.PublishErrors
	if !errors.As(err, &perMessage) || len(perMessage) != 3 {
		t.Fatalf("Publish = %v, want runtime.PublishErrors of 3", err)
	}
	if !runtime.IsPermanent(perMessage[0]) {
		t.Errorf("message 0: %v, want permanent", perMessage[0])
	}
	if perMessage[1] == nil || runtime.IsPermanent(perMessage[1]) {
		t.Errorf("message 1 (same aggregate, after the bad one): %v, want a retryable error", perMessage[1])
	}
	if perMessage[2] != nil {
		t.Errorf("message 2 (other aggregate): %v, want nil", perMessage[2])
	}
	s, err := js.Stream(context.Background(), nats.StreamName(stream.Prefix, topic))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("stream holds %d messages, want 1", n)
	}
}

// TestInvalidTopicIsPermanent publishes to topics that are not subjects.
func TestInvalidTopicIsPermanent(t *testing.T) {
	_, js := connect(t)
	pub := newPublisher(t, nats.PublisherConfig{Stream: nats.StreamConfig{Prefix: streamPrefix(t, js)}})
	for _, topic := range []string{"", "orders created", "orders.*", "orders.>", "orders..x", ".orders", "orders."} {
		err := pub.Publish(topic, eventMessage("a", 1))
		if !runtime.IsPermanent(err) || !errors.Is(err, nats.ErrInvalidTopic) {
			t.Errorf("Publish(%q) = %v, want a permanent error wrapping ErrInvalidTopic", topic, err)
		}
	}
}

// TestClosedConnectionIsRetryable publishes through a closed connection:
// the error is retryable.
func TestClosedConnectionIsRetryable(t *testing.T) {
	connect(t)
	nc, err := natsgo.Connect(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, nats.PublisherConfig{Conn: nc, PublishTimeout: 2 * time.Second})
	nc.Close()
	err = pub.Publish("closed."+watermill.NewShortUUID(), eventMessage("a", 1))
	if err == nil || runtime.IsPermanent(err) || !errors.Is(err, natsgo.ErrConnectionClosed) {
		t.Errorf("Publish on a closed connection = %v, want a retryable error wrapping nats.ErrConnectionClosed", err)
	}
}

// TestOrderPerAggregate publishes 5,000 messages over 200 aggregates in
// relay-sized batches and reads them back through two subscribers of one
// group: each aggregate's messages arrive in publish order.
func TestOrderPerAggregate(t *testing.T) {
	_, js := connect(t)
	stream := nats.StreamConfig{Prefix: streamPrefix(t, js)}
	topic := "order." + watermill.NewShortUUID()
	pub := newPublisher(t, nats.PublisherConfig{Stream: stream})
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

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	merged := make(chan *message.Message)
	for range 2 {
		sub := newSubscriber(t, nats.SubscriberConfig{ConsumerGroup: "order", Stream: stream})
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for m := range ch {
				select {
				case merged <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	next := make(map[string]int)
	seen := make(map[string]bool)
	for len(seen) < total {
		m := receive(t, merged)
		agg := m.Metadata.Get(runtime.MetadataAggregateID)
		seq := m.Metadata.Get("seq")
		m.Ack()
		if seen[m.UUID] {
			continue // a redelivery: at least once
		}
		seen[m.UUID] = true
		if want := fmt.Sprint(next[agg]); seq != want {
			t.Fatalf("aggregate %s: got seq %s, want %s", agg, seq, want)
		}
		next[agg]++
	}
}

// TestNackAcrossSubscribers nacks a message many times through three
// subscribers of one group in turn, closing each, then reads everything
// with a fourth. This is the pattern that stalls a MaxAckPending 1
// consumer on nats-server 2.9 when redeliveries reach a pull request whose
// subscriber is gone (see Subscriber.consume).
func TestNackAcrossSubscribers(t *testing.T) {
	_, js := connect(t)
	stream := nats.StreamConfig{Prefix: streamPrefix(t, js)}
	topic := "nack." + watermill.NewShortUUID()
	pub := newPublisher(t, nats.PublisherConfig{Stream: stream})
	var want []string
	for i := range 20 {
		m := eventMessage("a", i)
		want = append(want, m.UUID)
		if err := pub.Publish(topic, m); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		sub, err := nats.NewSubscriber(nats.SubscriberConfig{URL: serverURL(), ConsumerGroup: "g", Stream: stream, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ch, err := sub.Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		for range 30 {
			m := receive(t, ch)
			if m.UUID != want[0] {
				t.Fatalf("got %s, want the nacked first message %s again", m.UUID, want[0])
			}
			m.Nack()
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
	}
	sub := newSubscriber(t, nats.SubscriberConfig{ConsumerGroup: "g", Stream: stream})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(want); {
		m := receive(t, ch)
		m.Ack()
		if i > 0 && m.UUID == want[i-1] {
			continue // a redelivery of the previous one
		}
		if m.UUID != want[i] {
			t.Fatalf("message %d: got %s, want %s", i, m.UUID, want[i])
		}
		i++
	}
}

// TestDeletedStream deletes the topic's stream after a publish: the next
// publish fails retryably (no stream answers), and the one after that
// creates the stream again.
func TestDeletedStream(t *testing.T) {
	_, js := connect(t)
	stream := nats.StreamConfig{Prefix: streamPrefix(t, js)}
	topic := "deleted." + watermill.NewShortUUID()
	pub := newPublisher(t, nats.PublisherConfig{Stream: stream, PublishTimeout: 3 * time.Second})
	if err := pub.Publish(topic, eventMessage("a", 1)); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(context.Background(), nats.StreamName(stream.Prefix, topic)); err != nil {
		t.Fatal(err)
	}
	err := pub.Publish(topic, eventMessage("a", 2))
	if err == nil || runtime.IsPermanent(err) {
		t.Fatalf("Publish after the stream was deleted = %v, want a retryable error", err)
	}
	if err := pub.Publish(topic, eventMessage("a", 2)); err != nil {
		t.Fatalf("second Publish after the stream was deleted = %v, want nil (stream created again)", err)
	}
}

// TestStreamUpdated publishes with one duplicate window, then through a new
// publisher with another: the publisher creates or updates its stream, so
// the stream takes the new window.
func TestStreamUpdated(t *testing.T) {
	_, js := connect(t)
	prefix := streamPrefix(t, js)
	topic := "updated." + watermill.NewShortUUID()
	name := nats.StreamName(prefix, topic)
	for _, window := range []time.Duration{0, 20 * time.Minute} {
		pub := newPublisher(t, nats.PublisherConfig{Stream: nats.StreamConfig{Prefix: prefix, DedupWindow: window}})
		if err := pub.Publish(topic, eventMessage("a", 1)); err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		want := window
		if want == 0 {
			want = 10 * time.Minute // the default
		}
		if got := s.CachedInfo().Config.Duplicates; got != want {
			t.Errorf("with DedupWindow %s: stream Duplicates = %s, want %s", window, got, want)
		}
	}
}

// TestStreamMaxMsgSizeHoldsAggregate publishes, in one call, a message the
// stream refuses (larger than its max_msg_size: the refusal comes in the
// PubAck, after later messages were sent) followed by another message of the
// same aggregate: the later one must not be stored ahead of the refused one.
func TestStreamMaxMsgSizeHoldsAggregate(t *testing.T) {
	_, js := connect(t)
	stream := nats.StreamConfig{
		Prefix:    streamPrefix(t, js),
		Configure: func(c *jetstream.StreamConfig) { c.MaxMsgSize = 1024 },
	}
	topic := "maxmsgsize." + watermill.NewShortUUID()
	pub := newPublisher(t, nats.PublisherConfig{Stream: stream})
	big := eventMessage("a", 1)
	big.Payload = make([]byte, 2048)
	after := eventMessage("a", 2)
	other := eventMessage("b", 1)
	err := pub.Publish(topic, big, after, other)
	var perMessage runtime.PublishErrors
	if !errors.As(err, &perMessage) || len(perMessage) != 3 {
		t.Fatalf("Publish = %v, want runtime.PublishErrors of 3", err)
	}
	if !runtime.IsPermanent(perMessage[0]) {
		t.Errorf("message 0 (above max_msg_size): %v, want permanent", perMessage[0])
	}
	if perMessage[1] == nil || runtime.IsPermanent(perMessage[1]) {
		t.Errorf("message 1 (same aggregate, after the refused one): %v, want a retryable error", perMessage[1])
	}
	if perMessage[2] != nil {
		t.Errorf("message 2 (other aggregate): %v, want nil", perMessage[2])
	}
	s, err := js.Stream(context.Background(), nats.StreamName(stream.Prefix, topic))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("stream holds %d messages, want 1 (the other aggregate's)", n)
	}
}
