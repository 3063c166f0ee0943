package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestNackRedelivers checks that a nacked message comes back (same UUID,
// payload and metadata, fresh message), that nothing else is delivered in
// between, and that an ack commits it: a new member of the group continues
// after it.
func TestNackRedelivers(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 1)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})
	first, second := newEvent("order-1", "first"), newEvent("order-1", "second")
	if err := pub.Publish(topic, first, second); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	group := "group-" + watermill.NewShortUUID()
	sub1 := newSubscriber(t, testSubscriberConfig(brokers, group))
	ch, err := sub1.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	var prev *message.Message
	for i := range 3 {
		msg := receive(t, ch)
		if msg.UUID != first.UUID || string(msg.Payload) != "first" {
			t.Fatalf("delivery #%d = %s %q, want the first message %s again", i+1, msg.UUID, msg.Payload, first.UUID)
		}
		if msg == prev {
			t.Errorf("delivery #%d reuses the nacked *message.Message, want a fresh one", i+1)
		}
		if got := msg.Metadata.Get(runtime.MetadataAggregateID); got != "order-1" {
			t.Errorf("delivery #%d: aggregate_id = %q, want order-1", i+1, got)
		}
		prev = msg
		msg.Nack()
	}
	msg := receive(t, ch)
	if msg.UUID != first.UUID {
		t.Fatalf("after 3 nacks got %s, want the first message %s", msg.UUID, first.UUID)
	}
	msg.Ack()
	if msg = receive(t, ch); msg.UUID != second.UUID {
		t.Fatalf("after the ack got %s, want the second message %s", msg.UUID, second.UUID)
	}
	// Leave the second message unacked and hand the group to a new member:
	// the first message was committed, the second was not.
	if err := sub1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	sub2 := newSubscriber(t, testSubscriberConfig(brokers, group))
	ch2, err := sub2.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if msg := receiveN(t, ch2, 1)[0]; msg.UUID != second.UUID {
		t.Errorf("new group member got %s first, want the uncommitted second message %s", msg.UUID, second.UUID)
	}
}

// TestNackResendSleep checks that a nacked message is delivered again no
// sooner than NackResendSleep.
func TestNackResendSleep(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 1)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})
	if err := pub.Publish(topic, newEvent("order-1", "x")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	const pause = 300 * time.Millisecond
	cfg := testSubscriberConfig(brokers, "group-"+watermill.NewShortUUID())
	cfg.NackResendSleep = pause
	ch, err := newSubscriber(t, cfg).Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	msg := receive(t, ch)
	nacked := time.Now()
	msg.Nack()
	receive(t, ch).Ack()
	if waited := time.Since(nacked); waited < pause {
		t.Errorf("redelivered %s after the nack, want at least NackResendSleep %s", waited, pause)
	}
}

// TestOrderPerKeyAcrossRebalances checks order per key while members join a
// group in the middle of consumption and take partitions over: each member
// acks slowly, so partitions move while messages are in flight. As with the
// Watermill suite, redelivered duplicates are dropped (at-least-once); the
// first delivery of every message must respect publish order per key.
func TestOrderPerKeyAcrossRebalances(t *testing.T) {
	t.Parallel()
	testOrderPerKeyAcrossRebalances(t)
}

// TestOrderPerKeyAcrossRebalancesSerialPartitions is
// TestOrderPerKeyAcrossRebalances with SubscriberConfig.SerialPartitions:
// each member reads all its partitions through one kafka-go Reader (by
// default each member fetches every partition it is assigned with a reader
// of its own, stopped at the end of each generation and started again from
// the committed offset in the next).
func TestOrderPerKeyAcrossRebalancesSerialPartitions(t *testing.T) {
	t.Parallel()
	testOrderPerKeyAcrossRebalances(t, func(c *kafka.SubscriberConfig) { c.SerialPartitions = true })
}

func testOrderPerKeyAcrossRebalances(t *testing.T, tune ...func(*kafka.SubscriberConfig)) {
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 6)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})

	const keys, perKey = 12, 25
	var msgs []*message.Message
	for i := range perKey {
		for k := range keys {
			msgs = append(msgs, newEvent(fmt.Sprintf("agg-%d", k), strconv.Itoa(i)))
		}
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	group := "group-" + watermill.NewShortUUID()
	merged := make(chan *message.Message)
	done := make(chan struct{})
	defer close(done)
	join := func() {
		cfg := testSubscriberConfig(brokers, group)
		for _, f := range tune {
			f(&cfg)
		}
		ch, err := newSubscriber(t, cfg).Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		go func() {
			for msg := range ch {
				select {
				case merged <- msg:
				case <-done:
					return
				}
			}
		}()
	}
	join()
	members := 1

	seen := map[string]bool{}
	got := map[string][]string{}
	deadline := time.After(4 * waitTimeout)
	for len(seen) < len(msgs) {
		// Add a member after every 60 distinct messages, up to 4 members.
		if members < 4 && len(seen) >= 60*members {
			join()
			members++
		}
		select {
		case msg := <-merged:
			if !seen[msg.UUID] {
				seen[msg.UUID] = true
				agg := msg.Metadata.Get(runtime.MetadataAggregateID)
				got[agg] = append(got[agg], string(msg.Payload))
			}
			// Slow acks keep messages in flight during rebalances.
			time.AfterFunc(2*time.Millisecond, func() { msg.Ack() })
		case <-deadline:
			t.Fatalf("received %d of %d messages", len(seen), len(msgs))
		}
	}
	for k := range keys {
		agg := fmt.Sprintf("agg-%d", k)
		var want []string
		for i := range perKey {
			want = append(want, strconv.Itoa(i))
		}
		if diff := cmp.Diff(want, got[agg]); diff != "" {
			t.Errorf("first deliveries of %s (-want +got):\n%s", agg, diff)
		}
	}
}

// TestSubscribeInitialize checks that the topic is created with the
// configured partitions and that a second call leaves it as it is.
func TestSubscribeInitialize(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	cfg := testSubscriberConfig(brokers, "group")
	cfg.TopicPartitions = 5
	sub := newSubscriber(t, cfg)
	topic := "topic-" + watermill.NewShortUUID()
	for i := range 2 {
		if err := sub.SubscribeInitialize(topic); err != nil {
			t.Fatalf("SubscribeInitialize #%d: %v", i+1, err)
		}
	}
	conn, err := kafkago.Dial("tcp", brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		t.Fatalf("ReadPartitions: %v", err)
	}
	if len(parts) != 5 {
		t.Errorf("topic has %d partitions, want 5", len(parts))
	}
}

// TestSubscriberClose checks that Close closes every subscription channel
// and that the subscriber refuses new work afterwards.
func TestSubscriberClose(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 2)
	sub, err := kafka.NewSubscriber(testSubscriberConfig(brokers, "group-"+watermill.NewShortUUID()))
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	var chans []<-chan *message.Message
	for range 3 {
		ch, err := sub.Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		chans = append(chans, ch)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- sub.Close() }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Close: %v", err)
		}
	}
	for i, ch := range chans {
		select {
		case _, ok := <-ch:
			if ok {
				t.Errorf("subscription %d delivered a message after Close", i)
			}
		default:
			t.Errorf("subscription %d channel still open after Close returned", i)
		}
	}
	if _, err := sub.Subscribe(context.Background(), topic); !errors.Is(err, kafka.ErrSubscriberClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrSubscriberClosed", err)
	}
	if err := sub.SubscribeInitialize(topic); !errors.Is(err, kafka.ErrSubscriberClosed) {
		t.Errorf("SubscribeInitialize after Close = %v, want ErrSubscriberClosed", err)
	}
}

// TestSubscribeContextCancel checks that cancelling the Subscribe context
// closes the channel and cancels the context of the message in flight.
func TestSubscribeContextCancel(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 1)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})
	if err := pub.Publish(topic, newEvent("order-1", "x")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	sub := newSubscriber(t, testSubscriberConfig(brokers, "group-"+watermill.NewShortUUID()))
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	msg := receive(t, ch)
	cancel()
	select {
	case <-msg.Context().Done():
	case <-time.After(waitTimeout):
		t.Fatal("message context not cancelled after the Subscribe context was")
	}
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("got a message after cancelling the Subscribe context")
		}
	case <-time.After(waitTimeout):
		t.Fatal("channel not closed after cancelling the Subscribe context")
	}
}

// TestSubscribeInitializeUnreachable checks that an unreachable cluster is
// an error, not a hang.
func TestSubscribeInitializeUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	sub := newSubscriber(t, testSubscriberConfig([]string{addr}, "group"))
	if err := sub.SubscribeInitialize("topic"); err == nil {
		t.Errorf("SubscribeInitialize against %s = nil, want an error", addr)
	}
}

// TestReaderErrorsAreWarnings: what kafka-go retries by itself (here: a
// group join against a broker that refuses connections) is logged at WARN,
// so a member that cannot join its group is visible at the usual
// production level (it was INFO: found by a new user's trial).
func TestReaderErrorsAreWarnings(t *testing.T) {
	t.Parallel()
	var logs runtimetest.LogBuffer
	cfg := testSubscriberConfig([]string{"127.0.0.1:1"}, "group-"+watermill.NewShortUUID())
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	sub := newSubscriber(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := sub.Subscribe(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for l := logs.String(); !strings.Contains(l, `level=WARN msg="kafka-go reader error"`) || !strings.Contains(l, "topic=orders"); l = logs.String() {
		if time.Now().After(deadline) {
			t.Fatalf("no WARN from the reader within %s; logs:\n%s", waitTimeout, logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the log
	}
}
